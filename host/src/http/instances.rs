//! The durable management API, in the shapes and status codes of the Durable
//! Functions HTTP API, under `/runtime/webhooks/durabletask/instances`.
//!
//! Every operation on one instance goes through
//! [`visible_instance`](super::caller::visible_instance) (or, to act on it,
//! [`may_act_on_instance`](super::caller::may_act_on_instance)) first, and a listing
//! or a purge by filter through
//! [`instances_of`](super::caller::instances_of): a caller reaches the
//! instances it owns and no other (an admin key and a URL token, checked
//! against the instance it names, reach theirs).

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::header::HOST;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use chrono::DateTime;
use serde::Deserialize;

use super::body::json_body;
use super::caller::{instances_of, may_act_on_instance, visible_instance, Caller};
use super::instance_body::{AgentRunRef, HistoryEvent, InstanceStatus, Purged};
use super::keys::Grant;
use super::{error, ApiError, AppState};
use crate::core::instance::RuntimeStatus;
use crate::durable::{InstanceFilter, Operation};

const CONTINUATION: &str = "x-ms-continuation-token";

/// `http://host` of the request, for the absolute URLs of responses.
pub fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let scheme = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .unwrap_or("http");
    format!("{scheme}://{host}")
}

/// 202 for a change made; 404 unknown; 410 for an instance that is over; 409
/// when the change does not apply to its state.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct StatusQuery {
    show_history: Option<bool>,
    show_input: Option<bool>,
}

/// An instance's status (202 while it runs), with its history on request.
#[utoipa::path(
    get,
    path = "/runtime/webhooks/durabletask/instances/{id}",
    tag = "management",
    params(("id" = String, Path), StatusQuery),
    responses(
        (status = 200, description = "Finished", body = InstanceStatus),
        (status = 202, description = "Not finished yet", body = InstanceStatus),
        super::schemas::Failures
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Path(id): Path<String>,
    caller: Caller,
    Query(query): Query<StatusQuery>,
) -> Result<Response, ApiError> {
    let view = visible_instance(&state, &caller, &id, query.show_history.unwrap_or(false)).await?;
    let instance = &view.instance;
    let mut body = InstanceStatus::new(instance, query.show_input.unwrap_or(true));
    body.waiting_for = view.waiting_for;
    if let Some(history) = view.history {
        body.history_events = Some(
            history
                .journal
                .into_iter()
                .map(|(entry, at)| HistoryEvent::new(entry, at))
                .collect(),
        );
        body.agent_runs = Some(
            history
                .runs
                .into_iter()
                .map(|(run, pending)| {
                    let token = state
                        .config
                        .keys
                        .token(Grant::RunStream, &run.correlation_id, 0);
                    AgentRunRef::new(&run, pending, token.as_deref())
                })
                .collect(),
        );
    }
    Ok(error::done_or_accepted(
        instance.status.is_finished(),
        Json(body),
    ))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    runtime_status: Option<String>,
    created_time_from: Option<String>,
    created_time_to: Option<String>,
    instance_id_prefix: Option<String>,
    /// Only instances of this orchestration (its exact name).
    name: Option<String>,
    /// Newest first (the dashboard's order); oldest first by default.
    newest_first: Option<bool>,
    top: Option<usize>,
    continuation_token: Option<String>,
    show_input: Option<bool>,
}

fn filter_of(query: &ListQuery) -> Result<InstanceFilter, ApiError> {
    let mut statuses = Vec::new();
    for s in query
        .runtime_status
        .iter()
        .flat_map(|s| s.split(','))
        .filter(|s| !s.trim().is_empty())
    {
        let status = RuntimeStatus::parse(s).ok_or_else(|| {
            let all: Vec<&str> = RuntimeStatus::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::bad_request(
                "invalid_filter",
                format!("unknown runtimeStatus '{s}'; use one of {}", all.join(", ")),
            )
        })?;
        statuses.push(status);
    }
    let time = |name: &str, value: &Option<String>| -> Result<Option<i64>, ApiError> {
        value
            .as_deref()
            .map(|v| {
                DateTime::parse_from_rfc3339(v)
                    .map(|t| t.timestamp_millis())
                    .map_err(|e| {
                        ApiError::bad_request(
                            "invalid_filter",
                            format!("{name} is not an RFC 3339 time: {e}"),
                        )
                    })
            })
            .transpose()
    };
    Ok(InstanceFilter {
        statuses,
        created_from: time("createdTimeFrom", &query.created_time_from)?,
        created_to: time("createdTimeTo", &query.created_time_to)?,
        id_prefix: query.instance_id_prefix.clone(),
        name: query.name.clone().filter(|n| !n.trim().is_empty()),
        newest_first: query.newest_first.unwrap_or(false),
        ..InstanceFilter::default()
    })
}

/// Instances, oldest first (or `newestFirst`), a page at a time
/// (`x-ms-continuation-token`).
#[utoipa::path(
    get,
    path = "/runtime/webhooks/durabletask/instances",
    tag = "management",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of instances", body = Vec<InstanceStatus>),
        super::schemas::Failures
    )
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<ListQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Some(filter) = instances_of(&caller, filter_of(&query)?) else {
        return Ok(Json(Vec::<InstanceStatus>::new()).into_response());
    };
    let top = query.top.unwrap_or(100).clamp(1, 1000);
    let token = headers
        .get(CONTINUATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or(query.continuation_token.clone());
    let after = match token.as_deref() {
        None | Some("") => None,
        Some(token) => Some(
            token
                .split_once(':')
                .and_then(|(t, id)| Some((t.parse::<i64>().ok()?, id.to_string())))
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_continuation_token",
                        "the continuation token is not one this host issued",
                    )
                })?,
        ),
    };
    let mut page = state.orchestrator.list(&filter, top + 1, after).await?;
    let more = page.len() > top;
    page.truncate(top);
    let body: Vec<InstanceStatus> = page
        .iter()
        .map(|i| InstanceStatus::new(i, query.show_input.unwrap_or(true)))
        .collect();
    let mut response = Json(body).into_response();
    if more {
        if let Some(last) = page.last() {
            if let Ok(value) = HeaderValue::from_str(&format!("{}:{}", last.created_at, last.id)) {
                response.headers_mut().insert(CONTINUATION, value);
            }
        }
    }
    Ok(response)
}

/// Raises an event for an instance.
#[utoipa::path(
    post,
    path = "/runtime/webhooks/durabletask/instances/{id}/raiseEvent/{event}",
    tag = "management",
    params(("id" = String, Path), ("event" = String, Path)),
    request_body(content = Object, description = "The payload (any JSON)", content_type = "application/json"),
    responses(
        (status = 202, description = "Accepted"),
        super::schemas::Failures
    )
)]
pub async fn raise_event(
    State(state): State<AppState>,
    Path((id, event)): Path<(String, String)>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let payload = json_body(&headers, body, &state.config).await?;
    may_act_on_instance(&state, &caller, &id).await?;
    state
        .orchestrator
        .raise_event(&id, &event, &payload)
        .await?;
    Ok(error::accepted(()))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ReasonQuery {
    reason: Option<String>,
}

/// Terminates an instance.
#[utoipa::path(
    post,
    path = "/runtime/webhooks/durabletask/instances/{id}/terminate",
    tag = "management",
    params(("id" = String, Path), ReasonQuery),
    responses(
        (status = 202, description = "Accepted"),
        super::schemas::Failures
    )
)]
pub async fn terminate(
    State(state): State<AppState>,
    Path(id): Path<String>,
    caller: Caller,
    Query(query): Query<ReasonQuery>,
) -> Result<Response, ApiError> {
    let reason = query.reason.unwrap_or_else(|| "terminated".into());
    may_act_on_instance(&state, &caller, &id).await?;
    state
        .orchestrator
        .manage(&id, Operation::terminate_for(&reason))
        .await?;
    Ok(error::accepted(()))
}

/// Suspends an instance.
#[utoipa::path(
    post,
    path = "/runtime/webhooks/durabletask/instances/{id}/suspend",
    tag = "management",
    params(("id" = String, Path), ReasonQuery),
    responses(
        (status = 202, description = "Accepted"),
        super::schemas::Failures
    )
)]
pub async fn suspend(
    State(state): State<AppState>,
    Path(id): Path<String>,
    caller: Caller,
) -> Result<Response, ApiError> {
    may_act_on_instance(&state, &caller, &id).await?;
    state.orchestrator.manage(&id, Operation::Suspend).await?;
    Ok(error::accepted(()))
}

/// Resumes a suspended instance.
#[utoipa::path(
    post,
    path = "/runtime/webhooks/durabletask/instances/{id}/resume",
    tag = "management",
    params(("id" = String, Path), ReasonQuery),
    responses(
        (status = 202, description = "Accepted"),
        super::schemas::Failures
    )
)]
pub async fn resume(
    State(state): State<AppState>,
    Path(id): Path<String>,
    caller: Caller,
) -> Result<Response, ApiError> {
    may_act_on_instance(&state, &caller, &id).await?;
    state.orchestrator.manage(&id, Operation::Resume).await?;
    Ok(error::accepted(()))
}

/// Deletes a finished instance and its history.
#[utoipa::path(
    delete,
    path = "/runtime/webhooks/durabletask/instances/{id}",
    tag = "management",
    params(("id" = String, Path)),
    responses(
        (status = 200, description = "Deleted", body = Purged),
        super::schemas::Failures
    )
)]
pub async fn purge(
    State(state): State<AppState>,
    Path(id): Path<String>,
    caller: Caller,
) -> Result<Response, ApiError> {
    may_act_on_instance(&state, &caller, &id).await?;
    state.orchestrator.manage(&id, Operation::Purge).await?;
    Ok(Json(Purged {
        instances_deleted: 1,
        more: false,
    })
    .into_response())
}

/// Deletes the finished instances that match the filter.
#[utoipa::path(
    delete,
    path = "/runtime/webhooks/durabletask/instances",
    tag = "management",
    params(ListQuery),
    responses(
        (status = 200, description = "Deleted", body = Purged),
        super::schemas::Failures
    )
)]
pub async fn purge_matching(
    State(state): State<AppState>,
    caller: Caller,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let Some(filter) = instances_of(&caller, filter_of(&query)?) else {
        return Ok(Json(Purged {
            instances_deleted: 0,
            more: false,
        })
        .into_response());
    };
    let purge = state.orchestrator.purge_matching(&filter).await?;
    Ok(Json(Purged {
        instances_deleted: purge.deleted,
        more: purge.more,
    })
    .into_response())
}
