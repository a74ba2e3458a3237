//! `GET /api/health`: liveness and the agents being served.

use axum::extract::State;
use axum::Json;

use super::run_body::{AgentHealth, Health};
use super::AppState;

pub async fn get(State(state): State<AppState>) -> Json<Health> {
    let agents = state
        .registry
        .agent_names()
        .into_iter()
        .map(|name| AgentHealth {
            name,
            status: "ready",
        })
        .collect();
    Json(Health {
        status: "healthy",
        agents,
    })
}
