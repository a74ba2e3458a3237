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

use super::keys::{required_scope, Scope};
use super::schemas::ErrorBody;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "agenthost",
        description = "Agents and durable orchestrations hosted as WebAssembly components. \
                       With endpoint keys configured, each route needs a key of the scope its \
                       description names (`invoke` or `admin`); health and this document are open."
    ),
    paths(
        super::agents::run,
        super::runs::get,
        super::streams::get,
        super::approvals::decide,
        super::sessions::get,
        super::sessions::get_by_hosting_route,
        super::sessions::delete,
        super::components::list,
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
    components(schemas(ErrorBody)),
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
                        operation.security = Some(
                            SCHEMES
                                .iter()
                                .map(|scheme| {
                                    utoipa::openapi::security::SecurityRequirement::new(
                                        *scheme,
                                        Vec::<String>::new(),
                                    )
                                })
                                .collect(),
                        );
                        let name = match scope {
                            Scope::Invoke => "invoke",
                            Scope::Admin => "admin",
                        };
                        let scope = format!("Scope: `{name}` (when the host has endpoint keys).");
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
                let open = path.starts_with("/api/health") || path == "/api/openapi.json";
                assert_eq!(
                    security.map(Vec::is_empty),
                    Some(open),
                    "{method} {path}: {operation}"
                );
            }
        }
        assert!(document["components"]["securitySchemes"]["functionsKey"].is_object());
    }
}
