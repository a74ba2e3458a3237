//! The key check in front of every matched route: which key a request
//! presents, which URL tokens open which routes without one, and the 401/403
//! answers. What each route needs is [`super::keys::required_scope`]; what a
//! token is, [`super::keys`].

use axum::extract::{MatchedPath, RawPathParams, Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::RequestPartsExt;

use super::error::ApiError;
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

/// The key a request presents: `Authorization: Bearer`, `x-api-key`,
/// `x-functions-key` (as the function host reads it) or `?code=`.
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
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| key.trim().to_string())
        })
        .or_else(|| header_value("x-api-key"))
        .or_else(|| header_value("x-functions-key"))
        .or_else(|| query_value(request, "code"))
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
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
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
    if presented(&request)
        .and_then(|key| keys.scope_of(&key))
        .is_some_and(|scope| scope >= needed)
    {
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
            let why = if presented(request).is_some() {
                "the key presented is not one of this host's keys"
            } else {
                "this host requires a key: send it as `Authorization: Bearer KEY`, `x-api-key`, `x-functions-key` or `?code=KEY`"
            };
            let mut response = ApiError::unauthorized(why).into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
