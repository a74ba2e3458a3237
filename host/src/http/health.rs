//! Health: `GET /api/health` (the agents served, and whether the host can do
//! its work), `GET /api/health/live` (should a supervisor restart this
//! process?) and `GET /api/health/ready` (should a load balancer send it
//! work?). A host whose store writer is dead or stuck answers 503 with the
//! reason: an HTTP front that still answers is no proof that work gets done.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::run_body::{AgentHealth, Health};
use super::AppState;
use crate::store::WriterCheck;

/// The host's health and the agents it serves (open: no key needed).
#[utoipa::path(
    get,
    path = "/api/health",
    tag = "health",
    security(()),
    responses(
        (status = 200, description = "Healthy", body = Health),
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
    let reason = not_ready(&state);
    let status = if reason.is_some() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let body = Health {
        status: if reason.is_some() {
            "unhealthy"
        } else {
            "healthy"
        },
        reason,
        agents,
    };
    (status, Json(body)).into_response()
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
    match state.store.writer_check(state.config.writer_deadline) {
        WriterCheck::Dead(reason) | WriterCheck::Stalled(reason) => answer(false, "dead", reason),
        WriterCheck::Failing(_) | WriterCheck::Healthy => answer(true, "alive", String::new()),
    }
}

/// Ready when the store takes writes and, on a shared hub, this host holds
/// its lease.
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
    match not_ready(&state) {
        Some(reason) => answer(false, "not_ready", reason),
        None => answer(true, "ready", String::new()),
    }
}

fn not_ready(state: &AppState) -> Option<String> {
    let writer = state.store.writer_check(state.config.writer_deadline);
    writer
        .problem()
        .map(str::to_string)
        .or_else(|| state.store.lease_problem())
}

fn answer(ok: bool, status: &str, reason: String) -> Response {
    if ok {
        (StatusCode::OK, Json(json!({ "status": status }))).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": status, "reason": reason })),
        )
            .into_response()
    }
}
