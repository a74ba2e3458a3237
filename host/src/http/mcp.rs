//! MCP (Streamable HTTP, on `rmcp`) at `/runtime/webhooks/mcp`, with
//! `--mcp`: each served agent is a tool `{query, threadId?}` whose answer is
//! text content, the thread in `structuredContent` (a thread is the agent's
//! session: the same id continues one conversation, whichever protocol
//! asked); each orchestration is a tool `start_{name}` that starts an
//! instance and gives its id and status URL. What MCP's handshake, sessions
//! and framing need is `rmcp`'s; this module only answers the two calls.

use std::sync::Arc;

use crate::runs::sorted_id;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{json, Value};

use super::caller::Caller;
use super::AppState;
use crate::runs::{Answer, NewRun, RunsError, SessionKey};

/// Where MCP is served.
pub const PATH: &str = "/runtime/webhooks/mcp";

/// The prefix of an orchestration's tool.
const START: &str = "start_";

/// The MCP routes: [`service`], with a session's end (`DELETE`) answered
/// 204. `rmcp` answers it 202, which the MCP clients take for a failure
/// ("Session termination failed: 202"): they want 200 or 204.
pub fn routes(state: AppState) -> axum::Router {
    axum::Router::new()
        .fallback_service(service(state))
        .layer(axum::middleware::from_fn(ended_is_no_content))
}

async fn ended_is_no_content(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let ending = request.method() == axum::http::Method::DELETE;
    let response = next.run(request).await;
    match ending {
        true => super::error::mcp_session_ended(response),
        false => response,
    }
}

/// The MCP service of this host's agents and orchestrations. Which `Host`
/// and `Origin` are answered is checked in front of every route, this one
/// included (`origin_guard`, with `--allowed-hosts`), not by `rmcp` again.
fn service(state: AppState) -> StreamableHttpService<Tools, LocalSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(state.config.max_body_bytes)
        .disable_allowed_hosts();
    StreamableHttpService::new(
        move || {
            Ok(Tools {
                state: state.clone(),
            })
        },
        Arc::new(LocalSessionManager::default()),
        config,
    )
}

/// The tools of one MCP session: the host's agents and orchestrations as
/// they are served when each call arrives.
#[derive(Clone)]
pub struct Tools {
    state: AppState,
}

fn schema(value: Value) -> Arc<JsonObject> {
    Arc::new(match value {
        Value::Object(object) => object,
        _ => JsonObject::new(),
    })
}

impl Tools {
    fn agent_tools(&self) -> Vec<Tool> {
        let registry = &self.state.registry;
        registry
            .agent_names()
            .iter()
            .filter_map(|name| registry.agent(name))
            .map(|agent| {
                let description = match agent.spec.description.trim() {
                    "" => format!("Ask agent '{}'", agent.spec.name),
                    text => text.to_string(),
                };
                Tool::new(
                    agent.spec.name.clone(),
                    description,
                    schema(json!({
                        "type": "object",
                        "properties": {
                            "query": {"type": "string", "description": "The message for the agent"},
                            "threadId": {"type": "string", "description": "A thread to continue (its id from an earlier answer)"}
                        },
                        "required": ["query"]
                    })),
                )
            })
            .collect()
    }

    fn orchestration_tools(&self) -> Vec<Tool> {
        self.state
            .registry
            .orchestration_names()
            .into_iter()
            .map(|name| {
                Tool::new(
                    format!("{START}{name}"),
                    format!("Start orchestration '{name}'; answers its instance id and status URL"),
                    schema(json!({
                        "type": "object",
                        "properties": {
                            "input": {"description": "The orchestration's input (any JSON)"},
                            "instanceId": {"type": "string", "description": "An id of your choosing"}
                        }
                    })),
                )
            })
            .collect()
    }

    async fn ask(
        &self,
        agent: &str,
        arguments: &JsonObject,
        caller: &Caller,
    ) -> Result<CallToolResult, McpError> {
        let served = self
            .state
            .runs
            .served(agent)
            .map_err(|e| McpError::invalid_params(e.to_string(), None))?;
        let Some(query) = arguments
            .get("query")
            .and_then(Value::as_str)
            .filter(|q| !q.trim().is_empty())
        else {
            return Err(McpError::invalid_params(
                "'query' (a non-empty string) is required",
                None,
            ));
        };
        let thread = match arguments.get("threadId") {
            None | Some(Value::Null) => sorted_id().simple().to_string(),
            Some(Value::String(t))
                if !t.trim().is_empty() && t.len() <= 256 && !t.contains('\0') =>
            {
                t.clone()
            }
            Some(_) => {
                return Err(McpError::invalid_params(
                    "'threadId' must be a string of 1 to 256 characters",
                    None,
                ))
            }
        };
        let another = || {
            McpError::invalid_params(
                format!(
                    "thread '{thread}' was started by another caller: use a threadId of your own"
                ),
                None,
            )
        };
        if !caller.may_start_runs() {
            return Err(another());
        }
        let run = NewRun {
            correlation_id: sorted_id().to_string(),
            session: SessionKey {
                agent: agent.to_string(),
                session_id: thread.clone(),
            },
            message: query.to_string(),
            response_format: None,
            traceparent: crate::telemetry::current_traceparent(),
            caller: caller.id().map(str::to_string),
        };
        let answer = self
            .state
            .runs
            .ask(served, run, self.state.config.wait_budget, false, false)
            .await
            .map_err(|e| match e {
                // Decided by the store as it stored the run.
                RunsError::SessionOfAnother(_) => another(),
                e => McpError::internal_error(e.to_string(), None),
            })?;
        let runs = format!("/api/agents/{agent}/runs");
        let result = match answer {
            Answer::Completed { record, .. } => {
                let mut result = CallToolResult::success(vec![ContentBlock::text(
                    record.response.clone().unwrap_or_default(),
                )]);
                result.structured_content = Some(json!({
                    "threadId": thread,
                    "correlationId": record.correlation_id,
                }));
                result
            }
            Answer::Failed(record) => {
                let mut result = CallToolResult::error(vec![ContentBlock::text(format!(
                    "agent '{agent}' failed: {}",
                    record.error.clone().unwrap_or_default()
                ))]);
                result.structured_content = Some(json!({
                    "threadId": thread,
                    "correlationId": record.correlation_id,
                    "code": record.error_code,
                }));
                result
            }
            Answer::AwaitingApproval(state) => {
                let id = &state.record.correlation_id;
                let mut result = CallToolResult::success(vec![ContentBlock::text(format!(
                    "agent '{agent}' waits for a human's decision on {} tool call(s): POST {runs}/{id}/approvals",
                    state.pending.len()
                ))]);
                result.structured_content = Some(json!({
                    "threadId": thread,
                    "correlationId": id,
                    "status": "awaiting_approval",
                    "pendingApprovals": state.pending,
                    "approvalsUrl": format!("{runs}/{id}/approvals"),
                }));
                result
            }
            Answer::StillRunning(record) => {
                let id = &record.correlation_id;
                let mut result = CallToolResult::success(vec![ContentBlock::text(format!(
                    "agent '{agent}' is still working: follow GET {runs}/{id}"
                ))]);
                result.structured_content = Some(json!({
                    "threadId": thread,
                    "correlationId": id,
                    "status": "running",
                    "runUrl": format!("{runs}/{id}"),
                }));
                result
            }
        };
        Ok(result)
    }

    /// Starts an instance that `caller` then owns, as the HTTP start does.
    async fn start(
        &self,
        name: &str,
        arguments: &JsonObject,
        caller: &Caller,
    ) -> Result<CallToolResult, McpError> {
        let starter = super::caller::instance_starter(caller)
            .map_err(|e| McpError::invalid_params(e.message().to_string(), None))?;
        if self.state.registry.orchestration(name).is_none() {
            return Err(McpError::invalid_params(
                format!("no tool named '{START}{name}'"),
                None,
            ));
        }
        let id = match arguments.get("instanceId") {
            None | Some(Value::Null) => None,
            Some(Value::String(id)) if !id.is_empty() && !id.contains('\0') => Some(id.clone()),
            Some(_) => {
                return Err(McpError::invalid_params(
                    "'instanceId' must be a non-empty string",
                    None,
                ))
            }
        };
        let input = arguments
            .get("input")
            .map_or_else(|| "null".to_string(), Value::to_string);
        let started = self
            .state
            .orchestrator
            .start_instance(name, id, input, starter)
            .await;
        let id = match started {
            Ok(id) => id,
            Err(e) => {
                return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                    "orchestration '{name}' did not start: {e}"
                ))]))
            }
        };
        let status = format!(
            "{}/runtime/webhooks/durabletask/instances/{id}",
            super::front_routes::url_prefix()
        );
        let mut result = CallToolResult::success(vec![ContentBlock::text(format!(
            "started instance '{id}' of '{name}': GET {status} for its status"
        ))]);
        result.structured_content = Some(json!({"id": id, "statusQueryGetUri": status}));
        Ok(result)
    }
}

impl ServerHandler for Tools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("agenthost", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Each agent is a tool {query, threadId?}: pass the threadId of an answer to continue its conversation. Each start_{orchestration} tool starts a durable orchestration.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut tools = self.agent_tools();
        tools.extend(self.orchestration_tools());
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        // Who asks, as the key check in front of this route found it.
        let caller = match self.state.config.keys.is_empty() {
            true => Caller::Anyone,
            false => context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Caller>().cloned())
                .unwrap_or(Caller::Unknown),
        };
        let arguments = request.arguments.unwrap_or_default();
        let name = request.name.as_ref();
        let result = match name.strip_prefix(START) {
            Some(orchestration) if self.state.registry.agent(name).is_none() => {
                self.start(orchestration, &arguments, &caller).await?
            }
            _ => self.ask(name, &arguments, &caller).await?,
        };
        Ok(result.into())
    }
}
