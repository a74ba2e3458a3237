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

/// Most redirects followed for one [`get`].
const MAX_REDIRECTS: usize = 5;

/// GETs an `http://` or `https://` URL and reads the whole body, following
/// up to five redirects. Each hop is a request of its own, checked by the
/// host against the component's grants: a redirect to a host the component
/// was not granted fails like a request to it would.
///
/// ```no_run
/// let answer = agenthost_guest::http::get("http://127.0.0.1:8080/ping")?;
/// assert_eq!(answer.status, 200);
/// # Ok::<(), String>(())
/// ```
pub fn get(url: &str) -> Result<Response, String> {
    let mut url = url.to_string();
    for _ in 0..=MAX_REDIRECTS {
        match get_once(&url)? {
            Hop::Answer(response) => return Ok(response),
            Hop::Redirect(location) => url = follow(&url, &location),
        }
    }
    Err(format!(
        "more than {MAX_REDIRECTS} redirects, the last to '{url}'"
    ))
}

enum Hop {
    Answer(Response),
    Redirect(String),
}

/// Where a `Location` leads from `url`: an absolute URL, an absolute path
/// on the same origin, or a path relative to the current one.
fn follow(url: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.to_string();
    }
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let origin_end = url[scheme_end..]
        .find('/')
        .map_or(url.len(), |i| scheme_end + i);
    if location.starts_with('/') {
        return format!("{}{location}", &url[..origin_end]);
    }
    let base = url[..].rfind('/').filter(|i| *i >= origin_end).map_or_else(
        || format!("{}/", &url[..origin_end]),
        |i| url[..=i].to_string(),
    );
    format!("{base}{location}")
}

fn get_once(url: &str) -> Result<Hop, String> {
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
    if matches!(status, 301 | 302 | 303 | 307 | 308) {
        let location = response
            .headers()
            .get("location")
            .into_iter()
            .next()
            .map(|value| String::from_utf8_lossy(&value).into_owned());
        if let Some(location) = location {
            return Ok(Hop::Redirect(location));
        }
    }
    let body = response.consume().map_err(|()| "no body")?;
    let stream = body.stream().map_err(|()| "no body stream")?;
    let mut bytes = Vec::new();
    // The stream ends with an error (closed); the body is what came before.
    while let Ok(chunk) = stream.blocking_read(64 * 1024) {
        bytes.extend(chunk);
    }
    Ok(Hop::Answer(Response {
        status,
        body: String::from_utf8_lossy(&bytes).into_owned(),
    }))
}

#[cfg(test)]
mod tests {
    use super::follow;

    #[test]
    fn locations_resolve_against_the_url_they_came_from() {
        let from = "http://a.test:8080/x/y?q=1";
        assert_eq!(follow(from, "https://b.test/z"), "https://b.test/z");
        assert_eq!(follow(from, "/z"), "http://a.test:8080/z");
        assert_eq!(follow(from, "z"), "http://a.test:8080/x/z");
        assert_eq!(follow("http://a.test", "z"), "http://a.test/z");
    }
}
