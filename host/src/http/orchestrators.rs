//! Starting orchestrations: `POST /api/orchestrators/{name}[/{instanceId}]`,
//! the start routes components declare (e.g. `POST /api/writer/run`), and
//! their event routes (e.g. `POST /api/approval/{instanceId}`).
//!
//! An event route reaches only the instances of the orchestrations its own
//! component serves: another component's instance answers as an unknown one
//! (404, the same body).
//!
//! The key that starts an instance owns it; an event route answers another
//! invoke key as for an unknown instance, and a start on an id another
//! caller's instance holds is refused (409), as `caller` decides.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header::LOCATION;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use axum::Json;

use super::body::json_body;
use super::caller::{instance_starter, visible_instance, Caller};
use super::instance_body::{EventAccepted, InstanceUrls};
use super::instances::base_url;
use super::keys::Grant;
use super::{error, front_routes, ApiError, AppState};
use crate::durable::DurableError;
use crate::registry::RouteTarget;

/// Starts an instance of an orchestration; the body is its JSON input.
#[utoipa::path(
    post,
    path = "/api/orchestrators/{name}",
    tag = "orchestrations",
    params(("name" = String, Path, description = "The orchestration")),
    request_body(content = Object, description = "The input (any JSON)", content_type = "application/json"),
    responses(
        (status = 202, description = "Started", body = InstanceUrls,
            headers(("location" = String, description = "The instance's status URL"))),
        super::schemas::Failures
    )
)]
pub async fn start(
    State(state): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    start_instance(&state, &caller, &name, None, &headers, body).await
}

/// Starts an instance with a chosen id (a finished id starts anew, if it is
/// the caller's: another invoke key's id is refused, 409).
#[utoipa::path(
    post,
    path = "/api/orchestrators/{name}/{instance_id}",
    tag = "orchestrations",
    params(("name" = String, Path), ("instance_id" = String, Path)),
    request_body(content = Object, description = "The input (any JSON)", content_type = "application/json"),
    responses(
        (status = 202, description = "Started", body = InstanceUrls),
        super::schemas::Failures
    )
)]
pub async fn start_with_id(
    State(state): State<AppState>,
    Path((name, instance_id)): Path<(String, String)>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    start_instance(&state, &caller, &name, Some(instance_id), &headers, body).await
}

/// `POST /api/{*path}`: a route declared by a component (it starts an
/// orchestration or raises an event), or 404.
#[utoipa::path(
    post,
    path = "/api/{path}",
    tag = "orchestrations",
    params(("path" = String, Path, description = "A route a component declares, e.g. `approve/{instanceId}`")),
    request_body(content = Object, description = "The input or the event's payload (any JSON)", content_type = "application/json"),
    responses(
        (status = 202, description = "Started, or the event accepted", body = super::instance_body::RouteAccepted),
        super::schemas::Failures
    )
)]
pub async fn declared_route(
    State(state): State<AppState>,
    Path(path): Path<String>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    match state.registry.route(&path) {
        Some(RouteTarget::Start { orchestration }) => {
            start_instance(&state, &caller, &orchestration, None, &headers, body).await
        }
        Some(RouteTarget::Event {
            event,
            instance_id,
            component,
        }) => {
            let payload = json_body(&headers, body, &state.config).await?;
            let view = visible_instance(&state, &caller, &instance_id, false).await?;
            // A route reaches its own component's instances only; another
            // component's answers as unknown, as another caller's does.
            if !state.registry.serves(&component, &view.instance.name) {
                return Err(DurableError::InstanceNotFound(instance_id).into());
            }
            state
                .orchestrator
                .raise_event(&instance_id, &event, &payload)
                .await?;
            Ok(error::accepted(Json(EventAccepted {
                id: &instance_id,
                event: &event,
                status: "accepted",
            })))
        }
        None => Err(ApiError::not_found(
            "not_found",
            format!("no route for POST /api/{path}"),
        )),
    }
}

async fn start_instance(
    state: &AppState,
    caller: &Caller,
    name: &str,
    instance_id: Option<String>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let starter = instance_starter(caller)?;
    let input = json_body(headers, body, &state.config).await?;
    let id = state
        .orchestrator
        .start_instance(name, instance_id, input, starter)
        .await?;
    // The token names the instance's creation, so it never opens a later
    // instance of the same id: read back only when tokens are handed out.
    let token = if state.config.keys.signs() {
        let started = state.orchestrator.status(&id, false).await?;
        state
            .config
            .keys
            .token(Grant::Instance, &id, started.instance.created_at)
    } else {
        None
    };
    // Where the caller can follow them (`front_routes`).
    let base = format!("{}{}", base_url(headers), front_routes::url_prefix());
    let urls = InstanceUrls::new(
        &base,
        &id,
        token.as_deref(),
        state.config.hub_in_urls.as_deref(),
    );
    let location = HeaderValue::from_str(&urls.status_query_get_uri).ok();
    let mut response = error::accepted(Json(urls));
    if let Some(location) = location {
        response.headers_mut().insert(LOCATION, location);
    }
    Ok(response)
}
