//! Reading request bodies under the size and time limits, answering 413 or
//! 408 in JSON.

use axum::body::{to_bytes, Body, Bytes};
use axum::http::header::CONTENT_LENGTH;
use axum::http::HeaderMap;
use serde_json::Value;

use super::{ApiError, HttpConfig};

/// The body, or 413 when it (or its declared length) exceeds the limit, or
/// 408 when it has not arrived whole in time: a client that trickles a body
/// (or stops midway) would otherwise hold a connection, a task and up to the
/// limit in memory for as long as it likes.
pub async fn read_limited(
    headers: &HeaderMap,
    body: Body,
    config: &HttpConfig,
) -> Result<Bytes, ApiError> {
    let limit = config.max_body_bytes;
    let too_large = || ApiError::body_too_large(limit);
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    match tokio::time::timeout(config.body_timeout, to_bytes(body, limit)).await {
        Ok(read) => read.map_err(|_| too_large()),
        Err(_) => Err(ApiError::body_timeout(config.body_timeout)),
    }
}

/// The body as JSON text; an empty body is `null`; anything else that is not
/// JSON is 400.
pub async fn json_body(
    headers: &HeaderMap,
    body: Body,
    config: &HttpConfig,
) -> Result<String, ApiError> {
    let bytes = read_limited(headers, body, config).await?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok("null".into());
    }
    let value: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::bad_request("invalid_json", format!("the body is not JSON: {e}")))?;
    Ok(value.to_string())
}
