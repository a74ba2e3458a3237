//! What the Azure Functions host sends a custom handler that is not a
//! forwarded HTTP request: the timer-triggered `agenthost-wake` function
//! (`agenthost functions init` writes it), which the Functions host posts
//! to `/agenthost-wake` as an invocation payload (`{"Data": {"timer": …},
//! "Metadata": {…}}`) and whose answer it reads in the custom handler
//! response shape (`{"Outputs", "Logs", "ReturnValue"}`).
//!
//! A platform that scaled the app to zero starts a process to run the
//! function: that process is this host, whose scheduler runs what fell due
//! meanwhile at once (a timer, a take-over after a lease); the call only
//! makes sure a pass runs now. It reads and writes nothing itself, so it
//! is open like the probes (the Functions host sends no key of ours).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::AppState;

/// `POST /agenthost-wake`: a scheduler pass now; answered as a custom
/// handler answers an invocation.
#[utoipa::path(
    post,
    path = "/agenthost-wake",
    tag = "health",
    security(()),
    request_body(content = Object, description = "The Functions host's invocation payload (`Data`, `Metadata`); read as it comes, not needed", content_type = "application/json"),
    responses(
        (status = 200, description = "The custom handler response: {Outputs: {}, Logs: [..], ReturnValue: null}", body = Object),
    )
)]
pub async fn wake(State(state): State<AppState>) -> Response {
    state.orchestrator.notify();
    Json(json!({
        "Outputs": {},
        "Logs": ["agenthost: the scheduler runs what is due"],
        "ReturnValue": null,
    }))
    .into_response()
}
