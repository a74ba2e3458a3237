//! The HTTP surface. Handlers parse, ask a service (`runs`, `durable`,
//! `streams`, `health`, the registry) and answer; they never read the store,
//! and every status is chosen in [`error`].

mod a2a;
mod agents;
mod approvals;
mod authorize;
mod body;
mod caller;
mod components;
mod dashboard;
mod deprecation;
mod error;
mod front_key;
mod front_routes;
mod functions;
pub(crate) mod grpc;
mod health;
pub(crate) mod hubs;
mod instance_body;
mod instances;
mod keys;
mod mcp;
mod mcp_sessions;
mod metrics;
mod openapi;
mod orchestrators;
mod origin_guard;
mod run_body;
mod run_request;
mod runs;
mod schemas;
mod sessions;
mod spans;
mod streams;

pub use error::ApiError;
pub use keys::{ApiKeys, Scope};
pub use origin_guard::Allowed;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::Router;

use crate::durable::Orchestrator;
use crate::health::Health;
use crate::registry::Registry;
use crate::runs::Runs;
use crate::streams::ResponseStreams;

/// Settings of the HTTP layer.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub health_enabled: bool,
    /// Serve MCP at `/runtime/webhooks/mcp`.
    pub mcp_enabled: bool,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Longest a request body may take to arrive.
    pub body_timeout: Duration,
    /// How long a synchronous run request waits before answering 202.
    pub wait_budget: Duration,
    /// Endpoint keys; empty: every route is open.
    pub keys: ApiKeys,
    /// The task hub these routes serve.
    pub hub: String,
    /// The `taskHub=` the URLs handed out carry (a hub other than the
    /// host's own), so that following them reaches this hub again.
    pub hub_in_urls: Option<String>,
    /// Which `Host` names and page origins are answered (`--allowed-hosts`,
    /// `--allowed-origins`); see [`origin_guard`].
    pub allowed: Allowed,
}

/// What the handlers read, behind one `Arc`. axum clones the state for each
/// handler and each layer that takes it: as six fields, one of them a whole
/// `Store` (in `Health`), those clones and their drops were 3% of a
/// one-connection agent run's CPU (`perf record`, 2026-12-07), their
/// reference counts shared by both runtime threads.
#[derive(Clone)]
pub struct AppState(Arc<AppParts>);

pub struct AppParts {
    pub registry: Arc<Registry>,
    pub runs: Arc<Runs>,
    pub orchestrator: Arc<Orchestrator>,
    pub health: Health,
    pub streams: Arc<ResponseStreams>,
    pub config: Arc<HttpConfig>,
}

impl AppState {
    pub fn new(parts: AppParts) -> Self {
        Self(Arc::new(parts))
    }
}

impl std::ops::Deref for AppState {
    type Target = AppParts;

    fn deref(&self) -> &AppParts {
        &self.0
    }
}

pub fn router(state: AppState) -> Router {
    // The dashboard's page reaches the API under its own path (see
    // `dashboard`): the same routes, their own keys and layers, mounted
    // again (MCP sessions stay with the one mount clients use).
    let dashboard_runtime = runtime_routes(&state, false);
    let for_dashboard =
        checked(routes(&state).merge(dashboard_runtime), &state).with_state(state.clone());
    // The `/runtime/` routes once, served at their own paths and again
    // where a Functions front forwards (`front_routes`); MCP's sessions are
    // the same at both.
    let runtime = runtime_routes(&state, state.config.mcp_enabled);
    let served = routes(&state)
        .merge(runtime.clone())
        .nest(front_routes::MOUNT, runtime)
        .merge(dashboard::routes())
        .nest_service(dashboard::API, for_dashboard);
    finish(served, &state)
}

/// Every route of the API but those under `/runtime/`.
fn routes(state: &AppState) -> Router<AppState> {
    let mut router = Router::new()
        .route("/api/agents/{name}/run", post(agents::run))
        .route("/.well-known/agent-card.json", get(a2a::host_card))
        .route(
            "/a2a/{agent}/.well-known/agent-card.json",
            get(a2a::agent_card),
        )
        .route("/a2a/{agent}", post(a2a::call))
        // The interface URL as clients join paths to it (the A2A kit does).
        .route("/a2a/{agent}/", post(a2a::call_at_slash))
        .route("/a2a/{agent}/{verb}", post(a2a::rest::message))
        .route("/a2a/{agent}/tasks", get(a2a::rest::list_tasks))
        .route(
            "/a2a/{agent}/tasks/{id}",
            get(a2a::rest::task_get).post(a2a::rest::task_post),
        )
        .route(
            "/a2a/{agent}/tasks/{id}/pushNotificationConfigs",
            get(a2a::rest::push_config_list).post(a2a::rest::push_config_create),
        )
        .route(
            "/a2a/{agent}/tasks/{id}/pushNotificationConfigs/{config}",
            get(a2a::rest::push_config_get).delete(a2a::rest::push_config_delete),
        )
        .route("/api/agents/{name}/runs", get(runs::list))
        .route("/api/agents/{name}/runs/{correlation_id}", get(runs::get))
        .route(
            "/api/agents/{name}/runs/{correlation_id}/cancel",
            post(runs::cancel),
        )
        .route(
            "/api/agents/{name}/runs/{correlation_id}/stream",
            get(streams::get),
        )
        .route(
            "/api/agents/{name}/runs/{correlation_id}/approvals",
            post(approvals::decide),
        )
        .route(
            "/api/agents/{name}/sessions/{session_id}",
            get(sessions::get).delete(sessions::delete),
        )
        // Where callers of Agent Framework hosting read a conversation.
        .route(
            "/api/agents/{name}/{session_id}",
            get(sessions::get_by_hosting_route),
        )
        .route("/api/components", get(components::list))
        .route("/api/components/{name}", get(components::get))
        .route("/agenthost-wake", post(functions::wake))
        .route("/metrics", get(metrics::get))
        .route("/api/openapi.json", get(openapi::get))
        .route("/api/orchestrators/{name}", post(orchestrators::start))
        .route(
            "/api/orchestrators/{name}/{instance_id}",
            post(orchestrators::start_with_id),
        )
        // Component-declared routes; any other method is an unknown route.
        .route(
            "/api/{*path}",
            post(orchestrators::declared_route).fallback(error::no_route),
        );
    if state.config.health_enabled {
        router = router
            .route("/api/health", get(health::get))
            .route("/api/health/live", get(health::live))
            .route("/api/health/ready", get(health::ready));
    }
    router
}

/// The management API and, when `mcp`, MCP: the routes under `/runtime/`.
fn runtime_routes(state: &AppState, mcp: bool) -> Router<AppState> {
    let mut router = Router::new()
        .route(
            "/runtime/webhooks/durabletask/instances",
            get(instances::list).delete(instances::purge_matching),
        )
        .route(
            "/runtime/webhooks/durabletask/instances/{id}",
            get(instances::get).delete(instances::purge),
        )
        .route(
            "/runtime/webhooks/durabletask/instances/{id}/raiseEvent/{event}",
            post(instances::raise_event),
        )
        .route(
            "/runtime/webhooks/durabletask/instances/{id}/terminate",
            post(instances::terminate),
        )
        .route(
            "/runtime/webhooks/durabletask/instances/{id}/suspend",
            post(instances::suspend),
        )
        .route(
            "/runtime/webhooks/durabletask/instances/{id}/resume",
            post(instances::resume),
        );
    if mcp {
        // An MCP session answers the caller that opened it alone.
        let sessions = axum::middleware::from_fn(mcp_sessions::bound_to_caller);
        router = router.nest_service(mcp::PATH, mcp::routes(state.clone()).layer(sessions));
    }
    router
}

/// What each route goes through: its key check and metrics label, JSON
/// errors, the body limit. The routes mounted again for the dashboard get
/// this alone: the outer router records and traces the request once (under
/// the inner route's label, which the inner `tag_route` sets).
fn checked(router: Router<AppState>, state: &AppState) -> Router<AppState> {
    router
        // Keys are checked on matched routes (the route template decides
        // the scope); unknown routes answer 404 either way.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            authorize::authorize,
        ))
        .route_layer(axum::middleware::from_fn(metrics::tag_route))
        .fallback(error::no_route)
        .method_not_allowed_fallback(error::method_not_allowed)
        // Handlers read bodies with `body::read_limited` (413 in JSON); this
        // bounds any extractor that reads one itself, so no route can be made
        // to buffer more than the limit.
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        .layer(axum::middleware::from_fn(error::refuse_nul))
        .layer(axum::middleware::map_response(error::rejections_as_json))
}

/// [`checked`], then what every request goes through once: metrics, spans,
/// and first of all the `Host` and `Origin` check (CORS before it, for the
/// origins allowed).
fn finish(router: Router<AppState>, state: &AppState) -> Router {
    let allowed = std::sync::Arc::new(state.config.allowed.clone());
    let cors = allowed.cors();
    let router = checked(router, state)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            front_key::carry,
        ))
        .layer(axum::middleware::from_fn(metrics::record))
        .layer(axum::middleware::from_fn(spans::trace))
        .with_state(state.clone())
        .layer(axum::middleware::from_fn_with_state(
            allowed,
            origin_guard::guard,
        ));
    match cors {
        Some(cors) => router.layer(cors),
        None => router,
    }
}
