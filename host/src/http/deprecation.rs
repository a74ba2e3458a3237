//! Migration headers for requests that used deprecated field names (see
//! `../shared/compat.md`): `Deprecation` (RFC 9745: the moment the names
//! were deprecated), a `Link` to what replaces them, and the `Warning` the
//! callers' own hosting sends.

use axum::http::HeaderValue;
use axum::response::Response;

/// 2026-01-01T00:00:00Z, when `thread_id` and the snake_case names gave way
/// to `sessionId` and `waitForResponse`.
const DEPRECATED_SINCE: &str = "@1767225600";
const LINK: &str = "<https://learn.microsoft.com/agent-framework/>; rel=\"deprecation\"";
const WARNING: &str = "299 - \"Deprecated agent HTTP field names are supported temporarily; use sessionId and waitForResponse.\"";

/// Adds the migration headers when the request used deprecated names.
pub fn mark(mut response: Response, used: &[&str]) -> Response {
    if used.is_empty() {
        return response;
    }
    let headers = response.headers_mut();
    headers.insert("deprecation", HeaderValue::from_static(DEPRECATED_SINCE));
    headers.insert("link", HeaderValue::from_static(LINK));
    headers.insert("warning", HeaderValue::from_static(WARNING));
    if let Ok(names) = HeaderValue::from_str(&used.join(", ")) {
        headers.insert("x-deprecated-fields", names);
    }
    response
}
