//! `GET /api/openapi.json`: the OpenAPI 3.1 document of every route, built
//! from the handlers' annotations and their body types (utoipa), with the
//! security each route asks for taken from the one scope table,
//! [`keys::required_scope`](super::keys::required_scope).

use axum::http::Method;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Serialize;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi as Document;
use utoipa::{Modify, OpenApi, ToSchema};

use super::keys::{required_scope, Scope};

/// The error body of every 4xx and 5xx answer.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// What was wrong, in words.
    error: String,
    /// A stable code (`invalid_json`, `agent_not_found`, …).
    error_code: String,
    /// The same code, under the name older callers read.
    code: String,
}

/// The error answers any operation may give: 4xx for a request refused,
/// 5xx for a host or component failure, each with an [`ErrorBody`].
pub struct Failures;

impl utoipa::IntoResponses for Failures {
    fn responses() -> std::collections::BTreeMap<
        String,
        utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
    > {
        use utoipa::openapi::content::ContentBuilder;
        use utoipa::openapi::response::ResponseBuilder;
        use utoipa::openapi::Ref;
        let answer = |description: &str| {
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("ErrorBody")))
                        .build(),
                )
                .build()
                .into()
        };
        std::collections::BTreeMap::from([
            (
                "4XX".to_string(),
                answer("The request was refused; the body says why"),
            ),
            (
                "5XX".to_string(),
                answer("The host or a component failed; the body says why"),
            ),
        ])
    }
}

/// Tokens a run used (from the model's own count).
#[derive(Serialize, ToSchema)]
pub struct UsageSchema {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

/// A tool call waiting for a human's decision.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingCallSchema {
    call_id: String,
    tool: String,
    /// The arguments as the model wrote them (JSON text).
    arguments: String,
}

/// Describes `store::RunStatus` on the wire (the store does not depend on
/// the document's crate); never built.
#[allow(dead_code)]
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatusSchema {
    Pending,
    Running,
    AwaitingApproval,
    Completed,
    Failed,
}

/// Describes `core::chat::Role` on the wire; never built.
#[allow(dead_code)]
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum RoleSchema {
    System,
    User,
    Assistant,
    Tool,
}

/// One server-sent event of a run's stream: `chunk` (a piece of the
/// answer), `complete`, `error`, or `restart` (the run started over: drop
/// what came before).
#[allow(dead_code)]
#[derive(ToSchema)]
pub struct StreamEvent {
    event: String,
    /// JSON text: `{"text": …}` for a chunk.
    data: String,
    /// The cursor to resume after (`Last-Event-ID`, `?cursor=`).
    id: Option<String>,
}

/// A run answered 202: accepted to finish later, or waiting for decisions.
#[allow(dead_code)]
#[derive(ToSchema)]
#[serde(untagged)]
pub enum RunLater<'a> {
    Accepted(super::run_body::RunAccepted<'a>),
    Awaiting(super::run_body::RunAwaiting<'a>),
}

/// A declared route's 202: an instance started, or an event accepted.
#[allow(dead_code)]
#[derive(ToSchema)]
#[serde(untagged)]
pub enum RouteAccepted<'a> {
    Started(super::instance_body::InstanceUrls),
    Event(super::instance_body::EventAccepted<'a>),
}

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
