//! `GET /api/agents/{name}/runs/{correlation_id}`: the stored state of a run.

use axum::extract::{Path, State};
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
    let run = state.runs.state(&name, &correlation_id).await?;
    Ok(Json(RunView::new(&run.record, run.pending)).into_response())
}
