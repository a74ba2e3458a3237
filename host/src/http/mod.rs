//! The HTTP surface. Handlers parse and answer; the work happens in `runs`.

mod agents;
mod error;
mod health;
mod runs;

pub use error::ApiError;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

use crate::registry::Registry;
use crate::runs::Runs;
use crate::store::Store;

/// Settings of the HTTP layer.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub health_enabled: bool,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// How long a synchronous run request waits before answering 202.
    pub wait_budget: Duration,
}

#[derive(Clone)]
pub struct AppState {
    pub registry: Arc<Registry>,
    pub runs: Arc<Runs>,
    pub store: Store,
    pub config: Arc<HttpConfig>,
}

pub fn router(state: AppState) -> Router {
    let mut router = Router::new()
        .route("/api/agents/{name}/run", post(agents::run))
        .route("/api/agents/{name}/runs/{correlation_id}", get(runs::get));
    if state.config.health_enabled {
        router = router.route("/api/health", get(health::get));
    }
    router
        .fallback(error::no_route)
        // The run handler enforces the limit itself, to answer 413 in JSON.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}
