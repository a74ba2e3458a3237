//! Schemas of the OpenAPI document for what the wire carries but no handler
//! type describes: the error body, the store's and the core's types as they
//! are serialised, the events of a stream. Never built; they only describe.
//! A leaf: the handlers and the document import it, it imports neither.

use serde::Serialize;
use utoipa::ToSchema;

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

/// An A2A error on the HTTP+JSON binding: `google.rpc.Status`, as A2A 1.0
/// (section 11) answers errors of that binding.
#[derive(Serialize, ToSchema)]
pub struct A2aStatus {
    error: A2aStatusError,
}

/// The `error` of an [`A2aStatus`].
#[derive(Serialize, ToSchema)]
pub struct A2aStatusError {
    /// The HTTP status, again.
    code: u16,
    /// The gRPC status name (`NOT_FOUND`, `INVALID_ARGUMENT`, …).
    status: String,
    /// What was wrong, in words.
    message: String,
    /// An `ErrorInfo` naming the A2A error (`TASK_NOT_FOUND`, …).
    details: Vec<serde_json::Value>,
}

/// The error answers of an A2A HTTP+JSON route: the binding's own
/// [`A2aStatus`] for what A2A defines (a task not found, a version not
/// spoken, a body not JSON), the host's [`ErrorBody`] for what the host
/// refuses before A2A is spoken (no key, an agent not served, a body too
/// large).
pub struct A2aFailures;

impl utoipa::IntoResponses for A2aFailures {
    fn responses() -> std::collections::BTreeMap<
        String,
        utoipa::openapi::RefOr<utoipa::openapi::response::Response>,
    > {
        use utoipa::openapi::content::ContentBuilder;
        use utoipa::openapi::response::ResponseBuilder;
        use utoipa::openapi::schema::OneOfBuilder;
        use utoipa::openapi::Ref;
        let answer = |description: &str| {
            let either = OneOfBuilder::new()
                .item(Ref::from_schema_name("ErrorBody"))
                .item(Ref::from_schema_name("A2aStatus"));
            ResponseBuilder::new()
                .description(description)
                .content(
                    "application/json",
                    ContentBuilder::new().schema(Some(either)).build(),
                )
                .build()
                .into()
        };
        std::collections::BTreeMap::from([
            (
                "4XX".to_string(),
                answer("The request was refused: A2A's google.rpc.Status, or the host's error body"),
            ),
            (
                "5XX".to_string(),
                answer("The host or a component failed: A2A's google.rpc.Status, or the host's error body"),
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
    /// The arguments the model wrote: a JSON object, or text when the model
    /// wrote something that is not JSON.
    arguments: serde_json::Value,
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
    Canceled,
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
