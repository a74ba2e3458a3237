//! `GET /api/openapi.json`: the OpenAPI 3.1 document of every route, built
//! from the handlers' annotations and their body types (utoipa), with the
//! security each route asks for taken from the one scope table,
//! [`keys::required_scope`](super::keys::required_scope).

use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi as Document;
use utoipa::{Modify, OpenApi};

use super::authorize::token_opens;
use super::keys::{required_scope, Scope};
use super::schemas::{A2aStatus, A2aStatusError, ErrorBody};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "agenthost",
        description = "Agents and durable orchestrations hosted as WebAssembly components. \
                       With endpoint keys configured, each route needs a key of the scope its \
                       description names (`invoke` or `admin`); health and this document are open. \
                       The routes under `/runtime/` are served again, with the same keys, under \
                       `/api/runtime/` (where an Azure Functions front forwards them)."
    ),
    paths(
        super::agents::run,
        super::runs::get,
        super::runs::list,
        super::runs::cancel,
        super::a2a::host_card,
        super::a2a::agent_card,
        super::a2a::call,
        super::a2a::rest::message,
        super::a2a::rest::list_tasks,
        super::a2a::rest::task_get,
        super::a2a::rest::task_post,
        super::a2a::rest::push_config_create,
        super::a2a::rest::push_config_list,
        super::a2a::rest::push_config_get,
        super::a2a::rest::push_config_delete,
        super::a2a::call_at_slash,
        super::functions::wake,
        super::streams::get,
        super::approvals::decide,
        super::sessions::get,
        super::sessions::get_by_hosting_route,
        super::sessions::delete,
        super::components::list,
        super::components::get,
        super::metrics::get,
        super::orchestrators::start,
        super::orchestrators::start_with_id,
        super::orchestrators::declared_route,
        super::instances::list,
        super::instances::purge_matching,
        super::instances::get,
        super::instances::purge,
        super::instances::raise_event,
        super::instances::terminate,
        super::instances::suspend,
        super::instances::resume,
        super::health::get,
        super::health::live,
        super::health::ready,
        get,
    ),
    components(schemas(ErrorBody, A2aStatus, A2aStatusError)),
    modifiers(&Security),
)]
struct ApiDoc;

/// The document, built once.
pub fn document() -> &'static Document {
    static DOCUMENT: std::sync::OnceLock<Document> = std::sync::OnceLock::new();
    DOCUMENT.get_or_init(ApiDoc::openapi)
}

/// This document (open: no key needed).
#[utoipa::path(
    get,
    path = "/api/openapi.json",
    tag = "operations",
    security(()),
    responses((status = 200, description = "The OpenAPI 3.1 document", body = Object))
)]
pub async fn get() -> Response {
    Json(document()).into_response()
}

/// The four ways a key is presented, and each operation's scope from the
/// scope table.
struct Security;

const SCHEMES: [&str; 4] = ["bearer", "apiKey", "functionsKey", "code"];
const URL_TOKEN: &str = "urlToken";

impl Modify for Security {
    fn modify(&self, openapi: &mut Document) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            SCHEMES[0],
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            SCHEMES[1],
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("x-api-key"))),
        );
        components.add_security_scheme(
            SCHEMES[2],
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new("x-functions-key"))),
        );
        components.add_security_scheme(
            SCHEMES[3],
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::new("code"))),
        );
        components.add_security_scheme(
            URL_TOKEN,
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "token",
                "The token in a URL a 202 handed out: it opens that run's stream, or that \
                 instance's status, event, terminate, suspend, resume and purge URLs, alone.",
            ))),
        );
        for (path, item) in openapi.paths.paths.iter_mut() {
            // The router writes a catch-all as `{*path}`; OpenAPI as `{path}`.
            let route = if path == "/api/{path}" {
                "/api/{*path}"
            } else {
                path.as_str()
            };
            let operations = [
                (Method::GET, &mut item.get),
                (Method::POST, &mut item.post),
                (Method::DELETE, &mut item.delete),
                (Method::PUT, &mut item.put),
                (Method::PATCH, &mut item.patch),
            ];
            for (method, operation) in operations {
                let Some(operation) = operation.as_mut() else {
                    continue;
                };
                match required_scope(&method, route) {
                    None => operation.security = Some(Vec::new()),
                    Some(scope) => {
                        // A URL token stands in for a key where it opens the route.
                        let token = token_opens(&method, route).map(|_| URL_TOKEN);
                        operation.security = Some(
                            SCHEMES
                                .iter()
                                .copied()
                                .chain(token)
                                .map(|scheme| {
                                    utoipa::openapi::security::SecurityRequirement::new(
                                        scheme,
                                        Vec::<String>::new(),
                                    )
                                })
                                .collect(),
                        );
                        let name = match scope {
                            Scope::Invoke => "invoke",
                            Scope::Admin => "admin",
                        };
                        let mut scope =
                            format!("Scope: `{name}` (when the host has endpoint keys).");
                        if token.is_some() {
                            scope.push_str(
                                " Or, without a key, the `token` of the URL a 202 handed out for it.",
                            );
                        }
                        operation.description = Some(match operation.description.take() {
                            Some(text) if !text.trim().is_empty() => format!("{text}\n\n{scope}"),
                            _ => scope,
                        });
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_says_who_may_call_it() {
        let document = serde_json::to_value(document()).unwrap_or_default();
        assert_eq!(document["openapi"], "3.1.0");
        let paths = document["paths"].as_object().cloned().unwrap_or_default();
        assert!(paths.len() >= 20, "{}", paths.len());
        for (path, item) in &paths {
            for (method, operation) in item.as_object().into_iter().flatten() {
                let security = operation["security"].as_array();
                let open = path.starts_with("/api/health")
                    || path == "/api/openapi.json"
                    || path == "/agenthost-wake"
                    || path.ends_with("/.well-known/agent-card.json");
                assert_eq!(
                    security.map(Vec::is_empty),
                    Some(open),
                    "{method} {path}: {operation}"
                );
            }
        }
        assert!(document["components"]["securitySchemes"]["functionsKey"].is_object());
        // The URL token is offered where it opens the route, and only there.
        let offers_token = |path: &str, method: &str| {
            paths[path][method]["security"]
                .as_array()
                .is_some_and(|s| s.iter().any(|r| r.get("urlToken").is_some()))
        };
        let instance = "/runtime/webhooks/durabletask/instances/{id}";
        assert!(offers_token(instance, "get"));
        assert!(offers_token(&format!("{instance}/terminate"), "post"));
        assert!(offers_token(
            "/api/agents/{name}/runs/{correlation_id}/stream",
            "get"
        ));
        assert!(!offers_token(
            "/runtime/webhooks/durabletask/instances",
            "get"
        ));
        assert!(!offers_token(
            "/api/agents/{name}/runs/{correlation_id}",
            "get"
        ));
    }

    /// The (method, path) pairs the router in `mod.rs` registers, read from
    /// its source: axum cannot list a router's routes, and the source is the
    /// one place they are written. Each `.route("PATH", get(h).delete(h2))`
    /// gives its path and the method functions chained in its second
    /// argument; a catch-all `{*x}` is written `{x}` as OpenAPI writes it.
    fn routed() -> Vec<(String, String)> {
        const METHODS: [&str; 7] = ["get", "post", "delete", "put", "patch", "head", "options"];
        let source = include_str!("mod.rs");
        let mut routes = Vec::new();
        for call in source.split(".route(").skip(1) {
            // The call's arguments: up to the parenthesis that closes it.
            let mut depth = 1;
            let end = call
                .char_indices()
                .find(|(_, c)| {
                    match c {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(call.len(), |(at, _)| at);
            let arguments = &call[..end];
            let Some((path, handlers)) = arguments
                .trim_start()
                .strip_prefix('"')
                .and_then(|rest| rest.split_once('"'))
            else {
                panic!("a route whose path is not a literal: .route({arguments})");
            };
            let path = path.replace("{*", "{");
            // `get(` as a word, not `x::get(` nor `forget(`.
            let bytes = handlers.as_bytes();
            for (at, _) in handlers.match_indices('(') {
                let word_start = handlers[..at]
                    .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .map_or(0, |i| i + 1);
                let word = &handlers[word_start..at];
                let qualified = word_start > 0 && bytes[word_start - 1] == b':';
                if METHODS.contains(&word) && !qualified {
                    routes.push((word.to_string(), path.clone()));
                }
            }
        }
        routes
    }

    #[test]
    fn every_route_the_router_serves_is_in_the_document_and_no_other() {
        // MCP, a protocol of its own (its one path, `rmcp`'s service), and
        // the dashboard (a page for browsers, and these same routes mounted
        // again under it) are outside the document; so is the `/runtime/`
        // routes' alias under `/api` (`front_routes`), the same routes
        // mounted again, which the document's description names. The
        // `/runtime/` routes themselves are read below, where they are
        // written.
        let source = include_str!("mod.rs")
            .replace(".nest_service(mcp::PATH,", "")
            .replace(".merge(dashboard::routes())", "")
            .replace(".nest_service(dashboard::API,", "")
            .replace(".merge(dashboard_runtime)", "")
            .replace(".merge(runtime.clone())", "")
            .replace(".nest(front_routes::MOUNT, runtime)", "");
        // Routes added any other way would escape the reading above.
        for other in [".nest(", ".merge(", ".route_service(", ".nest_service("] {
            assert!(
                !source.contains(other),
                "mod.rs uses {other}: read it here too"
            );
        }
        let mut routed = routed();
        assert!(routed.len() >= 20, "{routed:?}");
        // The reading itself: the router's first route, and a chain of two.
        assert!(routed.contains(&("post".into(), "/api/agents/{name}/run".into())));
        assert!(routed.contains(&(
            "delete".into(),
            "/api/agents/{name}/sessions/{session_id}".into()
        )));
        assert!(routed.contains(&("post".into(), "/api/{path}".into())));
        routed.sort();
        let document = serde_json::to_value(document()).unwrap_or_default();
        let mut documented: Vec<(String, String)> = document["paths"]
            .as_object()
            .into_iter()
            .flatten()
            .flat_map(|(path, item)| {
                item.as_object()
                    .into_iter()
                    .flatten()
                    .map(move |(method, _)| (method.clone(), path.clone()))
            })
            .collect();
        documented.sort();
        let missing: Vec<_> = routed.iter().filter(|r| !documented.contains(r)).collect();
        assert!(missing.is_empty(), "routed but not documented: {missing:?}");
        let unrouted: Vec<_> = documented.iter().filter(|d| !routed.contains(d)).collect();
        assert!(
            unrouted.is_empty(),
            "documented but not routed: {unrouted:?}"
        );
        assert_eq!(routed, documented, "each route is registered once");
    }
}
