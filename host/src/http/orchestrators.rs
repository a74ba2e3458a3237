//! Starting orchestrations: `POST /api/orchestrators/{name}[/{instanceId}]`,
//! the start routes components declare (e.g. `POST /api/writer/run`), and
//! their event routes (e.g. `POST /api/approval/{instanceId}`).

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header::LOCATION;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::body::json_body;
use super::instances::{base_url, change_response, instance_urls};
use super::{ApiError, AppState};
use crate::durable::DurableError;
use crate::registry::RouteTarget;

pub async fn start(
    State(state): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    start_instance(&state, &name, None, &headers, body).await
}

pub async fn start_with_id(
    State(state): State<AppState>,
    Path((name, instance_id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    start_instance(&state, &name, Some(instance_id), &headers, body).await
}

/// `POST /api/{*path}`: a route declared by a component, or 404.
pub async fn declared_route(
    State(state): State<AppState>,
    Path(path): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    match state.registry.route(&path) {
        Some(RouteTarget::Start { orchestration }) => {
            start_instance(&state, &orchestration, None, &headers, body).await
        }
        Some(RouteTarget::Event { event, instance_id }) => {
            let payload = json_body(&headers, body, state.config.max_body_bytes).await?;
            let change = state
                .orchestrator
                .raise_event(&instance_id, &event, &payload)
                .await
                .map_err(durable_error)?;
            change_response(change, &instance_id, || {
                (
                    StatusCode::ACCEPTED,
                    Json(json!({"id": instance_id, "event": event, "status": "accepted"})),
                )
                    .into_response()
            })
        }
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no route for POST /api/{path}"),
        )),
    }
}

async fn start_instance(
    state: &AppState,
    name: &str,
    instance_id: Option<String>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let input = json_body(headers, body, state.config.max_body_bytes).await?;
    let id = state
        .orchestrator
        .start_instance(name, instance_id, input)
        .await
        .map_err(durable_error)?;
    let urls = instance_urls(&base_url(headers), &id);
    let mut response = (StatusCode::ACCEPTED, Json(urls.clone())).into_response();
    if let Some(location) = urls["statusQueryGetUri"]
        .as_str()
        .and_then(|u| HeaderValue::from_str(u).ok())
    {
        response.headers_mut().insert(LOCATION, location);
    }
    Ok(response)
}

pub fn durable_error(error: DurableError) -> ApiError {
    match &error {
        DurableError::UnknownOrchestration { registered, .. } => ApiError::new(
            StatusCode::NOT_FOUND,
            "orchestration_not_found",
            error.to_string(),
        )
        .with("orchestrations", registered.clone()),
        DurableError::AlreadyExists(_) => {
            ApiError::new(StatusCode::CONFLICT, "instance_exists", error.to_string())
        }
        DurableError::TooLarge { .. } => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            error.to_string(),
        ),
        DurableError::BadInstanceId => {
            ApiError::bad_request("invalid_instance_id", error.to_string())
        }
        DurableError::Store(_) => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            error.to_string(),
        ),
    }
}
