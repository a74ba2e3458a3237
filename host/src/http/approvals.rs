//! `POST /api/agents/{name}/runs/{correlation_id}/approvals`: a human's
//! decision on a tool call the run waits for: `{"call_id" | "callId",
//! "approved", "reason"?}`. Approved, the tool runs; denied, the model is
//! told so (with the reason). 202: the run goes on (follow it with its
//! `runUrl` or `streamUrl`).

use super::caller::{visible_run, Caller};
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::body::read_limited;
use super::keys::Grant;
use super::{error, ApiError, AppState};
use crate::runs::Decision;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(utoipa::ToSchema)]
struct DecisionBody {
    #[serde(alias = "callId")]
    call_id: String,
    approved: bool,
    reason: Option<String>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct Accepted {
    status: &'static str,
    correlation_id: String,
    call_id: String,
    approved: bool,
    run_url: String,
    stream_url: String,
}

/// Approves or denies one pending tool call of a run.
#[utoipa::path(
    post,
    path = "/api/agents/{name}/runs/{correlation_id}/approvals",
    tag = "agents",
    params(("name" = String, Path), ("correlation_id" = String, Path)),
    request_body = DecisionBody,
    responses(
        (status = 202, description = "Decided; the run goes on", body = Accepted),
        super::schemas::Failures
    )
)]
pub async fn decide(
    State(state): State<AppState>,
    Path((name, correlation_id)): Path<(String, String)>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    // The body first: one past the limit is refused before anything is read.
    let body = read_limited(&headers, body, &state.config).await?;
    visible_run(&state, &caller, &name, &correlation_id).await?;
    let body: DecisionBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(
            "invalid_decision",
            format!("the body must be {{\"call_id\": \"...\", \"approved\": true|false, \"reason\": \"...\"}}: {e}"),
        )
    })?;
    let decision = Decision {
        approved: body.approved,
        reason: body.reason.clone().filter(|r| !r.trim().is_empty()),
    };
    state
        .runs
        .approve(&name, &correlation_id, &body.call_id, decision)
        .await?;
    let run_url = format!("/api/agents/{name}/runs/{correlation_id}");
    // The run's token, as a run's own 202 carries it: the stream then opens
    // without a key.
    let token = state
        .config
        .keys
        .token(Grant::RunStream, &correlation_id, 0);
    Ok(error::accepted(Json(Accepted {
        status: "accepted",
        stream_url: format!(
            "{run_url}/stream{}",
            token.map_or_else(String::new, |t| format!("?token={t}"))
        ),
        run_url,
        correlation_id,
        call_id: body.call_id,
        approved: body.approved,
    })))
}
