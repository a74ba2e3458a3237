//! Who may talk to this host: the `Host` a request is addressed to and the
//! `Origin` a browser says it comes from.
//!
//! A host without endpoint keys answers anything that reaches its socket. On
//! a developer's machine that includes every web page the developer opens: a
//! page can post a `text/plain` body to `http://127.0.0.1:7071` with no CORS
//! preflight (running agents, spending the model's tokens, driving tools,
//! starting or purging orchestrations), and DNS rebinding points a name the
//! page controls at 127.0.0.1 so that it can read the answers too. So a
//! keyless host answers only requests addressed to a loopback name or
//! address (or a name `--allowed-hosts` lists), and refuses a request whose
//! `Origin` is another site: not loopback, not this host itself, not listed
//! in `--allowed-origins`. With keys the lists apply when they are set (a
//! page cannot present a key it does not have). Those origins get CORS
//! answers (tower-http's layer); refusals are 403 in JSON naming the setting.
//!
//! The probes (`/api/health/live`, `/api/health/ready`) say only up or
//! down and are answered to anyone, so that a platform's checker need not
//! be listed.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::http::header::{HOST, ORIGIN};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_http::cors::{AllowHeaders, AllowOrigin, Any, CorsLayer};

use super::error::ApiError;

/// The lists, as the settings gave them.
#[derive(Debug, Clone, Default)]
pub struct Allowed {
    /// Host names (a port, if written, is ignored); `*` any.
    pub hosts: Vec<String>,
    /// Origins (`scheme://host[:port]`); `*` any.
    pub origins: Vec<String>,
    /// No endpoint keys: the checks apply whether or not the lists are set.
    pub keyless: bool,
}

impl Allowed {
    fn any_host(&self) -> bool {
        self.hosts.iter().any(|h| h == "*")
    }

    fn any_origin(&self) -> bool {
        self.origins.iter().any(|o| o == "*")
    }

    /// Why a request addressed to `host` is refused, if it is.
    fn refuses_host(&self, host: Option<&str>) -> Option<String> {
        if (!self.keyless && self.hosts.is_empty()) || self.any_host() {
            return None;
        }
        let Some(host) = host else {
            return Some("the request names no Host".into());
        };
        let name = host_name(host);
        let listed = self
            .hosts
            .iter()
            .any(|allowed| host_name(allowed).eq_ignore_ascii_case(&name));
        (!is_loopback(&name) && !listed).then(|| {
            format!(
                "this host answers requests addressed to a loopback name (localhost, 127.0.0.1, [::1]){}; \
                 to answer '{name}', list it in --allowed-hosts (AGENTHOST_ALLOWED_HOSTS)",
                if self.keyless { " while it has no endpoint keys" } else { " or one --allowed-hosts lists" }
            )
        })
    }

    /// Why a request from `origin` to `host` is refused, if it is.
    fn refuses_origin(&self, origin: Option<&str>, host: Option<&str>) -> Option<String> {
        let origin = origin?;
        if (!self.keyless && self.origins.is_empty()) || self.any_origin() {
            return None;
        }
        let listed = self
            .origins
            .iter()
            .any(|allowed| allowed.trim_end_matches('/').eq_ignore_ascii_case(origin));
        let parsed = url::Url::parse(origin).ok();
        let origin_host = parsed.as_ref().and_then(|u| u.host_str()).map(host_name);
        let loopback = origin_host.as_deref().is_some_and(is_loopback);
        // The host's own pages (the dashboard) come from where they are served.
        // The origin's name and port (a default port left out, as both a
        // browser's `Origin` and `Host` leave it) are the `Host`.
        let same = parsed.as_ref().zip(host).is_some_and(|(url, host)| {
            let authority = match url.port() {
                Some(port) => format!("{}:{port}", url.host_str().unwrap_or_default()),
                None => url.host_str().unwrap_or_default().to_string(),
            };
            authority.eq_ignore_ascii_case(host)
        });
        (!listed && !loopback && !same).then(|| {
            format!(
                "a page from '{origin}' may not call this host; to let it, list the origin in \
                 --allowed-origins (AGENTHOST_ALLOWED_ORIGINS)"
            )
        })
    }

    /// CORS answers for the listed origins (none: no CORS header at all, so
    /// a browser keeps other sites' pages from reading answers).
    pub fn cors(&self) -> Option<CorsLayer> {
        if self.origins.is_empty() {
            return None;
        }
        let origin = if self.any_origin() {
            AllowOrigin::any()
        } else {
            AllowOrigin::list(
                self.origins
                    .iter()
                    .filter_map(|o| HeaderValue::from_str(o.trim_end_matches('/')).ok()),
            )
        };
        Some(
            CorsLayer::new()
                .allow_origin(origin)
                .allow_methods(Any)
                // The headers the page asks for, `Authorization` included
                // (a `*` would not cover it). No credentials are allowed: a
                // browser's stored sign-in to the dashboard never goes with
                // another site's request.
                .allow_headers(AllowHeaders::mirror_request())
                .expose_headers(Any),
        )
    }
}

/// The name part of a `Host` (or of a listed name): no port, no brackets.
/// Anything but a port after a bracketed address leaves it whole (and so
/// no loopback name).
fn host_name(host: &str) -> String {
    let host = host.trim();
    if let Some(rest) = host.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((address, "")) => address.to_string(),
            Some((address, port))
                if port
                    .strip_prefix(':')
                    .is_some_and(|p| p.parse::<u16>().is_ok()) =>
            {
                address.to_string()
            }
            _ => host.to_string(),
        };
    }
    match host.rsplit_once(':') {
        // One colon: name and port. More: a bare IPv6 address.
        Some((name, port)) if !name.contains(':') && port.parse::<u16>().is_ok() => {
            name.to_string()
        }
        _ => host.to_string(),
    }
}

/// `localhost`, a name under it (RFC 6761), or a loopback address.
fn is_loopback(name: &str) -> bool {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The authority a request is addressed to, as RFC 9112 §3.2 reads it:
/// the request target's when it names one (an absolute-form target, which
/// a proxy sends; HTTP/2's `:authority`), else its one `Host`. More than one
/// `Host`, a `Host` that is not text, or none on an HTTP/1.1 request that
/// names no authority is a bad request (400), whoever sent it: which name
/// the host then checks would depend on which line a proxy or this host
/// reads.
///
/// The `Host` the handlers read (the URLs they hand out) is made the
/// target's, so what they build is what was checked.
fn addressed_to(request: &mut Request) -> Result<Option<String>, ApiError> {
    let mut hosts = request.headers().get_all(HOST).iter();
    let (first, more) = (hosts.next().cloned(), hosts.next().is_some());
    if more {
        return Err(ApiError::bad_request(
            "duplicate_host",
            "the request has more than one Host header (RFC 9112 §3.2): send exactly one",
        ));
    }
    if let Some(authority) = request.uri().authority() {
        // The name and port only: user information names no host.
        let target = match authority.port() {
            Some(port) => format!("{}:{port}", authority.host()),
            None => authority.host().to_string(),
        };
        if let Ok(value) = HeaderValue::from_str(&target) {
            request.headers_mut().insert(HOST, value);
        }
        return Ok(Some(target));
    }
    match first {
        Some(value) => match value.to_str() {
            Ok(text) if !text.trim().is_empty() => Ok(Some(text.to_string())),
            _ => Err(ApiError::bad_request(
                "invalid_host",
                "the request's Host header is empty or not text: name the host it is addressed to",
            )),
        },
        None if request.version() == axum::http::Version::HTTP_11 => Err(ApiError::bad_request(
            "missing_host",
            "an HTTP/1.1 request must name its host in a Host header (RFC 9112 §3.2)",
        )),
        None => Ok(None),
    }
}

/// The request's `Origin`. An `Origin` that is not text names no site this
/// host knows: taken as a foreign one (it parses as no URL). Two are a bad
/// request (no browser sends two; checking one would let the other pass).
fn one_origin(headers: &axum::http::HeaderMap) -> Result<Option<&str>, ApiError> {
    let mut origins = headers.get_all(ORIGIN).iter();
    let first = origins.next();
    if origins.next().is_some() {
        return Err(ApiError::bad_request(
            "duplicate_origin",
            "the request has more than one Origin header: send at most one",
        ));
    }
    Ok(first.map(|o| o.to_str().unwrap_or("\u{1}")))
}

/// The middleware: 400 in JSON for a request whose `Host` is ambiguous, 403
/// for a foreign `Host` or `Origin`.
pub async fn guard(
    State(allowed): State<std::sync::Arc<Allowed>>,
    mut request: Request,
    next: Next,
) -> Response {
    let host = match addressed_to(&mut request) {
        Ok(host) => host,
        Err(refused) => {
            tracing::warn!("refused a request whose Host is ambiguous or missing");
            return refused.into_response();
        }
    };
    let path = request.uri().path();
    if path == "/api/health/live" || path == "/api/health/ready" {
        return next.run(request).await;
    }
    let origin = match one_origin(request.headers()) {
        Ok(origin) => origin,
        Err(refused) => return refused.into_response(),
    };
    if let Some(why) = allowed.refuses_host(host.as_deref()) {
        tracing::warn!(
            host = host.as_deref().unwrap_or_default(),
            "refused a request addressed to a host not allowed"
        );
        return ApiError::forbidden_code("host_not_allowed", why).into_response();
    }
    if let Some(why) = allowed.refuses_origin(origin, host.as_deref()) {
        tracing::warn!(
            origin = origin.unwrap_or_default(),
            "refused a request from an origin not allowed"
        );
        return ApiError::forbidden_code("origin_not_allowed", why).into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyless(hosts: &[&str], origins: &[&str]) -> Allowed {
        Allowed {
            hosts: hosts.iter().map(|h| h.to_string()).collect(),
            origins: origins.iter().map(|o| o.to_string()).collect(),
            keyless: true,
        }
    }

    #[test]
    fn a_keyless_host_answers_loopback_names_and_listed_ones() {
        let allowed = keyless(&["agents.internal"], &[]);
        for host in [
            "localhost:7071",
            "127.0.0.1:7071",
            "[::1]:7071",
            "LOCALHOST",
            "app.localhost:80",
            "127.0.0.2",
            "agents.internal:7071",
        ] {
            assert_eq!(allowed.refuses_host(Some(host)), None, "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:7071",
            "localhost.evil.example",
            "10.0.0.1:7071",
            "[::2]:7071",
            "[::1]evil",
            "[::1]:x",
            "0.0.0.0:7071",
        ] {
            assert!(
                allowed
                    .refuses_host(Some(host))
                    .is_some_and(|why| why.contains("--allowed-hosts")),
                "{host}"
            );
        }
        assert!(allowed.refuses_host(None).is_some());
        assert_eq!(
            keyless(&["*"], &[]).refuses_host(Some("evil.example")),
            None
        );
    }

    #[test]
    fn a_keyless_host_refuses_pages_of_other_sites() {
        let allowed = keyless(&[], &["https://app.example.com"]);
        let host = Some("localhost:7071");
        for origin in [
            "http://localhost:3000",
            "http://127.0.0.1:7071",
            "https://app.example.com",
            "https://APP.example.com",
        ] {
            assert_eq!(allowed.refuses_origin(Some(origin), host), None, "{origin}");
        }
        for origin in [
            "https://evil.example",
            "null",
            "http://localhost.evil.example",
        ] {
            assert!(
                allowed
                    .refuses_origin(Some(origin), host)
                    .is_some_and(|why| why.contains("--allowed-origins")),
                "{origin}"
            );
        }
        // No Origin: not a browser's cross-site request.
        assert_eq!(allowed.refuses_origin(None, host), None);
        // The host's own pages, wherever it is served.
        let public = keyless(&["agents.example.com"], &[]);
        assert_eq!(
            public.refuses_origin(
                Some("https://agents.example.com"),
                Some("agents.example.com")
            ),
            None
        );
        assert_eq!(
            public.refuses_origin(
                Some("http://agents.example.com:7071"),
                Some("agents.example.com:7071")
            ),
            None
        );
        // Another port of the same name is another site.
        assert!(public
            .refuses_origin(
                Some("http://agents.example.com:8080"),
                Some("agents.example.com")
            )
            .is_some());
    }

    fn request(target: &str, hosts: &[&str]) -> Request {
        let mut builder = Request::builder().uri(target);
        for host in hosts {
            builder = builder.header(HOST, *host);
        }
        builder.body(axum::body::Body::empty()).unwrap()
    }

    #[test]
    fn the_authority_checked_is_the_one_host_or_the_targets() {
        let addressed = |target: &str, hosts: &[&str]| {
            let mut request = request(target, hosts);
            addressed_to(&mut request).map(|host| {
                let header = request.headers().get(HOST).cloned();
                (host, header)
            })
        };
        // Two Host lines: which one a proxy read is anyone's guess.
        let refused = addressed("/api/health", &["localhost", "evil.example"]).unwrap_err();
        assert_eq!(refused.code(), "duplicate_host");
        assert_eq!(
            addressed("/", &["localhost:7071", "localhost:7071"])
                .unwrap_err()
                .code(),
            "duplicate_host"
        );
        assert_eq!(
            addressed("/", &["localhost:7071"]).unwrap().0.as_deref(),
            Some("localhost:7071")
        );
        // An absolute-form target names the host; its Host line is ignored
        // and replaced, so the URLs handed out name what was checked.
        let (host, header) =
            addressed("http://evil.example/api/agents/writer/run", &["localhost"]).unwrap();
        assert_eq!(host.as_deref(), Some("evil.example"));
        assert_eq!(header.unwrap(), "evil.example");
        let (host, _) = addressed("http://user@127.0.0.1:7071/x", &[]).unwrap();
        assert_eq!(host.as_deref(), Some("127.0.0.1:7071"));
        // HTTP/1.1 without a Host.
        assert_eq!(addressed("/", &[]).unwrap_err().code(), "missing_host");
        let mut old = request("/", &[]);
        *old.version_mut() = axum::http::Version::HTTP_10;
        assert_eq!(addressed_to(&mut old).ok(), Some(None));
        assert_eq!(addressed("/", &[""]).unwrap_err().code(), "invalid_host");
    }

    #[test]
    fn two_origins_are_a_bad_request() {
        let mut headers = axum::http::HeaderMap::new();
        assert_eq!(one_origin(&headers).ok(), Some(None));
        headers.append(ORIGIN, HeaderValue::from_static("http://localhost"));
        assert_eq!(one_origin(&headers).ok(), Some(Some("http://localhost")));
        headers.append(ORIGIN, HeaderValue::from_static("https://evil.example"));
        assert_eq!(
            one_origin(&headers).map(|_| ()).unwrap_err().code(),
            "duplicate_origin"
        );
    }

    #[test]
    fn with_keys_the_lists_apply_only_when_set() {
        let keyed = Allowed {
            keyless: false,
            ..Allowed::default()
        };
        assert_eq!(keyed.refuses_host(Some("evil.example")), None);
        assert_eq!(
            keyed.refuses_origin(Some("https://evil.example"), Some("evil.example")),
            None
        );
        let listed = Allowed {
            keyless: false,
            hosts: vec!["agents.example.com".into()],
            origins: vec!["https://app.example.com".into()],
        };
        assert!(listed.refuses_host(Some("evil.example")).is_some());
        assert_eq!(listed.refuses_host(Some("agents.example.com")), None);
        assert!(listed
            .refuses_origin(Some("https://evil.example"), Some("agents.example.com"))
            .is_some());
        assert!(listed.cors().is_some() && keyed.cors().is_none());
    }
}
