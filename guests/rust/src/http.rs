//! Outbound HTTP for tools and activities, through `wasi:http`. The host
//! answers only for hosts the component's grants allow (`allowed_hosts` in
//! its sidecar TOML); anything else fails here with the host's refusal,
//! and the request never leaves the machine. Orchestration code itself is
//! never granted the network: call an activity that uses this instead.

use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, Method, OutgoingRequest, Scheme};

/// A response: its status and its body as text (lossy UTF-8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

/// GETs an `http://` or `https://` URL and reads the whole body.
///
/// ```no_run
/// let answer = agenthost_guest::http::get("http://127.0.0.1:8080/ping")?;
/// assert_eq!(answer.status, 200);
/// # Ok::<(), String>(())
/// ```
pub fn get(url: &str) -> Result<Response, String> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("http://") {
        (Scheme::Http, rest)
    } else if let Some(rest) = url.strip_prefix("https://") {
        (Scheme::Https, rest)
    } else {
        return Err(format!(
            "'{url}': only http:// and https:// URLs are supported"
        ));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let request = OutgoingRequest::new(Fields::new());
    request
        .set_method(&Method::Get)
        .map_err(|()| "bad method")?;
    request
        .set_scheme(Some(&scheme))
        .map_err(|()| "bad scheme")?;
    request
        .set_authority(Some(authority))
        .map_err(|()| format!("bad authority '{authority}'"))?;
    request
        .set_path_with_query(Some(path))
        .map_err(|()| format!("bad path '{path}'"))?;
    let pending = outgoing_handler::handle(request, None).map_err(|e| format!("refused: {e:?}"))?;
    pending.subscribe().block();
    let response = pending
        .get()
        .ok_or("no response")?
        .map_err(|()| "response taken twice")?
        .map_err(|e| format!("refused: {e:?}"))?;
    let status = response.status();
    let body = response.consume().map_err(|()| "no body")?;
    let stream = body.stream().map_err(|()| "no body stream")?;
    let mut bytes = Vec::new();
    // The stream ends with an error (closed); the body is what came before.
    while let Ok(chunk) = stream.blocking_read(64 * 1024) {
        bytes.extend(chunk);
    }
    Ok(Response {
        status,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    })
}
