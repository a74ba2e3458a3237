//! The framework's own rejections as JSON. axum answers a query string, a
//! path or a body its extractors cannot read with a plain-text 4xx; callers
//! (and fuzzers) must get the same `{error, errorCode, code}` body as every
//! other refusal, so this layer rewrites any error response that is not JSON
//! yet. Handlers' own errors are already JSON ([`super::ApiError`]) and pass
//! through untouched, as does every success (a text/plain answer stays one).

use axum::body::to_bytes;
use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::ApiError;

/// A framework rejection's text is one line; more is not read.
const MAX_REJECTION_TEXT: usize = 16 << 10;

pub async fn as_json(response: Response) -> Response {
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
    let code = code_of(status, &text);
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
fn code_of(status: StatusCode, text: &str) -> &'static str {
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
        assert_eq!(code_of(StatusCode::BAD_REQUEST, query), "invalid_query");
        let path = "Invalid URL: Cannot parse `\\xFF` to a `String`";
        assert_eq!(code_of(StatusCode::BAD_REQUEST, path), "invalid_path");
        assert_eq!(
            code_of(StatusCode::PAYLOAD_TOO_LARGE, "length limit exceeded"),
            "body_too_large"
        );
        assert_eq!(code_of(StatusCode::IM_A_TEAPOT, ""), "request_refused");
    }
}
