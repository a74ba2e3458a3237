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

/// The middleware: 403 in JSON for a foreign `Host` or `Origin`.
pub async fn guard(
    State(allowed): State<std::sync::Arc<Allowed>>,
    request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path();
    if path == "/api/health/live" || path == "/api/health/ready" {
        return next.run(request).await;
    }
    let headers = request.headers();
    // HTTP/2 carries it in the URI's authority instead.
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string)
        .or_else(|| request.uri().authority().map(|a| a.to_string()));
    // An `Origin` that is not text names no site this host knows: taken
    // as a foreign one (it parses as no URL).
    let origin = headers.get(ORIGIN).map(|o| o.to_str().unwrap_or("\u{1}"));
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
