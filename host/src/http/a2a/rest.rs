//! A2A 1.0's HTTP+JSON binding under `/a2a/{agent}`: the JSON-RPC calls'
//! handlers with bare bodies, streams of bare stream responses, and errors
//! as `google.rpc.Status` bodies with the HTTP status the spec gives them.
//!
//! | call | route |
//! |---|---|
//! | SendMessage | `POST /a2a/{agent}/message:send` |
//! | SendStreamingMessage | `POST /a2a/{agent}/message:stream` |
//! | GetTask | `GET /a2a/{agent}/tasks/{id}?historyLength=` |
//! | ListTasks | `GET /a2a/{agent}/tasks?contextId=&status=&pageSize=&pageToken=&historyLength=&includeArtifacts=` |
//! | CancelTask | `POST /a2a/{agent}/tasks/{id}:cancel` |
//! | SubscribeToTask | `POST` (or `GET`) `/a2a/{agent}/tasks/{id}:subscribe` |

use std::collections::HashMap;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use super::super::caller::Caller;
use super::rpc::RpcError;
use super::stream::Framing;
use super::{version, A2a};
use crate::http::body::read_limited;
use crate::http::{ApiError, AppState};

/// The agent's calls, once the agent is served (else 404 JSON) and the
/// caller speaks A2A 1.x (else the binding's version error). The refusal
/// is the response itself, large, and on the rare path only.
#[allow(clippy::result_large_err)]
fn admitted<'a>(
    state: &'a AppState,
    agent: &'a str,
    caller: Caller,
    headers: &HeaderMap,
) -> Result<A2a<'a>, Response> {
    state
        .runs
        .served(agent)
        .map_err(|e| ApiError::from(e).into_response())?;
    version(headers).map_err(|e| e.response())?;
    Ok(A2a {
        state,
        agent,
        caller,
    })
}

/// The call's answer, or its error as the binding answers it.
fn answered(result: Result<Value, RpcError>) -> Response {
    match result {
        Ok(value) => Json(value).into_response(),
        Err(e) => e.response(),
    }
}

/// The body as JSON (an empty one is `{}`).
async fn body_of(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Value, RpcError> {
    super::json_content(headers)?;
    let bytes = read_limited(headers, body, &state.config)
        .await
        .map_err(|e| {
            RpcError::invalid_request(format!("the request could not be read: {}", e.message()))
        })?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(RpcError::invalid_request("the body must be a JSON object")),
        Err(e) => Err(RpcError::parse(format!("the body is not JSON: {e}"))),
    }
}

/// `POST /a2a/{agent}/message:send` and `message:stream`.
#[utoipa::path(
    post,
    path = "/a2a/{agent}/{verb}",
    tag = "a2a",
    params(("agent" = String, Path), ("verb" = String, Path, description = "`message:send` or `message:stream`")),
    request_body(content = Object, description = "A SendMessageRequest", content_type = "application/json"),
    responses(
        (status = 200, description = "The task (or, for `message:stream`, server-sent events of it)", body = Object),
        super::super::schemas::A2aFailures
    )
)]
pub async fn message(
    State(state): State<AppState>,
    Path((agent, verb)): Path<(String, String)>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let a2a = match admitted(&state, &agent, caller, &headers) {
        Ok(a2a) => a2a,
        Err(refused) => return Ok(refused),
    };
    let params = match body_of(&state, &headers, body).await {
        Ok(params) => params,
        Err(e) => return Ok(e.response()),
    };
    Ok(match verb.as_str() {
        "message:send" => answered(a2a.send(&params).await),
        "message:stream" => match a2a.send_streaming(&params, Framing::Rest).await {
            Ok(stream) => stream,
            Err(e) => e.response(),
        },
        other => RpcError::method_not_found(other).response(),
    })
}

/// `GET /a2a/{agent}/tasks/{id}` (or `{id}:subscribe`).
#[utoipa::path(
    get,
    path = "/a2a/{agent}/tasks/{id}",
    tag = "a2a",
    params(("agent" = String, Path), ("id" = String, Path, description = "The task, or `{id}:subscribe`")),
    responses(
        (status = 200, description = "The task (or server-sent events of it)", body = Object),
        super::super::schemas::A2aFailures
    )
)]
pub async fn task_get(
    State(state): State<AppState>,
    Path((agent, id)): Path<(String, String)>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let a2a = match admitted(&state, &agent, caller, &headers) {
        Ok(a2a) => a2a,
        Err(refused) => return Ok(refused),
    };
    if let Some(task) = id.strip_suffix(":subscribe") {
        return Ok(subscribed(
            a2a.subscribe(&json!({ "id": task }), Framing::Rest).await,
        ));
    }
    let mut params = typed(&query, &["historyLength"], &[]);
    params.insert("id".into(), Value::String(id));
    Ok(answered(a2a.get(&Value::Object(params)).await))
}

/// `POST /a2a/{agent}/tasks/{id}:cancel` and `{id}:subscribe`.
#[utoipa::path(
    post,
    path = "/a2a/{agent}/tasks/{id}",
    tag = "a2a",
    params(("agent" = String, Path), ("id" = String, Path, description = "`{id}:cancel` or `{id}:subscribe`")),
    responses(
        (status = 200, description = "The task (or server-sent events of it)", body = Object),
        super::super::schemas::A2aFailures
    )
)]
pub async fn task_post(
    State(state): State<AppState>,
    Path((agent, id)): Path<(String, String)>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let a2a = match admitted(&state, &agent, caller, &headers) {
        Ok(a2a) => a2a,
        Err(refused) => return Ok(refused),
    };
    // The body of a cancel names the task again (or nothing); the path
    // decides. Reading it bounds it.
    if let Err(e) = body_of(&state, &headers, body).await {
        return Ok(e.response());
    }
    Ok(match id.rsplit_once(':') {
        Some((task, "cancel")) => answered(a2a.cancel(&json!({ "id": task })).await),
        Some((task, "subscribe")) => {
            subscribed(a2a.subscribe(&json!({ "id": task }), Framing::Rest).await)
        }
        _ => RpcError::method_not_found(&format!("POST tasks/{id}")).response(),
    })
}

/// Push notification configuration, every operation: this host sends no
/// push notifications (its cards say so), and the spec wants
/// `PushNotificationNotSupportedError` for them, as JSON-RPC answers.
fn push_not_supported(state: &AppState, agent: &str, headers: &HeaderMap) -> Response {
    match admitted(state, agent, Caller::Unknown, headers) {
        Ok(_) => RpcError::push_not_supported().response(),
        Err(refused) => refused,
    }
}

/// `POST /a2a/{agent}/tasks/{id}/pushNotificationConfigs`.
#[utoipa::path(
    post,
    path = "/a2a/{agent}/tasks/{id}/pushNotificationConfigs",
    tag = "a2a",
    params(("agent" = String, Path), ("id" = String, Path)),
    responses((status = 400, description = "PushNotificationNotSupportedError", body = Object), super::super::schemas::A2aFailures)
)]
pub async fn push_config_create(
    State(state): State<AppState>,
    Path((agent, _)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    push_not_supported(&state, &agent, &headers)
}

/// `GET /a2a/{agent}/tasks/{id}/pushNotificationConfigs`.
#[utoipa::path(
    get,
    path = "/a2a/{agent}/tasks/{id}/pushNotificationConfigs",
    tag = "a2a",
    params(("agent" = String, Path), ("id" = String, Path)),
    responses((status = 400, description = "PushNotificationNotSupportedError", body = Object), super::super::schemas::A2aFailures)
)]
pub async fn push_config_list(
    State(state): State<AppState>,
    Path((agent, _)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    push_not_supported(&state, &agent, &headers)
}

/// `GET /a2a/{agent}/tasks/{id}/pushNotificationConfigs/{config}`.
#[utoipa::path(
    get,
    path = "/a2a/{agent}/tasks/{id}/pushNotificationConfigs/{config}",
    tag = "a2a",
    params(("agent" = String, Path), ("id" = String, Path), ("config" = String, Path)),
    responses((status = 400, description = "PushNotificationNotSupportedError", body = Object), super::super::schemas::A2aFailures)
)]
pub async fn push_config_get(
    State(state): State<AppState>,
    Path((agent, _, _)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    push_not_supported(&state, &agent, &headers)
}

/// `DELETE /a2a/{agent}/tasks/{id}/pushNotificationConfigs/{config}`.
#[utoipa::path(
    delete,
    path = "/a2a/{agent}/tasks/{id}/pushNotificationConfigs/{config}",
    tag = "a2a",
    params(("agent" = String, Path), ("id" = String, Path), ("config" = String, Path)),
    responses((status = 400, description = "PushNotificationNotSupportedError", body = Object), super::super::schemas::A2aFailures)
)]
pub async fn push_config_delete(
    State(state): State<AppState>,
    Path((agent, _, _)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    push_not_supported(&state, &agent, &headers)
}

fn subscribed(result: Result<Response, RpcError>) -> Response {
    match result {
        Ok(stream) => stream,
        Err(e) => e.response(),
    }
}

/// `GET /a2a/{agent}/tasks`.
#[utoipa::path(
    get,
    path = "/a2a/{agent}/tasks",
    tag = "a2a",
    params(("agent" = String, Path)),
    responses(
        (status = 200, description = "A page of tasks: {tasks, nextPageToken, pageSize}", body = Object),
        super::super::schemas::A2aFailures
    )
)]
pub async fn list_tasks(
    State(state): State<AppState>,
    Path(agent): Path<String>,
    caller: Caller,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let a2a = match admitted(&state, &agent, caller, &headers) {
        Ok(a2a) => a2a,
        Err(refused) => return Ok(refused),
    };
    let params = typed(
        &query,
        &["pageSize", "historyLength"],
        &["includeArtifacts"],
    );
    Ok(answered(a2a.list(&Value::Object(params)).await))
}

/// Query values as the JSON the calls take: numbers and booleans where the
/// call wants them (a value that is neither stays text, and the call names
/// it); the endpoint key's `code` is not a parameter.
fn typed(query: &HashMap<String, String>, numbers: &[&str], flags: &[&str]) -> Map<String, Value> {
    query
        .iter()
        .filter(|(k, _)| k.as_str() != "code")
        .map(|(k, v)| {
            let value = if numbers.contains(&k.as_str()) {
                v.parse::<i64>()
                    .map(Value::from)
                    .unwrap_or_else(|_| Value::String(v.clone()))
            } else if flags.contains(&k.as_str()) {
                v.parse::<bool>()
                    .map(Value::Bool)
                    .unwrap_or_else(|_| Value::String(v.clone()))
            } else {
                Value::String(v.clone())
            };
            (k.clone(), value)
        })
        .collect()
}
