//! `GET /metrics` (Prometheus text format, admin scope) and the recording of
//! every HTTP request by route template, method and status.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::AppState;

/// The host's metrics in the Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "operations",
    responses(
        (status = 200, description = "Prometheus text format 0.0.4", content_type = "text/plain", body = String),
        super::schemas::Failures
    )
)]
pub async fn get(State(state): State<AppState>) -> Response {
    match state.runs.pending_approvals_count().await {
        Ok(count) => crate::metrics::approvals_pending(&state.config.hub, count),
        Err(e) => tracing::warn!(error = %e, "/metrics: could not count pending approvals"),
    }
    if let Err(e) = state.orchestrator.refresh_gauges().await {
        tracing::warn!(error = %e, "/metrics: could not count waiting instances");
    }
    match crate::metrics::render() {
        Some(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        None => ApiError::not_found(
            "metrics_unavailable",
            "another metrics recorder is installed in this process (an embedding program's): read the metrics there",
        )
        .into_response(),
    }
}

/// The route template a request matched, carried on its response to
/// [`record`] (which runs outside the router, where no route is matched yet).
#[derive(Clone)]
pub struct Route(MatchedPath);

impl Route {
    pub fn template(&self) -> &str {
        self.0.as_str()
    }
}

/// On matched routes: remembers the template on the response.
pub async fn tag_route(request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().cloned();
    let mut response = next.run(request).await;
    if let Some(route) = route {
        response.extensions_mut().insert(Route(route));
    }
    response
}

/// Around the whole router: counts and times every request. Unmatched paths
/// count as one route, and methods outside HTTP's own as `other`, so a
/// caller cannot grow the label set.
pub async fn record(request: Request, next: Next) -> Response {
    let method = match *request.method() {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::DELETE => "DELETE",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    };
    let started = Instant::now();
    let response = next.run(request).await;
    let route = response
        .extensions()
        .get::<Route>()
        .map_or("unmatched", |r| r.0.as_str());
    crate::metrics::http_request(route, method, response.status().as_u16(), started.elapsed());
    response
}
