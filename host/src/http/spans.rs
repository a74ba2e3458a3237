//! A span for every HTTP request, continuing the caller's trace when it
//! sends a W3C `traceparent`: a run or an instance the request starts
//! stores this span's context, so its work joins the same trace.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

use super::metrics::Route;

pub async fn trace(request: Request, next: Next) -> Response {
    // Without an exporter nobody reads the span: not worth its cost on
    // every request (the run's own span still carries the logs' ids).
    if !crate::telemetry::exporting() {
        return next.run(request).await;
    }
    let span = tracing::info_span!(
        "http.request",
        otel.name = tracing::field::Empty,
        http.request.method = %request.method(),
        http.route = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
    );
    let traceparent = request
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok());
    crate::telemetry::continue_trace(&span, traceparent);
    let method = request.method().clone();
    let response = next.run(request).instrument(span.clone()).await;
    let route = response
        .extensions()
        .get::<Route>()
        .map_or("unmatched", Route::template);
    span.record("otel.name", format!("{method} {route}"));
    span.record("http.route", route);
    span.record("http.response.status_code", response.status().as_u16());
    response
}
