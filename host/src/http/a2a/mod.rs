//! A2A 1.0 (the JSON-RPC binding): each served agent is an A2A agent at
//! `/a2a/{agent}`, with its card; a task is one of its runs, the task's
//! context the run's session, so A2A callers and `POST /api/agents/{name}/run`
//! share conversations. Blocking calls wait like a synchronous run; streams
//! follow the run's response stream, so a caller that resubscribes gets the
//! text so far, then only what is new.

mod card;
mod params;

pub(in crate::http) mod rest;
mod rpc;
mod stream;
mod task;
mod task_ids;

use std::time::Duration;

use crate::runs::sorted_id;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::body::read_limited;
use super::caller::{visible_run, Caller};
use super::{ApiError, AppState};
use crate::runs::{
    Answer, CancelOutcome, Decision, Listening, NewRun, RunFilter, RunRecord, RunsError, SessionKey,
};
use params::{params_of, said, shown_history, ListParams, SendParams, TaskParams};
use rpc::{answer, RpcError};
use stream::Framing;
use task_ids::{task_id_before, task_id_elsewhere, task_id_of};

use task::Shown;

/// How long a cancel waits for its task to end before it answers with the
/// task as it stands.
const CANCEL_WAIT: Duration = Duration::from_secs(2);

/// The longest session (context) id, as for `POST /api/agents/{name}/run`.
const MAX_CONTEXT_LEN: usize = 256;

/// The host's agent card.
#[utoipa::path(
    get,
    path = "/.well-known/agent-card.json",
    tag = "a2a",
    responses((status = 200, description = "The host's A2A agent card", body = Object))
)]
pub async fn host_card(State(state): State<AppState>, headers: HeaderMap) -> Response {
    Json(card::of_host(&state, &card::base_url(&headers))).into_response()
}

/// An agent's A2A card.
#[utoipa::path(
    get,
    path = "/a2a/{agent}/.well-known/agent-card.json",
    tag = "a2a",
    params(("agent" = String, Path)),
    responses(
        (status = 200, description = "The agent's A2A agent card", body = Object),
        super::schemas::Failures
    )
)]
pub async fn agent_card(
    State(state): State<AppState>,
    Path(agent): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    state.runs.served(&agent)?;
    let served = state.registry.agent(&agent).ok_or_else(|| {
        ApiError::not_found("agent_not_found", format!("agent '{agent}' is not served"))
    })?;
    Ok(Json(card::of_agent(&state, &card::base_url(&headers), &served)).into_response())
}

/// A2A JSON-RPC 2.0 calls of an agent (`A2A-Version: 1.0`): SendMessage,
/// SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask.
/// Errors are JSON-RPC error objects with HTTP 200.
/// `POST /a2a/{agent}/`: the interface URL as clients join paths to it
/// (the A2A kit does); the same endpoint as without the slash.
#[utoipa::path(
    post,
    path = "/a2a/{agent}/",
    tag = "a2a",
    params(("agent" = String, Path)),
    request_body(content = Object, description = "A JSON-RPC 2.0 request", content_type = "application/json"),
    responses(
        (status = 200, description = "A JSON-RPC 2.0 response, or a stream of them (text/event-stream)", body = Object),
        super::schemas::Failures
    )
)]
pub async fn call_at_slash(
    state: State<AppState>,
    agent: Path<String>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    call(state, agent, caller, headers, body).await
}

#[utoipa::path(
    post,
    path = "/a2a/{agent}",
    tag = "a2a",
    params(("agent" = String, Path)),
    request_body(content = Object, description = "A JSON-RPC 2.0 request", content_type = "application/json"),
    responses(
        (status = 200, description = "A JSON-RPC 2.0 response, or a stream of them (text/event-stream)", body = Object),
        super::schemas::Failures
    )
)]
pub async fn call(
    State(state): State<AppState>,
    Path(agent): Path<String>,
    caller: Caller,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    state.runs.served(&agent)?;
    if let Err(e) = json_content(&headers) {
        return Ok(Json(answer(&Value::Null, Err(e))).into_response());
    }
    let bytes = match read_limited(&headers, body, &state.config).await {
        Ok(bytes) => bytes,
        Err(e) => {
            let error = RpcError::invalid_request(format!(
                "the request could not be read: {}",
                e.message()
            ));
            return Ok(Json(answer(&Value::Null, Err(error))).into_response());
        }
    };
    let call = match rpc::call_of(&bytes) {
        Ok(call) => call,
        Err((id, error)) => return Ok(Json(answer(&id, Err(error))).into_response()),
    };
    if let Err(e) = version(&headers) {
        return Ok(Json(answer(&call.id, Err(e))).into_response());
    }
    let a2a = A2a {
        state: &state,
        agent: &agent,
        caller,
    };
    let result = match call.method.as_str() {
        "SendMessage" => a2a.send(&call.params).await,
        "SendStreamingMessage" => {
            return Ok(
                match a2a
                    .send_streaming(&call.params, Framing::JsonRpc(call.id.clone()))
                    .await
                {
                    Ok(stream) => stream,
                    Err(e) => Json(answer(&call.id, Err(e))).into_response(),
                },
            )
        }
        "SubscribeToTask" => {
            return Ok(
                match a2a
                    .subscribe(&call.params, Framing::JsonRpc(call.id.clone()))
                    .await
                {
                    Ok(stream) => stream,
                    Err(e) => Json(answer(&call.id, Err(e))).into_response(),
                },
            )
        }
        "GetTask" => a2a.get(&call.params).await,
        "ListTasks" => a2a.list(&call.params).await,
        "CancelTask" => a2a.cancel(&call.params).await,
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => Err(RpcError::push_not_supported()),
        "GetExtendedAgentCard" => Err(RpcError::extended_card()),
        other => Err(RpcError::method_not_found(other)),
    };
    Ok(Json(answer(&call.id, result)).into_response())
}

/// The protocol version a call asks for: 1.x. No header is 0.3 (the spec's
/// rule), which this server does not speak.
fn version(headers: &HeaderMap) -> Result<(), RpcError> {
    let version = headers.get("a2a-version").and_then(|v| v.to_str().ok());
    // `1` or `1.N`: the major version is what must match.
    let speaks = |v: &str| {
        let mut parts = v.trim().split('.');
        parts.next() == Some("1")
            && parts.all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
    };
    match version.is_some_and(speaks) {
        true => Ok(()),
        false => Err(RpcError::version(version)),
    }
}

/// A request's body is JSON (`application/json`, or any `+json` type); one
/// that says it is something else is `ContentTypeNotSupportedError`. (The
/// types a web page can post cross-site without a preflight, `text/plain`
/// and forms, are among them.) No `Content-Type` at all is read as JSON.
fn json_content(headers: &HeaderMap) -> Result<(), RpcError> {
    let Some(value) = headers.get(axum::http::header::CONTENT_TYPE) else {
        return Ok(());
    };
    let text = value.to_str().unwrap_or_default();
    let essence = text
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    if essence == "application/json" || essence.ends_with("+json") {
        return Ok(());
    }
    Err(RpcError::content_type(format!(
        "the request's Content-Type is '{text}': A2A requests are JSON (application/json)"
    )))
}

/// Whether a message was sent before.
enum Sent {
    /// Its task.
    Before(String),
    /// The id of the task it starts.
    New(String),
}

/// What a message asked for.
enum Submitted {
    /// A new run, on the message's context.
    New(NewRun),
    /// A task that exists: decisions on its tool calls were recorded, or
    /// the message had been sent before (same `messageId`).
    Existing(String),
}

/// The calls of one agent.
struct A2a<'a> {
    state: &'a AppState,
    agent: &'a str,
    /// Who asks: an invoke key sees the tasks it started and no other's.
    caller: Caller,
}

impl A2a<'_> {
    /// The task, if this caller may see it; else as an unknown task.
    async fn visible(&self, task: &str) -> Result<crate::runs::RunState, RpcError> {
        visible_run(self.state, &self.caller, self.agent, task)
            .await
            .map_err(|e| self.refused(task, e))
    }

    fn refused(&self, task: &str, e: RunsError) -> RpcError {
        match e {
            RunsError::RunNotFound { .. } => RpcError::task_not_found(task),
            RunsError::NotCancelable { status, .. } => {
                RpcError::not_cancelable(task, status.as_str())
            }
            RunsError::NoSuchApproval { .. } | RunsError::AlreadyDecided { .. } => {
                RpcError::invalid_params(e.to_string())
            }
            RunsError::UnknownAgent { .. } => RpcError::invalid_params(e.to_string()),
            RunsError::SessionOfAnother(context) => RpcError::invalid_params(format!(
                "context '{}' was started by another caller: use a contextId of your own",
                context.session_id
            )),
            other => {
                tracing::warn!(error = %other, "an A2A call failed");
                RpcError::internal(format!("Internal error: {other}"))
            }
        }
    }

    /// Whether the message `message_id` with `text` was sent before (by
    /// this caller, on the context named or on any when none is): its
    /// task; else the id of the task it starts.
    async fn sent_before(
        &self,
        message_id: &str,
        text: &str,
        context: Option<&str>,
    ) -> Result<Sent, RpcError> {
        let caller = self.caller.id();
        let first = task_id_of(self.agent, message_id, text, caller);
        let mut candidates = vec![first.clone(), task_id_before(self.agent, message_id)];
        if let Some(context) = context {
            candidates.push(task_id_elsewhere(
                self.agent, message_id, text, caller, context,
            ));
        }
        let mut first_taken = false;
        for id in candidates {
            match self.state.runs.record(self.agent, &id).await {
                Ok(run) if run.message == text && self.caller.sees(run.caller.as_deref()) => {
                    if context.is_none_or(|c| c == run.thread_id) {
                        return Ok(Sent::Before(id));
                    }
                    first_taken |= id == first;
                }
                Ok(_) => first_taken |= id == first,
                Err(RunsError::RunNotFound { .. }) => {}
                Err(e) => return Err(self.refused("", e)),
            }
        }
        Ok(Sent::New(match (first_taken, context) {
            (true, Some(context)) => {
                task_id_elsewhere(self.agent, message_id, text, caller, context)
            }
            _ => first,
        }))
    }

    /// A new message's run (not stored yet), or the task whose tool calls
    /// the message decided.
    async fn submit(&self, params: &SendParams) -> Result<Submitted, RpcError> {
        let said = said(&params.message.parts)?;
        if let Some(task) = &params.message.task_id {
            let run = self.visible(task).await?;
            if let Some(context) = &params.message.context_id {
                if context != &run.record.thread_id {
                    return Err(RpcError::invalid_params(format!(
                        "task '{task}' belongs to context '{}', not '{context}'",
                        run.record.thread_id
                    )));
                }
            }
            // A task goes on by its decisions only: text beside them would be
            // dropped unread, and an empty list decides nothing.
            if said.approvals.is_some() && !said.text.trim().is_empty() {
                return Err(RpcError::invalid_params(format!(
                    "a message on task '{task}' carries decisions only; send text as a new message on its context"
                )));
            }
            let Some(approvals) = said.approvals.filter(|a| !a.is_empty()) else {
                return Err(match run.record.status.is_finished() {
                    true => RpcError::unsupported(format!("task '{task}' has ended: send a new message on its context (contextId '{}') to go on", run.record.thread_id)),
                    false => RpcError::invalid_params(format!("task '{task}' goes on by itself; a message on it can only carry decisions, as a data part {{\"approvals\": [{{\"callId\", \"approved\", \"reason\"}}]}}")),
                });
            };
            for approval in approvals {
                let decision = Decision {
                    approved: approval.approved,
                    reason: approval.reason.filter(|r| !r.trim().is_empty()),
                };
                self.state
                    .runs
                    .approve(self.agent, task, &approval.call_id, decision)
                    .await
                    .map_err(|e| self.refused(task, e))?;
            }
            return Ok(Submitted::Existing(task.clone()));
        }
        if said.approvals.is_some() {
            return Err(RpcError::invalid_params(
                "approvals decide the calls of a task: send them with its taskId",
            ));
        }
        if said.text.trim().is_empty() {
            return Err(RpcError::invalid_params("the message has no text"));
        }
        if !self.caller.may_start_runs() {
            return Err(RpcError::invalid_params("this caller starts no task"));
        }
        let context_named = params.message.context_id.as_deref();
        let message_id = params
            .message
            .message_id
            .as_deref()
            .filter(|m| !m.is_empty());
        let correlation_id = match message_id {
            Some(message_id) => {
                match self
                    .sent_before(message_id, &said.text, context_named)
                    .await?
                {
                    Sent::Before(task) => return Ok(Submitted::Existing(task)),
                    Sent::New(id) => id,
                }
            }
            None => sorted_id().to_string(),
        };
        let context = match &params.message.context_id {
            // Whether this caller may go on with the context is the store's
            // to decide as it stores the run (`refused`).
            Some(c) if !c.trim().is_empty() && c.len() <= MAX_CONTEXT_LEN && !c.contains('\0') => {
                c.clone()
            }
            Some(_) => {
                return Err(RpcError::invalid_params(format!(
                    "contextId must be 1 to {MAX_CONTEXT_LEN} characters, none of them NUL"
                )))
            }
            None => sorted_id().simple().to_string(),
        };
        Ok(Submitted::New(NewRun {
            correlation_id,
            session: SessionKey {
                agent: self.agent.to_string(),
                session_id: context,
            },
            message: said.text,
            response_format: None,
            traceparent: crate::telemetry::current_traceparent(),
            caller: self.caller.id().map(str::to_string),
        }))
    }

    /// Stores a new message's run. The same message sent twice at once
    /// stores one run: the second write is refused, and finds the first's.
    async fn accept(&self, run: NewRun) -> Result<RunRecord, RpcError> {
        let served = self
            .state
            .runs
            .served(self.agent)
            .map_err(|e| self.refused("", e))?;
        let id = run.correlation_id.clone();
        match self.state.runs.accept(served, run).await {
            Ok(record) => Ok(record),
            Err(e) => match self.state.runs.record(self.agent, &id).await {
                Ok(record) => Ok(record),
                Err(_) => Err(self.refused("", e)),
            },
        }
    }

    /// The task as it stands.
    async fn current(&self, task: &str, shown: Shown) -> Result<Value, RpcError> {
        let run = self.visible(task).await?;
        Ok(task::task(&run.record, &run.pending, shown))
    }

    /// Blocks until the task ends or waits for a human (or the host's wait
    /// budget passes: the task is then `WORKING`), unless `returnImmediately`.
    async fn send(&self, params: &Value) -> Result<Value, RpcError> {
        let params: SendParams = params_of(params)?;
        let shown = Shown {
            history: shown_history(params.configuration.history_length)?,
            artifacts: true,
        };
        let budget = self.state.config.wait_budget;
        // Listening before decisions are stored: the run they wake may come
        // to wait again at once, and that must be heard.
        let listening = params
            .message
            .task_id
            .as_deref()
            .map(|task| self.state.runs.listen(task));
        let task = match self.submit(&params).await? {
            Submitted::New(run) if params.configuration.return_immediately => {
                let record = self.accept(run).await?;
                return Ok(
                    json!({"task": task::task_in(&record, &[], "TASK_STATE_SUBMITTED", shown)}),
                );
            }
            Submitted::New(run) => {
                let served = self
                    .state
                    .runs
                    .served(self.agent)
                    .map_err(|e| self.refused("", e))?;
                let id = run.correlation_id.clone();
                let answer = match self.state.runs.ask(served, run, budget, false, false).await {
                    Ok(answer) => answer,
                    // Sent twice at once: the other send stored the run.
                    Err(e) => match self.state.runs.record(self.agent, &id).await {
                        Ok(_) => {
                            // Listening before the wait reads the record.
                            let listening = self.state.runs.listen(&id);
                            return self
                                .existing(
                                    &id,
                                    params.configuration.return_immediately,
                                    shown,
                                    listening,
                                )
                                .await;
                        }
                        Err(_) => return Err(self.refused("", e)),
                    },
                };
                // The answer carries the run as it ended or waits: no read.
                let task = match &answer {
                    Answer::Completed { record, .. }
                    | Answer::Failed(record)
                    | Answer::StillRunning(record) => task::task(record, &[], shown),
                    Answer::AwaitingApproval(state) => {
                        task::task(&state.record, &state.pending, shown)
                    }
                };
                return Ok(json!({ "task": task }));
            }
            Submitted::Existing(task) => task,
        };
        let listening = listening.unwrap_or_else(|| self.state.runs.listen(&task));
        self.existing(
            &task,
            params.configuration.return_immediately,
            shown,
            listening,
        )
        .await
    }

    /// An existing task, once it ended or waits for a human (within the
    /// wait budget) unless `at_once`.
    async fn existing(
        &self,
        task: &str,
        at_once: bool,
        shown: Shown,
        listening: Listening,
    ) -> Result<Value, RpcError> {
        if !at_once {
            self.state
                .runs
                .wait_settled(listening, task, self.state.config.wait_budget)
                .await
                .map_err(|e| RpcError::internal(format!("Internal error: {e}")))?;
        }
        Ok(json!({"task": self.current(task, shown).await?}))
    }

    async fn get(&self, params: &Value) -> Result<Value, RpcError> {
        let params: TaskParams = params_of(params)?;
        let shown = Shown {
            history: shown_history(params.history_length)?,
            artifacts: true,
        };
        let run = self.visible(&params.id).await?;
        Ok(task::task(&run.record, &run.pending, shown))
    }

    async fn list(&self, params: &Value) -> Result<Value, RpcError> {
        let params: ListParams = params_of(params)?;
        let page_size = match params.page_size {
            None => 50,
            Some(n @ 1..=100) => usize::try_from(n).unwrap_or(50),
            Some(n) => {
                return Err(RpcError::invalid_params(format!(
                    "pageSize must be 1 to 100, not {n}"
                )))
            }
        };
        let status = match params.status.as_deref() {
            None | Some("") | Some("TASK_STATE_UNSPECIFIED") => None,
            Some(state) => Some(task::status_filter(state).ok_or_else(|| {
                RpcError::invalid_params(format!(
                    "unknown status '{state}'; use a TASK_STATE_* name"
                ))
            })?),
        };
        let before =
            match params.page_token.as_deref() {
                None | Some("") => None,
                Some(token) => Some(token.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(
                    || {
                        RpcError::invalid_params(
                            "pageToken must be a nextPageToken this agent returned",
                        )
                    },
                )?),
            };
        // An invoke key lists the tasks it started; a caller no key admitted
        // none.
        let Ok(caller) = self.caller.narrows_to() else {
            return Ok(json!({"tasks": [], "nextPageToken": "", "pageSize": page_size}));
        };
        let filter = RunFilter {
            session_id: params.context_id.filter(|c| !c.is_empty()),
            status,
            before,
            limit: page_size,
            caller: caller.map(str::to_string),
        };
        let shown = Shown {
            history: shown_history(params.history_length)?,
            artifacts: params.include_artifacts,
        };
        let page = self
            .state
            .runs
            .list(self.agent, filter)
            .await
            .map_err(|e| self.refused("", e))?;
        let tasks: Vec<Value> = page
            .runs
            .iter()
            .map(|run| task::task(&run.record, &run.pending, shown))
            .collect();
        Ok(json!({
            "tasks": tasks,
            "nextPageToken": page.next.map(|n| n.to_string()).unwrap_or_default(),
            "pageSize": page_size,
        }))
    }

    async fn cancel(&self, params: &Value) -> Result<Value, RpcError> {
        let params: TaskParams = params_of(params)?;
        self.visible(&params.id).await?;
        let outcome = self
            .state
            .runs
            .cancel(self.agent, &params.id, CANCEL_WAIT)
            .await
            .map_err(|e| self.refused(&params.id, e))?;
        let run = match outcome {
            CancelOutcome::Ended(run) | CancelOutcome::Requested(run) => run,
        };
        Ok(task::task(&run.record, &run.pending, Shown::ALL))
    }

    async fn send_streaming(&self, params: &Value, framing: Framing) -> Result<Response, RpcError> {
        let params: SendParams = params_of(params)?;
        // A follower's place before the run: refused, nothing is started.
        let follower = self
            .state
            .streams
            .admit()
            .map_err(|e| RpcError::internal(format!("Internal error: {e}")))?;
        let (task, first) = match self.submit(&params).await? {
            Submitted::New(run) => {
                let record = self.accept(run).await?;
                let first = task::task_in(&record, &[], "TASK_STATE_SUBMITTED", Shown::ALL);
                (record.correlation_id, first)
            }
            Submitted::Existing(task) => {
                let first = self.current(&task, Shown::ALL).await?;
                (task, first)
            }
        };
        Ok(stream::follow(
            self.state, self.agent, &task, framing, follower, first, false,
        )
        .await)
    }

    async fn subscribe(&self, params: &Value, framing: Framing) -> Result<Response, RpcError> {
        let params: TaskParams = params_of(params)?;
        let run = self.visible(&params.id).await?;
        if run.record.status.is_finished() {
            return Err(RpcError::unsupported(format!(
                "task '{}' has ended ({}): read it with GetTask",
                params.id,
                run.record.status.as_str()
            )));
        }
        let follower = self
            .state
            .streams
            .admit()
            .map_err(|e| RpcError::internal(format!("Internal error: {e}")))?;
        let first = task::task(&run.record, &run.pending, Shown::ALL);
        Ok(stream::follow(
            self.state, self.agent, &params.id, framing, follower, first, true,
        )
        .await)
    }
}
