//! The one place where answers get their HTTP status: each service's errors
//! (one mapping per error type, each with its `errorCode`), the edge's own
//! refusals (named constructors), the framework's rejections rewritten as
//! JSON, and the few success statuses other than 200.
//!
//! A new error of a service gets its status here and nowhere else, so the
//! status of a refusal never depends on which handler met it.

use std::borrow::Cow;

use axum::body::to_bytes;
use axum::http::header::CONTENT_TYPE;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::core::limits::LimitError;
use crate::durable::DurableError;
use crate::runs::RunsError;
use crate::store::StoreError;
use crate::streams::StreamError;

/// An error answered to an HTTP caller.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: Cow<'static, str>,
    message: String,
    extra: Map<String, Value>,
}

impl ApiError {
    fn new(
        status: StatusCode,
        code: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            code: code.into(),
            message: message.into(),
            extra: Map::new(),
        }
    }

    /// 400: the request itself is wrong.
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    /// 401: no key, or a key this host does not know.
    pub fn unauthorized(message: &'static str) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// 403: a known key whose scope does not cover the route.
    pub fn forbidden(message: String) -> Self {
        Self::new(StatusCode::FORBIDDEN, "forbidden", message)
    }

    /// 403: the request comes from where this host does not answer (a
    /// foreign `Host` or `Origin`); `code` says which.
    pub fn forbidden_code(code: &'static str, message: String) -> Self {
        Self::new(StatusCode::FORBIDDEN, code, message)
    }

    /// 403: the conversation was started by another caller (an invoke key
    /// continues only its own; the store decides, as it stores the run).
    pub fn session_of_another(session: &str) -> Self {
        Self::new(
            StatusCode::FORBIDDEN,
            "session_of_another_caller",
            format!(
                "session '{session}' was started by another caller: use a session id of your own"
            ),
        )
    }

    /// 404: nothing at this address.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    /// 413: the body exceeds the host's limit.
    pub fn body_too_large(limit: usize) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body_too_large",
            format!(
                "the request body exceeds the limit of {limit} bytes: store large data elsewhere and pass a reference"
            ),
        )
    }

    /// 408: the body did not arrive whole in time.
    pub fn body_timeout(limit: std::time::Duration) -> Self {
        Self::new(
            StatusCode::REQUEST_TIMEOUT,
            "body_timeout",
            format!(
                "the request body did not arrive whole within {}: send it at once (the host's --body-timeout)",
                humantime::format_duration(limit)
            ),
        )
    }

    /// 409: the request conflicts with the state of what it names.
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    /// 503: what the request needs cannot be had now (try again later).
    pub fn unavailable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
    }

    /// 502: the agent's run failed (its model, its tools, its code).
    pub fn run_failed(code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_GATEWAY, code, message)
    }

    /// 504: a stream ended before its run did.
    pub fn stream_incomplete() -> Self {
        Self::new(
            StatusCode::GATEWAY_TIMEOUT,
            "stream_incomplete",
            "the stream ended before the run completed",
        )
    }

    /// What went wrong, in words.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The stable machine-readable code.
    #[cfg(test)]
    pub fn code(&self) -> &str {
        &self.code
    }

    /// Adds a field to the JSON body beside `error` and `code`.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra.insert(key.to_string(), value.into());
        self
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        tracing::error!(error = %e, "store error while answering a request");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            format!("the store failed: {e}"),
        )
    }
}

impl From<RunsError> for ApiError {
    fn from(error: RunsError) -> Self {
        let message = error.to_string();
        match error {
            RunsError::UnknownAgent { registered, .. } => {
                Self::new(StatusCode::NOT_FOUND, "agent_not_found", message)
                    .with("agents", registered)
            }
            RunsError::RunNotFound { .. } => {
                Self::new(StatusCode::NOT_FOUND, "run_not_found", message)
            }
            RunsError::SessionNotFound(_) => {
                Self::new(StatusCode::NOT_FOUND, "session_not_found", message)
            }
            RunsError::SessionBusy(_) => Self::new(StatusCode::CONFLICT, "session_busy", message),
            RunsError::SessionOfAnother(session) => Self::session_of_another(&session.session_id),
            RunsError::NoSuchApproval { .. } => {
                Self::new(StatusCode::NOT_FOUND, "approval_not_found", message)
            }
            RunsError::AlreadyDecided { .. } => {
                Self::new(StatusCode::CONFLICT, "already_decided", message)
            }
            RunsError::NotCancelable { status, .. } => {
                Self::new(StatusCode::CONFLICT, "run_not_cancelable", message)
                    .with("status", status.as_str())
            }
            RunsError::Store(e) => e.into(),
        }
    }
}

impl From<DurableError> for ApiError {
    fn from(error: DurableError) -> Self {
        let message = error.to_string();
        match error {
            DurableError::UnknownOrchestration { registered, .. } => {
                Self::new(StatusCode::NOT_FOUND, "orchestration_not_found", message)
                    .with("orchestrations", registered)
            }
            DurableError::InputRefused { problems, .. } => {
                Self::bad_request("invalid_input", message).with("problems", problems)
            }
            DurableError::AlreadyExists(_) => {
                Self::new(StatusCode::CONFLICT, "instance_exists", message)
            }
            DurableError::Limit(LimitError::Payload { .. }) => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
            }
            DurableError::Limit(LimitError::Inbox { .. }) => {
                Self::new(StatusCode::TOO_MANY_REQUESTS, "inbox_full", message)
            }
            DurableError::Limit(LimitError::History { .. } | LimitError::EpisodeCalls { .. }) => {
                Self::new(StatusCode::CONFLICT, "history_full", message)
            }
            DurableError::BadInstanceId => Self::bad_request("invalid_instance_id", message),
            DurableError::BadName => Self::bad_request("invalid_name", message),
            DurableError::ReservedEvent(_) => Self::bad_request("reserved_event_name", message),
            DurableError::InstanceNotFound(_) => {
                Self::new(StatusCode::NOT_FOUND, "instance_not_found", message)
            }
            DurableError::InstanceFinished(_) => {
                Self::new(StatusCode::GONE, "instance_finished", message)
            }
            DurableError::TooManyDescendants(..) => {
                Self::new(StatusCode::CONFLICT, "too_many_descendants", message)
            }
            DurableError::InvalidState(_) => {
                Self::new(StatusCode::CONFLICT, "invalid_state", message)
            }
            DurableError::InstanceRunning(_) => {
                Self::new(StatusCode::CONFLICT, "instance_running", message)
            }
            DurableError::Store(_) => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                message,
            ),
        }
    }
}

impl From<StreamError> for ApiError {
    fn from(e: StreamError) -> Self {
        if let StreamError::TooManyFollowers(_) = e {
            return Self::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_followers",
                e.to_string(),
            );
        }
        tracing::error!(error = %e, "response stream error while answering a request");
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "stream_unavailable",
            format!("the response stream could not be read: {e}"),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = self.extra;
        body.insert("error".into(), json!(self.message));
        // `errorCode` is the name callers of Agent Framework hosting read.
        body.insert("errorCode".into(), json!(self.code));
        body.insert("code".into(), json!(self.code));
        (self.status, Json(Value::Object(body))).into_response()
    }
}

/// 202: accepted, to be followed or polled.
pub fn accepted(body: impl IntoResponse) -> Response {
    (StatusCode::ACCEPTED, body).into_response()
}

/// Whether `response` is a 202 (`accepted`): an answer that hands out URLs
/// to follow (`front_key`).
pub fn is_accepted(response: &Response) -> bool {
    response.status() == StatusCode::ACCEPTED
}

/// 200 when the work is over, 202 while it goes on (the Durable Functions
/// status route).
pub fn done_or_accepted(done: bool, body: impl IntoResponse) -> Response {
    let status = if done {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    (status, body).into_response()
}

/// 204: done, nothing to say (a deletion).
pub fn no_content() -> Response {
    StatusCode::NO_CONTENT.into_response()
}

/// 200 when healthy, else 503: a health body is not an error body.
pub fn health(healthy: bool, body: impl IntoResponse) -> Response {
    let status = if healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, body).into_response()
}

pub async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::not_found("not_found", format!("no route for {method} {}", uri.path()))
}

pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// A framework rejection's text is one line; more is not read.
const MAX_REJECTION_TEXT: usize = 16 << 10;

/// The framework's own rejections as JSON. axum answers a query string, a
/// path or a body its extractors cannot read with a plain-text 4xx; callers
/// (and fuzzers) must get the same `{error, errorCode, code}` body as every
/// other refusal, so this layer rewrites any error response that is not JSON
/// yet, keeping its status. Handlers' own errors are already JSON and pass
/// through untouched, as does every success (a text/plain answer stays one).
/// The HTTP status of an A2A error on the HTTP+JSON binding, by the
/// error's reason (the A2A spec's table), with `google.rpc.Code`'s name.
pub fn a2a_status_of(reason: &str) -> (u16, &'static str) {
    // The spec's table (A2A 1.0, section 5.4), row by row.
    let (status, name) = match reason {
        "TASK_NOT_FOUND" | "METHOD_NOT_FOUND" => (StatusCode::NOT_FOUND, "NOT_FOUND"),
        "TASK_NOT_CANCELABLE" => (StatusCode::CONFLICT, "FAILED_PRECONDITION"),
        "UNSUPPORTED_OPERATION" | "PUSH_NOTIFICATION_NOT_SUPPORTED" | "VERSION_NOT_SUPPORTED" => {
            (StatusCode::BAD_REQUEST, "UNIMPLEMENTED")
        }
        "CONTENT_TYPE_NOT_SUPPORTED" => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "INVALID_ARGUMENT"),
        "INVALID_AGENT_RESPONSE" => (StatusCode::BAD_GATEWAY, "INTERNAL"),
        "EXTENDED_AGENT_CARD_NOT_CONFIGURED" | "EXTENSION_SUPPORT_REQUIRED" => {
            (StatusCode::BAD_REQUEST, "FAILED_PRECONDITION")
        }
        "INTERNAL_ERROR" => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
        _ => (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT"),
    };
    (status.as_u16(), name)
}

/// An A2A error on the HTTP+JSON binding: its status, its `google.rpc.Status` body.
pub fn a2a_status(reason: &str, body: Value) -> Response {
    let status = StatusCode::from_u16(a2a_status_of(reason).0).unwrap_or(StatusCode::BAD_REQUEST);
    (status, axum::Json(body)).into_response()
}

/// An MCP session's end (`DELETE`) as the MCP clients expect it: 204
/// where `rmcp` answers 202 (the clients print "Session termination
/// failed: 202").
pub fn mcp_session_ended(mut response: Response) -> Response {
    if response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// Refuses a path or query string holding a NUL character (`%00`) before
/// any route reads it: no name or id may hold one (PostgreSQL refuses it in
/// text, and a lookup would fail as the store's error, a 503).
pub async fn refuse_nul(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let uri = request.uri();
    let holds_nul = |text: &str| text.contains("%00");
    if holds_nul(uri.path()) || uri.query().is_some_and(holds_nul) {
        return ApiError::bad_request(
            "invalid_path",
            "a NUL character (%00) cannot be part of a name, an id or a query value",
        )
        .into_response();
    }
    next.run(request).await
}

pub async fn rejections_as_json(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let text = to_bytes(response.into_body(), MAX_REJECTION_TEXT)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_string())
        .unwrap_or_default();
    let code = rejection_code(status, &text);
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("the request was refused")
            .to_string()
    } else {
        text
    };
    ApiError::new(status, code, message).into_response()
}

/// A stable code for what axum refused, by status and the start of its text.
fn rejection_code(status: StatusCode, text: &str) -> &'static str {
    match status {
        StatusCode::BAD_REQUEST if text.starts_with("Failed to deserialize query string") => {
            "invalid_query"
        }
        StatusCode::BAD_REQUEST
            if text.starts_with("Invalid URL") || text.contains("path param") =>
        {
            "invalid_path"
        }
        StatusCode::BAD_REQUEST => "invalid_request",
        StatusCode::NOT_FOUND => "not_found",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "body_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::UNPROCESSABLE_ENTITY => "invalid_body",
        s if s.is_server_error() => "internal_error",
        _ => "request_refused",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_framework_rejection_gets_a_stable_code() {
        let query = "Failed to deserialize query string: top: invalid digit found in string";
        assert_eq!(
            rejection_code(StatusCode::BAD_REQUEST, query),
            "invalid_query"
        );
        let path = "Invalid URL: Cannot parse `\\xFF` to a `String`";
        assert_eq!(
            rejection_code(StatusCode::BAD_REQUEST, path),
            "invalid_path"
        );
        assert_eq!(
            rejection_code(StatusCode::PAYLOAD_TOO_LARGE, "length limit exceeded"),
            "body_too_large"
        );
        assert_eq!(
            rejection_code(StatusCode::IM_A_TEAPOT, ""),
            "request_refused"
        );
    }

    #[test]
    fn each_service_refusal_has_its_status_and_code() {
        let cases: Vec<(ApiError, StatusCode, &str)> = vec![
            (
                RunsError::SessionBusy(crate::runs::SessionKey {
                    agent: "a".into(),
                    session_id: "s".into(),
                })
                .into(),
                StatusCode::CONFLICT,
                "session_busy",
            ),
            (
                DurableError::InstanceFinished("i".into()).into(),
                StatusCode::GONE,
                "instance_finished",
            ),
            (
                DurableError::InstanceRunning("i".into()).into(),
                StatusCode::CONFLICT,
                "instance_running",
            ),
            (
                StreamError::TooManyFollowers(3).into(),
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_followers",
            ),
        ];
        for (error, status, code) in cases {
            assert_eq!((error.status, error.code()), (status, code));
        }
    }
}
