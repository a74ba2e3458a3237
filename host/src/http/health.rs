//! Health: `GET /api/health` (the agents served, and whether the host can do
//! its work), `GET /api/health/live` (should a supervisor restart this
//! process?) and `GET /api/health/ready` (should a load balancer send it
//! work?). A host whose store writer is dead or stuck answers 503 with the
//! reason: an HTTP front that still answers is no proof that work gets done.

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use serde_json::json;

use super::error;
use super::run_body::{AgentHealth, Health};
use super::AppState;

/// The host's health and the agents it serves (open: no key needed).
#[utoipa::path(
    get,
    path = "/api/health",
    tag = "health",
    security(()),
    responses(
        (status = 200, description = "Healthy, or degraded (its scheduler cannot read the store: timers and delayed retries wait) with the reason", body = Health),
        (status = 503, description = "Unhealthy, with the reason", body = Health),
    )
)]
pub async fn get(State(state): State<AppState>) -> Response {
    let agents = state
        .registry
        .agent_names()
        .into_iter()
        .map(|name| AgentHealth {
            name,
            status: "ready",
        })
        .collect();
    let not_ready = state.health.not_ready();
    let healthy = not_ready.is_none();
    let (status, reason) = match (not_ready, state.health.degraded()) {
        (Some(reason), _) => ("unhealthy", Some(reason)),
        (None, Some(reason)) => ("degraded", Some(reason)),
        (None, None) => ("healthy", None),
    };
    let body = Health {
        status,
        reason,
        agents,
    };
    error::health(healthy, Json(body))
}

/// Alive unless the writer is dead or stuck past its deadline: a restart is
/// the remedy for those, not for a database that refuses writes.
/// Whether a supervisor should restart this process.
#[utoipa::path(
    get,
    path = "/api/health/live",
    tag = "health",
    security(()),
    responses(
        (status = 200, description = "Alive", body = Object),
        (status = 503, description = "Dead or stuck: restart it", body = Object),
    )
)]
pub async fn live(State(state): State<AppState>) -> Response {
    match state.health.dead() {
        Some(reason) => answer(false, "dead", reason),
        None => answer(true, "alive", String::new()),
    }
}

/// Whether a load balancer should send this host work.
#[utoipa::path(
    get,
    path = "/api/health/ready",
    tag = "health",
    security(()),
    responses(
        (status = 200, description = "Ready", body = Object),
        (status = 503, description = "Not ready, with the reason", body = Object),
    )
)]
pub async fn ready(State(state): State<AppState>) -> Response {
    match state.health.not_ready() {
        Some(reason) => answer(false, "not_ready", reason),
        None => answer(true, "ready", String::new()),
    }
}

fn answer(ok: bool, status: &str, reason: String) -> Response {
    if ok {
        error::health(true, Json(json!({ "status": status })))
    } else {
        error::health(false, Json(json!({ "status": status, "reason": reason })))
    }
}
