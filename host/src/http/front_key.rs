//! The Functions front's key, handed back in the URLs an answer carries.
//!
//! Behind an Azure Functions app under `authLevel: function`, the Functions
//! host checks its own key (`?code=`) before a request reaches this host and
//! refuses one without it. A 202's `statusQueryGetUri`, `streamUrl` or
//! `Location` followed as given would be refused there, so, as Durable
//! Functions puts its key in the URLs it returns, each such URL gets the
//! `code` the request came with. Only that parameter, only when the request
//! had it, escaped; and never a key of this host's own (a `code` this host
//! takes as its key stays out of URLs, which carry their own tokens: see
//! [`super::keys`]).

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::header::{CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use http_body::Body as _;
use serde_json::Value;

use super::{error, AppState};

/// The fields of a 202's body that hold a URL to follow.
const URL_FIELDS: &[&str] = &[
    "statusQueryGetUri",
    "sendEventPostUri",
    "terminatePostUri",
    "suspendPostUri",
    "resumePostUri",
    "purgeHistoryDeleteUri",
    "streamUrl",
    "stream_url",
    "runUrl",
    "approvalsUrl",
];

/// Bodies above this are not ours to rewrite (the host's 202s are small).
const MAX_REWRITTEN: u64 = 64 * 1024;

/// The middleware: a 202 to a request with a front key gets it in its URLs.
pub async fn carry(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let code = front_key(request.uri().query(), |code| {
        state.config.keys.scope_of(code).is_some()
    });
    let response = next.run(request).await;
    match code {
        Some(code) if error::is_accepted(&response) => with_key(response, &code).await,
        _ => response,
    }
}

/// `code` of `query`, escaped for a URL, unless `is_ours`.
fn front_key(query: Option<&str>, is_ours: impl Fn(&str) -> bool) -> Option<String> {
    let (_, code) = url::form_urlencoded::parse(query?.as_bytes()).find(|(k, _)| k == "code")?;
    if code.is_empty() || is_ours(&code) {
        return None;
    }
    Some(url::form_urlencoded::byte_serialize(code.as_bytes()).collect())
}

/// `url` with `code=…` added to its query.
fn add_key(url: &str, code: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}code={code}")
}

async fn with_key(response: Response, code: &str) -> Response {
    let (mut parts, body) = response.into_parts();
    let location = parts
        .headers
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|location| HeaderValue::from_str(&add_key(location, code)).ok());
    if let Some(location) = location {
        parts.headers.insert(LOCATION, location);
    }
    let is_json = parts
        .headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let small = body.size_hint().exact().is_some_and(|n| n <= MAX_REWRITTEN);
    if !(is_json && small) {
        return Response::from_parts(parts, body);
    }
    let Ok(bytes) = axum::body::to_bytes(body, MAX_REWRITTEN as usize).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let rewritten = match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(mut fields)) => {
            for name in URL_FIELDS {
                if let Some(Value::String(url)) = fields.get_mut(*name) {
                    *url = add_key(url, code);
                }
            }
            serde_json::to_vec(&fields)
                .map(Bytes::from)
                .unwrap_or(bytes)
        }
        _ => bytes,
    };
    parts.headers.remove(CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(rewritten))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_code_of_the_front_and_escaped() {
        let none = |_: &str| false;
        assert_eq!(
            front_key(Some("a=1&code=k%2B1/%3D&b=2"), none).as_deref(),
            Some("k%2B1%2F%3D")
        );
        assert_eq!(front_key(Some("a=1"), none), None);
        assert_eq!(front_key(None, none), None);
        assert_eq!(front_key(Some("code="), none), None);
        // A key of this host's own stays out of the URLs.
        assert_eq!(front_key(Some("code=mine"), |c| c == "mine"), None);
    }

    #[test]
    fn added_after_a_query_or_as_one() {
        assert_eq!(add_key("/x/1", "k"), "/x/1?code=k");
        assert_eq!(add_key("/x/1?token=t", "k"), "/x/1?token=t&code=k");
    }
}
