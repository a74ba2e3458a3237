//! `GET /api/agents/{name}/runs/{correlation_id}`: the stored state of a run.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde_json::Value;

use super::{agents::run_json, ApiError, AppState};

pub async fn get(
    State(state): State<AppState>,
    Path((name, correlation_id)): Path<(String, String)>,
) -> Result<Json<Value>, ApiError> {
    match state.store.run(&correlation_id).await? {
        Some(run) if run.agent == name => Ok(Json(run_json(&run))),
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "run_not_found",
            format!("agent '{name}' has no run with correlation id '{correlation_id}'"),
        )),
    }
}
