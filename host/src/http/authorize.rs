//! The key check in front of every matched route: which key a request
//! presents, which URL tokens open which routes without one, and the 401/403
//! answers. What each route needs is [`super::keys::required_scope`]; what a
//! token is, [`super::keys`].

use axum::extract::{MatchedPath, OriginalUri, RawPathParams, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::RequestPartsExt;

use super::caller::Caller;
use super::error::ApiError;
use super::front_routes::canonical;
use super::keys::{required_scope, ApiKeys, Grant, Scope};
use super::AppState;

/// The routes a `?token=` opens without a key, with the path parameter that
/// names what the token must have been minted for: a run's stream, and the
/// URLs an orchestration start hands out for its instance (the status, which
/// is also the purge URL, and the raise, terminate, suspend and resume URLs).
pub(super) fn token_opens(method: &Method, route: &str) -> Option<(Grant, &'static str)> {
    const INSTANCE: &str = "/runtime/webhooks/durabletask/instances/{id}";
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    match (method, route) {
        ("GET", "/api/agents/{name}/runs/{correlation_id}/stream") => {
            Some((Grant::RunStream, "correlation_id"))
        }
        ("GET" | "DELETE", INSTANCE) => Some((Grant::Instance, "id")),
        ("POST", route)
            if route.strip_prefix(INSTANCE).is_some_and(|rest| {
                matches!(
                    rest,
                    "/raiseEvent/{event}" | "/terminate" | "/suspend" | "/resume"
                )
            }) =>
        {
            Some((Grant::Instance, "id"))
        }
        _ => None,
    }
}

/// The header the dashboard's page sends with every request that changes
/// something. A browser sends Basic credentials it holds to this host
/// whoever made the page that asks: another site's form could post with
/// them. It cannot add this header (a cross-origin request with it needs a
/// CORS preflight, which this host never grants), so a change authorized by
/// Basic credentials without it is refused.
pub(super) const DASHBOARD_HEADER: &str = "x-agenthost-dashboard";

/// Whether the request came to the dashboard (its page, its feed, or the API
/// mounted again under it): the one place Basic credentials count.
fn to_dashboard(request: &Request) -> bool {
    let path = request
        .extensions()
        .get::<OriginalUri>()
        .map_or_else(|| request.uri().path(), |uri| uri.0.path());
    path == "/dashboard" || path.starts_with("/dashboard/")
}

/// The key a request presents: `Authorization: Bearer`, `x-api-key`,
/// `x-functions-key` (as the function host reads it), `?code=`, or, to the
/// dashboard alone, HTTP Basic with the key as the password (how a browser
/// signs in to the dashboard and then sends the key on each of the page's
/// requests). A Basic key presented to a change without the dashboard's
/// header is no key: see [`DASHBOARD_HEADER`].
fn presented(request: &Request) -> Option<String> {
    let headers = request.headers();
    let header_value = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_string)
    };
    header_value(header::AUTHORIZATION.as_str())
        .and_then(|v| {
            let (scheme, key) = v.split_once(' ')?;
            if scheme.eq_ignore_ascii_case("basic") {
                let reads = matches!(*request.method(), Method::GET | Method::HEAD);
                let from_page = headers.contains_key(DASHBOARD_HEADER);
                return (to_dashboard(request) && (reads || from_page))
                    .then(|| basic_password(key.trim()))
                    .flatten();
            }
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| key.trim().to_string())
        })
        .or_else(|| header_value("x-api-key"))
        .or_else(|| header_value("x-functions-key"))
        .or_else(|| query_value(request, "code"))
}

/// The password of Basic credentials (`base64(user:password)`); the user
/// name is anything.
fn basic_password(credentials: &str) -> Option<String> {
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(credentials)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_, password) = text.split_once(':')?;
    Some(password.to_string()).filter(|p| !p.is_empty())
}

/// Whether a request presents one of `keys`, of any scope.
pub(super) fn holds_a_key(request: &Request, keys: &ApiKeys) -> bool {
    presented(request).is_some_and(|key| keys.scope_of(&key).is_some())
}

fn query_value(request: &Request, name: &str) -> Option<String> {
    let query = request.uri().query()?;
    url::form_urlencoded::parse(query.as_bytes())
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// The middleware: answers 401 (no key, or an unknown one) or 403 (a key
/// whose scope does not cover the route) in JSON, before the handler runs.
pub async fn authorize(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let keys = &state.config.keys;
    if keys.is_empty() {
        return next.run(request).await;
    }
    // An alias (`front_routes`) is checked as the route it stands for.
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| canonical(m.as_str()).to_string())
        .unwrap_or_default();
    let Some(needed) = required_scope(request.method(), &route) else {
        return next.run(request).await;
    };
    if let Some((grant, param)) = token_opens(request.method(), &route) {
        if let Some(token) = query_value(&request, "token") {
            let (mut parts, body) = request.into_parts();
            let id = parts
                .extract::<RawPathParams>()
                .await
                .ok()
                .and_then(|params| {
                    params
                        .iter()
                        .find(|(name, _)| *name == param)
                        .map(|(_, id)| id.to_string())
                });
            let request = Request::from_parts(parts, body);
            if let Some(id) = id {
                if let Some(named) = keys.opens(grant, &id, &token) {
                    let now = born(&state, grant, &id).await;
                    if admits(named, now) {
                        let mut request = request;
                        request.extensions_mut().insert(Caller::Token);
                        return next.run(request).await;
                    }
                }
            }
            return refuse_or_run(request, needed, &route, keys, next).await;
        }
    }
    refuse_or_run(request, needed, &route, keys, next).await
}

/// Whether a genuine token, minted for the instance created at `named`,
/// opens what its id names now (created at `now`, `None` when there is
/// none): the same one, or nothing (the handler then answers 404, as it
/// would the key holder). A later instance under the same id is another: a
/// token kept from the first opens none of it.
fn admits(named: i64, now: Option<i64>) -> bool {
    now.is_none_or(|now| now == named)
}

/// When the instance `id` was created, `None` when there is none. Runs
/// need no such check: their ids are never reused (a fresh UUID, or an
/// agent call's id, which holds its execution, and executions are numbered
/// by a sequence that never goes back), so their tokens name moment 0.
async fn born(state: &AppState, grant: Grant, id: &str) -> Option<i64> {
    match grant {
        Grant::Instance => state
            .orchestrator
            .status(id, false)
            .await
            .ok()
            .map(|view| view.instance.created_at),
        Grant::RunStream => None,
    }
}

/// Runs the handler if the request's key covers `needed`, else answers the
/// 401 (no key, an unknown key) or 403 (a key of too narrow a scope).
async fn refuse_or_run(
    request: Request,
    needed: Scope,
    route: &str,
    keys: &ApiKeys,
    next: Next,
) -> Response {
    // Who it is goes with the request: what it may see of runs is the
    // handlers' to decide (`caller`).
    let admitted = presented(&request)
        .filter(|key| keys.scope_of(key).is_some_and(|scope| scope >= needed))
        .and_then(|key| keys.caller_of(&key));
    if let Some(caller) = admitted {
        let mut request = request;
        request.extensions_mut().insert(caller);
        return next.run(request).await;
    }
    refuse(&request, needed, route, keys)
}

fn refuse(request: &Request, needed: Scope, route: &str, keys: &ApiKeys) -> Response {
    match presented(request).and_then(|key| keys.scope_of(&key)) {
        Some(scope) => ApiError::forbidden(format!(
            "this key's scope ({}) does not allow {} {route}: it needs an {} key",
            scope.as_str(),
            request.method(),
            needed.as_str()
        ))
        .into_response(),
        None => {
            let basic_change = !matches!(*request.method(), Method::GET | Method::HEAD)
                && request
                    .headers()
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("basic "));
            let why = if presented(request).is_some() {
                "the key presented is not one of this host's keys"
            } else if basic_change && to_dashboard(request) {
                "a change made with the dashboard's sign-in must come from the dashboard's page (it sends the x-agenthost-dashboard header)"
            } else if basic_change {
                "Basic credentials count on the dashboard alone (/dashboard); send the key as `Authorization: Bearer KEY`"
            } else {
                "this host requires a key: send it as `Authorization: Bearer KEY`, `x-api-key`, `x-functions-key` or `?code=KEY`"
            };
            let mut response = ApiError::unauthorized(why).into_response();
            // A browser asks its user for the dashboard's key (any user
            // name, the key as the password) and sends it from then on.
            let challenge = match to_dashboard(request) {
                true => "Basic realm=\"agenthost dashboard\", charset=\"UTF-8\"",
                false => "Bearer",
            };
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static(challenge),
            );
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_present_their_password_as_the_key() {
        // base64("admin:s3cret"), base64(":s3cret"), base64("admin:")
        assert_eq!(
            basic_password("YWRtaW46czNjcmV0").as_deref(),
            Some("s3cret")
        );
        assert_eq!(basic_password("OnMzY3JldA==").as_deref(), Some("s3cret"));
        assert_eq!(basic_password("YWRtaW46"), None, "no password");
        assert_eq!(basic_password("not base64!"), None);
    }

    #[test]
    fn a_token_opens_its_own_instance_or_a_gone_one_never_a_later_one_of_its_id() {
        assert!(admits(1_000, Some(1_000)));
        assert!(admits(1_000, None));
        assert!(!admits(1_000, Some(1_001)));
    }

    #[test]
    fn a_token_opens_the_urls_handed_out_and_no_other_route() {
        let instance = "/runtime/webhooks/durabletask/instances/{id}";
        for (method, route) in [
            (Method::GET, instance.to_string()),
            (Method::HEAD, instance.to_string()),
            (Method::DELETE, instance.to_string()),
            (Method::POST, format!("{instance}/raiseEvent/{{event}}")),
            (Method::POST, format!("{instance}/terminate")),
            (Method::POST, format!("{instance}/suspend")),
            (Method::POST, format!("{instance}/resume")),
        ] {
            assert_eq!(
                token_opens(&method, &route),
                Some((Grant::Instance, "id")),
                "{method} {route}"
            );
        }
        assert_eq!(
            token_opens(
                &Method::GET,
                "/api/agents/{name}/runs/{correlation_id}/stream"
            ),
            Some((Grant::RunStream, "correlation_id"))
        );
        for (method, route) in [
            (Method::GET, "/runtime/webhooks/durabletask/instances"),
            (Method::DELETE, "/runtime/webhooks/durabletask/instances"),
            (Method::POST, instance),
            (Method::GET, "/api/agents/{name}/runs/{correlation_id}"),
            (
                Method::POST,
                "/api/agents/{name}/runs/{correlation_id}/approvals",
            ),
            (Method::GET, "/api/agents/{name}/sessions/{session_id}"),
        ] {
            assert_eq!(token_opens(&method, route), None, "{method} {route}");
        }
    }
}
