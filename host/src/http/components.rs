//! `GET /api/components`: every loaded component and every file that failed.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::AppState;

/// A component whose newer file failed to load still serves its previous
/// version; its entry carries the error so operators see both facts at once.
#[utoipa::path(
    get,
    path = "/api/components",
    tag = "operations",
    responses(
        (status = 200, description = "`{components: [...], failures: [...]}`", body = Object),
        super::schemas::Failures
    )
)]
pub async fn list(State(state): State<AppState>) -> Json<Value> {
    let failures = state.registry.failures();
    let components: Vec<Value> = state
        .registry
        .components()
        .iter()
        .map(|c| {
            let mut described = c.describe_json();
            if let Some(failure) = failures.iter().find(|f| f.file == c.path) {
                described["load_error"] = json!(failure.error);
            }
            described
        })
        .collect();
    Json(json!({"components": components, "failures": failures}))
}
