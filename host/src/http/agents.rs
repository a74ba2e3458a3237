//! `POST /api/agents/{name}/run`: run an agent, synchronously or not.

use super::caller::Caller;
use crate::runs::sorted_id;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::header::{ACCEPT, CONTENT_TYPE, LOCATION};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;

use super::body::read_limited;
use super::keys::Grant;
use super::run_body::{error_code, RunAccepted, RunAwaiting, RunCompleted};
use super::run_request::{self, JsonBody, Names};
use super::{deprecation, error, streams, ApiError, AppState};
use crate::agents::normalize_response_format;
use crate::runs::{Answer, NewRun, RunRecord, SessionKey};
use crate::streams::EntryId;

/// The response headers that carry the conversation's id: the current
/// name, and the one older callers read.
pub const SESSION_ID_HEADER: &str = "x-ms-session-id";
pub const THREAD_ID_HEADER: &str = "x-ms-thread-id";
const WAIT_HEADER: &str = "x-ms-wait-for-response";
/// The response header that names the run (its stream's key).
pub const CORRELATION_ID_HEADER: &str = "x-ms-correlation-id";
const MAX_THREAD_ID_LEN: usize = 256;

/// A request after parsing, before it becomes a run.
struct RunRequest {
    message: String,
    names: Names,
    response_format: Option<Value>,
}

/// Runs an agent on a message: the answer (200), or 202 when it is not ready
/// within the wait budget, when `waitForResponse` is false, or when a tool
/// call waits for a human's decision.
#[utoipa::path(
    post,
    path = "/api/agents/{name}/run",
    tag = "agents",
    params(("name" = String, Path, description = "The agent"), Names),
    request_body(content(
        (String = "text/plain"),
        (JsonBody = "application/json"),
    ), description = "The message, as text or as JSON"),
    responses(
        (status = 200, description = "The answer: text, or JSON when the caller accepts JSON",
            headers(("x-ms-session-id" = String, description = "The session (also `x-ms-thread-id`)")),
            content((String = "text/plain"), (RunCompleted = "application/json"))),
        (status = 202, description = "Accepted: follow it at `streamUrl`, or decide its pending tool calls",
            body = super::run_body::RunLater),
        super::schemas::Failures
    )
)]
pub async fn run(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<Names>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let agent = state.runs.served(&name)?;
    let bytes = read_limited(&headers, body, &state.config).await?;
    let request = parse(&headers, &bytes)?;
    let contract = run_request::resolve(
        headers.get(WAIT_HEADER).and_then(|v| v.to_str().ok()),
        &query,
        &request.names,
    )?;
    let minted = contract.session_id.is_none();
    let thread_id = contract
        .session_id
        .unwrap_or_else(|| sorted_id().simple().to_string());
    if thread_id.trim().is_empty()
        || thread_id.len() > MAX_THREAD_ID_LEN
        || thread_id.contains('\0')
    {
        return Err(ApiError::bad_request(
            "invalid_session_id",
            format!("sessionId must be 1 to {MAX_THREAD_ID_LEN} characters, none of them NUL"),
        ));
    }
    // Whether this caller may go on with the session is the store's to
    // decide as it stores the run (403 then, from `RunsError`).
    if !caller.may_start_runs() {
        return Err(ApiError::session_of_another(&thread_id));
    }
    let wait = contract.wait.unwrap_or(true);
    let legacy = contract.legacy;
    let new_run = NewRun {
        correlation_id: sorted_id().to_string(),
        session: SessionKey {
            agent: name.clone(),
            session_id: thread_id,
        },
        message: request.message,
        response_format: request.response_format,
        traceparent: crate::telemetry::current_traceparent(),
        caller: caller.id().map(str::to_string),
    };
    let answer = if streams::wants_events(&headers) || !wait {
        // A follower's place first: refused, the run is not started.
        let follower = streams::wants_events(&headers)
            .then(|| state.streams.admit())
            .transpose()?;
        let run = state.runs.accept(agent, new_run).await?;
        if let Some(follower) = follower {
            let response = streams::sse(&state, follower, &run.correlation_id, EntryId::start());
            with_run_headers(response, &run)
        } else {
            accepted(&state, &run, "Agent request accepted")
        }
    } else {
        let json = wants_json(&headers);
        match state
            .runs
            .ask(agent, new_run, state.config.wait_budget, json, minted)
            .await?
        {
            Answer::Completed { record, messages } => completed(&record, messages),
            Answer::AwaitingApproval(waiting) => {
                let body = Json(RunAwaiting::new(&waiting.record, waiting.pending));
                with_run_headers(error::accepted(body), &waiting.record)
            }
            Answer::Failed(failed) => return Err(run_failed(&failed)),
            Answer::StillRunning(run) => accepted(
                &state,
                &run,
                "The agent is still working; poll the run for its answer",
            ),
        }
    };
    Ok(deprecation::mark(answer, &legacy))
}

fn parse(headers: &HeaderMap, bytes: &[u8]) -> Result<RunRequest, ApiError> {
    let content_type = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let is_json = content_type.starts_with("application/json") || content_type.contains("+json");
    let request = if is_json {
        let body: JsonBody = serde_json::from_slice(bytes).map_err(|e| {
            ApiError::bad_request(
                "invalid_json",
                format!("the body is not a valid run request: {e}"),
            )
        })?;
        let response_format = body
            .response_format
            .map(normalize_response_format)
            .transpose()
            .map_err(|e| ApiError::bad_request("invalid_response_format", e))?
            .flatten();
        RunRequest {
            message: body.message.unwrap_or_default(),
            names: body.names,
            response_format,
        }
    } else {
        let message = std::str::from_utf8(bytes).map_err(|_| {
            ApiError::bad_request("invalid_text", "the body is not valid UTF-8 text")
        })?;
        RunRequest {
            message: message.to_string(),
            names: Names::default(),
            response_format: None,
        }
    };
    if request.message.trim().is_empty() {
        return Err(ApiError::bad_request(
            "empty_message",
            "the message is empty: send it as the text/plain body or as {\"message\": \"...\"}",
        ));
    }
    Ok(request)
}

fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/json"))
}

/// The session's id (as both header names callers read) and the run's.
fn with_run_headers(mut response: Response, run: &RunRecord) -> Response {
    for (name, value) in [
        (SESSION_ID_HEADER, &run.thread_id),
        (THREAD_ID_HEADER, &run.thread_id),
        (CORRELATION_ID_HEADER, &run.correlation_id),
    ] {
        if let Ok(value) = HeaderValue::from_str(value) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

/// The answer: JSON (with the session's message count) when that was
/// counted for a caller who accepts JSON, else the text.
fn completed(run: &RunRecord, messages: Option<u64>) -> Response {
    let response = match messages {
        Some(messages) => Json(RunCompleted::new(run, messages)).into_response(),
        None => {
            let text = run.response.clone().unwrap_or_default();
            ([(CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response()
        }
    };
    with_run_headers(response, run)
}

fn accepted(state: &AppState, run: &RunRecord, note: &str) -> Response {
    let location = format!("/api/agents/{}/runs/{}", run.agent, run.correlation_id);
    let token = state
        .config
        .keys
        .token(Grant::RunStream, &run.correlation_id, 0);
    let body = RunAccepted::new(run, note, token.as_deref());
    let mut response = error::accepted(Json(body));
    if let Ok(value) = HeaderValue::from_str(&location) {
        response.headers_mut().insert(LOCATION, value);
    }
    with_run_headers(response, run)
}

fn run_failed(run: &RunRecord) -> ApiError {
    let reason = run.error.clone().unwrap_or_else(|| "the run failed".into());
    // Stopped by a caller: not the agent's failure (502), a conflict with
    // that caller's request.
    let failed = match run.status {
        crate::runs::RunStatus::Canceled => ApiError::conflict(
            crate::runs::CANCELED,
            format!("agent '{}' did not answer: the run was canceled", run.agent),
        ),
        _ => ApiError::run_failed(
            error_code(run).to_string(),
            format!("agent '{}' failed: {reason}", run.agent),
        ),
    };
    failed
        .with("sessionId", run.thread_id.clone())
        .with("thread_id", run.thread_id.clone())
        .with("correlationId", run.correlation_id.clone())
        .with("correlation_id", run.correlation_id.clone())
}
