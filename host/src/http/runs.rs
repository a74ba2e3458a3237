//! `GET /api/agents/{name}/runs/{correlation_id}`: the stored state of a run.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::run_body::RunView;
use super::{ApiError, AppState};

/// A run: its status, its answer or error, its pending tool calls.
#[utoipa::path(
    get,
    path = "/api/agents/{name}/runs/{correlation_id}",
    tag = "agents",
    params(("name" = String, Path), ("correlation_id" = String, Path)),
    responses(
        (status = 200, description = "The run", body = super::run_body::RunView),
        super::schemas::Failures
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Path((name, correlation_id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    match state.store.run(&correlation_id).await? {
        Some(run) if run.agent == name => {
            let pending = if run.status.is_finished() {
                Vec::new()
            } else {
                state.store.pending_approvals(&correlation_id).await?
            };
            Ok(Json(RunView::new(&run, pending)).into_response())
        }
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "run_not_found",
            format!("agent '{name}' has no run with correlation id '{correlation_id}'"),
        )),
    }
}
