//! `GET /api/health`: liveness and the agents being served.

use axum::extract::State;
use axum::Json;
use serde_json::{json, Value};

use super::AppState;

pub async fn get(State(state): State<AppState>) -> Json<Value> {
    let agents: Vec<Value> = state
        .registry
        .agent_names()
        .into_iter()
        .map(|name| json!({"name": name, "status": "ready"}))
        .collect();
    Json(json!({"status": "healthy", "agents": agents}))
}
