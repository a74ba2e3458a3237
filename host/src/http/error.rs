//! The one place where errors become HTTP statuses and `{error, code}` bodies.

use std::borrow::Cow;

use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};

use crate::core::limits::LimitError;
use crate::durable::DurableError;
use crate::store::StoreError;

/// An error answered to an HTTP caller.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: Cow<'static, str>,
    message: String,
    extra: Map<String, Value>,
}

impl ApiError {
    pub fn new(
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

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
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

impl From<DurableError> for ApiError {
    fn from(error: DurableError) -> Self {
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
            DurableError::Limit(LimitError::Payload { .. }) => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                error.to_string(),
            ),
            DurableError::Limit(LimitError::Inbox { .. }) => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "inbox_full",
                error.to_string(),
            ),
            DurableError::Limit(LimitError::History { .. }) => {
                ApiError::new(StatusCode::CONFLICT, "history_full", error.to_string())
            }
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

pub async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "not_found",
        format!("no route for {method} {}", uri.path()),
    )
}

pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not allowed on {}", uri.path()),
    )
}
