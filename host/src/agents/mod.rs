//! The agent loop: instructions + session history + new message → model →
//! tool calls (run in the component) → … → answer.
//!
//! A tool round's messages are stored before its tools run and each result
//! as soon as its tool returns, so a run interrupted by a crash resumes where it
//! stopped: a tool call that already has its result is not run again. The
//! user message and a final answer are stored with the run's end, in one
//! commit (a crash before it asks the model again for that answer).

mod response_format;
mod settings;
mod tools;

pub use response_format::normalize as normalize_response_format;
pub use settings::{parse_ttl, AgentsSettings};

use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use serde_json::Value;

use crate::core::fence::SessionFence;
use crate::core::history_window;
use crate::model::{
    ChatMessage, ChatRequest, ChatResponse, Deltas, ModelClient, ModelError, Role, SendBy, Usage,
};
use crate::registry::ServedAgent;
use crate::store::{now_ms, PendingCall, RunRecord, SessionKey, Store, StoreError, StoredMessage};
use crate::wasm::{GuestError, Runtime};

/// How many times a model request cut short for being late is tried again
/// (each after the session's owner is checked again) before the run waits
/// for this host's lease.
const LATE_TRIES: usize = 3;

/// Why a run ended without an answer. `code()` is the stable machine-readable
/// name returned to HTTP callers.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Guest(#[from] GuestError),
    #[error("the model kept calling tools for {0} rounds without answering")]
    TooManyToolRounds(usize),
    #[error("the model's answer does not match the response format: {0}")]
    InvalidStructuredOutput(String),
    #[error("the model answered with neither text nor tool calls")]
    EmptyAnswer,
    /// Not a failure: the run waits for decisions on these tool calls.
    #[error("the run waits for a human's decision on {} tool call(s)", .0.len())]
    AwaitingApproval(Vec<PendingCall>),
    #[error("agent '{0}' is no longer served")]
    AgentGone(String),
    /// A caller asked the run to stop; it stopped between two steps. The
    /// messages close the tool calls it had stored and not run (the model
    /// then never sees a call without a result on the session's next run).
    #[error("the run was canceled")]
    Canceled(Vec<ChatMessage>),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl AgentError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::Model(ModelError::Unreachable { .. }) => "model_unreachable",
            Self::Model(ModelError::Unauthorized { .. }) => "model_unauthorized",
            Self::Model(ModelError::Authentication { .. }) => "authentication_failed",
            Self::Model(ModelError::RateLimited { .. }) => "model_rate_limited",
            Self::Model(_) => "model_error",
            Self::Guest(GuestError::Deadline { .. } | GuestError::WallClock { .. }) => {
                "component_deadline"
            }
            Self::Guest(GuestError::Memory { .. }) => "component_memory",
            Self::Guest(_) => "component_failed",
            Self::TooManyToolRounds(_) => "too_many_tool_rounds",
            Self::InvalidStructuredOutput(_) => "invalid_structured_output",
            Self::EmptyAnswer => "empty_answer",
            Self::AwaitingApproval(_) => "awaiting_approval",
            Self::AgentGone(_) => "agent_not_found",
            Self::Canceled(_) => crate::store::CANCELED,
            Self::Store(_) => "store_error",
        }
    }
}

/// What a successful run produced.
#[derive(Debug)]
pub struct RunOutcome {
    pub response: String,
    pub usage: Usage,
    /// The session's whole history after the run, its messages included.
    pub history: Vec<StoredMessage>,
    /// How many messages at the end of `history` are not stored yet: the
    /// caller stores them with the run's end.
    pub unsaved: usize,
}

impl RunOutcome {
    /// The messages to store with the run's end.
    pub fn unsaved(&self) -> Vec<ChatMessage> {
        let from = self.history.len().saturating_sub(self.unsaved);
        self.history[from..]
            .iter()
            .map(|m| m.message.clone())
            .collect()
    }
}

/// The history of a run under way, and how much of its end is not stored.
struct Turn<'a> {
    history: Vec<StoredMessage>,
    unsaved: usize,
    correlation_id: &'a str,
}

impl Turn<'_> {
    fn this_run(&self) -> usize {
        self.history
            .iter()
            .filter(|m| m.correlation_id == self.correlation_id)
            .count()
    }

    /// The last message, if this run has more than its user message.
    fn last_of_this_run(&self) -> Option<&ChatMessage> {
        (self.this_run() > 1)
            .then(|| self.history.last().map(|m| &m.message))
            .flatten()
    }

    fn messages(&self) -> Vec<ChatMessage> {
        self.history.iter().map(|m| m.message.clone()).collect()
    }

    fn push(&mut self, message: ChatMessage) {
        self.history.push(StoredMessage {
            correlation_id: self.correlation_id.to_string(),
            message,
        });
        self.unsaved += 1;
    }

    /// Stores what is not stored yet, in one commit.
    async fn save(
        &mut self,
        store: &Store,
        session: &SessionKey,
        fence: Option<&SessionFence>,
    ) -> Result<(), StoreError> {
        if self.unsaved == 0 {
            return Ok(());
        }
        let from = self.history.len() - self.unsaved;
        let messages: Vec<ChatMessage> = self.history[from..]
            .iter()
            .map(|m| m.message.clone())
            .collect();
        store
            .append_messages(session, self.correlation_id, &messages, fence)
            .await?;
        self.unsaved = 0;
        Ok(())
    }
}

pub struct AgentRunner {
    runtime: Arc<Runtime>,
    model: Arc<ModelClient>,
    store: Store,
    max_tool_rounds: usize,
    window: ModelWindow,
    /// How long a tool call waits for a human before it counts as denied.
    approval_timeout: Duration,
    /// The operator's per-agent settings.
    settings: Arc<AgentsSettings>,
}

/// How much of a conversation one model request carries at most: what keeps
/// a tool that returns megabytes from sending them to the model, storing
/// them, and holding them in the host's memory for every later request.
#[derive(Debug, Clone, Copy)]
pub struct ModelWindow {
    /// Tokens (estimated) of the conversation sent to the model at most
    /// (an agent's own setting may lower it): older whole turns are left
    /// out first, then the oldest tool results of the turns sent.
    pub history_budget_tokens: usize,
    /// Bytes of one tool result at most: a larger one is neither sent nor
    /// stored, the model gets a tool error saying its size instead.
    pub max_tool_result_bytes: usize,
}

impl AgentRunner {
    /// `window`: how much of the conversation a model request carries at
    /// most. `approval_timeout`: how long a tool call waits for a human's
    /// decision before it is denied.
    pub fn new(
        runtime: Arc<Runtime>,
        model: Arc<ModelClient>,
        store: Store,
        max_tool_rounds: usize,
        window: ModelWindow,
        approval_timeout: Duration,
        settings: Arc<AgentsSettings>,
    ) -> Self {
        Self {
            runtime,
            model,
            store,
            max_tool_rounds: max_tool_rounds.max(1),
            window,
            approval_timeout,
            settings,
        }
    }

    /// Runs (or resumes) one stored run to its answer, on the session's
    /// history as stored (`stored`); the text of each model turn goes to
    /// `deltas` as the model produces it. The run's user message and final
    /// answer are left for the caller to store with the run's end (one
    /// commit); a tool round stores its messages before its tools run, each
    /// write carrying `fence` (what this host held when it began the run).
    /// `stop` ends the run as canceled at its next step: before a model
    /// turn, during one (the request is dropped), or between two tool
    /// calls (a tool under way finishes first).
    pub async fn run(
        &self,
        agent: &ServedAgent,
        run: &RunRecord,
        stored: Vec<StoredMessage>,
        deltas: &Deltas<'_>,
        fence: Option<&SessionFence>,
        stop: &CancellationToken,
    ) -> Result<RunOutcome, AgentError> {
        let mut turn = Turn {
            history: stored,
            unsaved: 0,
            correlation_id: &run.correlation_id,
        };
        if turn.this_run() == 0 {
            turn.push(ChatMessage::user(run.message.clone()));
        }
        let session = run.session();
        let tools = agent.tool_specs();
        let mut usage = Usage::default();
        let settings = self.settings.of(&agent.spec.name).over(&agent.spec.options);
        let budget = settings
            .history_budget_tokens
            .unwrap_or(self.window.history_budget_tokens);
        // A structured answer is streamed once it is valid, whole: a client
        // must never see an answer the repair round replaces.
        let format = run
            .response_format
            .as_ref()
            .filter(|f| response_format::wants_json(f));
        let live: &Deltas<'_> = if format.is_some() { &|_| {} } else { deltas };
        for _ in 0..self.max_tool_rounds {
            if stop.is_cancelled() {
                return Err(canceled(&turn));
            }
            let last = turn.last_of_this_run();
            match last.map(|m| (m.role, m.tool_calls.is_empty())) {
                // Resumed after the final answer was stored but before the run was marked done.
                Some((Role::Assistant, true)) => return self.finish(turn, usage, run),
                // Tool calls outstanding (fresh, or interrupted mid-way by a crash).
                Some((Role::Assistant, false)) | Some((Role::Tool, _))
                    if tools::has_unanswered_calls(&turn.messages()) =>
                {
                    let pending = self
                        .tool_round(agent, &mut turn, &session, fence, stop)
                        .await?;
                    if !pending.is_empty() {
                        let deadline = now_ms().saturating_add(
                            i64::try_from(self.approval_timeout.as_millis()).unwrap_or(i64::MAX),
                        );
                        self.store
                            .request_approvals(
                                &session,
                                &run.correlation_id,
                                &pending,
                                deadline,
                                fence,
                            )
                            .await?;
                        tracing::info!(
                            calls = pending.len(),
                            "the run waits for a human's approval of tool calls"
                        );
                        return Err(AgentError::AwaitingApproval(pending));
                    }
                    continue;
                }
                _ => {}
            }
            let mut messages = Vec::with_capacity(turn.history.len() + 1);
            if !agent.spec.instructions.is_empty() {
                messages.push(ChatMessage::system(agent.spec.instructions.clone()));
            }
            let all = turn.messages();
            let from = history_window::start(&all, budget);
            if from > 0 {
                tracing::debug!(
                    left_out = from,
                    "older turns left out of the model's window"
                );
            }
            let mut window: Vec<ChatMessage> = all.into_iter().skip(from).collect();
            let results_left_out = history_window::leave_out_tool_results(&mut window, budget);
            if results_left_out > 0 {
                tracing::info!(
                    agent = %agent.spec.name,
                    left_out = results_left_out,
                    budget,
                    "tool results left out of the model's window: the turn is over the history budget"
                );
            }
            messages.extend(window);
            let sending = self.send_check(&session, fence);
            let request = ChatRequest {
                model: settings.model.as_deref().or(agent.spec.model.as_deref()),
                messages: &messages,
                tools: &tools,
                response_format: run.response_format.as_ref(),
                temperature: settings.temperature,
                max_output_tokens: settings.max_output_tokens,
                timeout: settings.timeout,
                send_by: sending.check.as_deref(),
            };
            let response = tokio::select! {
                response = self.ask(&agent.spec.name, &session, &sending, &request, live) => response?,
                () = stop.cancelled() => return Err(canceled(&turn)),
            };
            usage += response.usage;
            let mut answer = response.message;
            answer.role = Role::Assistant;
            if answer.tool_calls.is_empty() && answer.content.as_deref().is_none_or(str::is_empty) {
                return Err(AgentError::EmptyAnswer);
            }
            let done = answer.tool_calls.is_empty();
            if let (true, Some(format)) = (done, format) {
                let checked = self
                    .checked(
                        agent, &session, fence, &messages, answer, format, &mut usage,
                    )
                    .await?;
                deltas(checked.content.as_deref().unwrap_or_default());
                turn.push(checked);
                return self.finish(turn, usage, run);
            }
            turn.push(answer);
            if done {
                return self.finish(turn, usage, run);
            }
            // The calls are stored before they run: a crash then finds them
            // and runs only those without a result.
            turn.save(&self.store, &session, fence).await?;
        }
        Err(AgentError::TooManyToolRounds(self.max_tool_rounds))
    }

    fn finish(
        &self,
        turn: Turn<'_>,
        usage: Usage,
        run: &RunRecord,
    ) -> Result<RunOutcome, AgentError> {
        let response = turn
            .history
            .last()
            .and_then(|m| m.message.content.clone())
            .unwrap_or_default();
        // A run resumed after its answer was stored is checked again.
        if let Some(format) = run.response_format.as_ref() {
            response_format::check(format, &response)
                .map_err(|errors| AgentError::InvalidStructuredOutput(errors.join("; ")))?;
        }
        Ok(RunOutcome {
            response,
            usage,
            unsaved: turn.unsaved,
            history: turn.history,
        })
    }

    /// What checks, before each attempt of a model request of a run on a
    /// shared hub (a retry too), that this host still holds the session:
    /// the request then leaves only while it provably does, and is cut short
    /// if it cannot leave before the lease under which it does can have run
    /// out ([`crate::core::fence::send_by`]). A host paused past its lease
    /// must not ask a turn that the session's new owner asks too: the writes
    /// after it would be refused, but the turn would be spent twice.
    fn send_check(&self, session: &SessionKey, fence: Option<&SessionFence>) -> SendCheck {
        let failed: Arc<std::sync::Mutex<Option<StoreError>>> = Arc::default();
        let check = fence.map(|held| {
            let (store, session, held, failed) = (
                self.store.clone(),
                session.clone(),
                held.clone(),
                failed.clone(),
            );
            Arc::new(
                move || -> futures::future::BoxFuture<'static, Option<i64>> {
                    let (store, session, held, failed) =
                        (store.clone(), session.clone(), held.clone(), failed.clone());
                    Box::pin(async move {
                        match store.send_by(&session, &held).await {
                            Ok(moment) => moment,
                            Err(e) => {
                                *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                                None
                            }
                        }
                    })
                },
            ) as Arc<SendBy>
        });
        SendCheck { check, failed }
    }

    /// Asks the model one turn of a run (`request` carries `sending`'s
    /// check). A request cut short (the host was starved, not necessarily
    /// replaced) is asked again, [`LATE_TRIES`] tries in all; then the run
    /// waits for the lease ([`StoreError::LeaseLapsed`]).
    async fn ask(
        &self,
        agent: &str,
        session: &SessionKey,
        sending: &SendCheck,
        request: &ChatRequest<'_>,
        deltas: &Deltas<'_>,
    ) -> Result<ChatResponse, AgentError> {
        let mut late_tries = 0;
        loop {
            let started = std::time::Instant::now();
            let answer = self
                .model
                .complete(request, deltas)
                .instrument(crate::telemetry::traced(|| {
                    tracing::info_span!("model.call", agent)
                }))
                .await;
            if let Ok(response) = &answer {
                crate::metrics::model_call(
                    agent,
                    started.elapsed(),
                    response.usage.prompt_tokens,
                    response.usage.completion_tokens,
                );
            }
            match answer {
                Err(ModelError::NotSent) => return Err(sending.refusal(session).into()),
                Err(ModelError::Late { late_ms }) => {
                    late_tries += 1;
                    if late_tries >= LATE_TRIES {
                        return Err(StoreError::LeaseLapsed {
                            session: session.session_id.clone(),
                        }
                        .into());
                    }
                    tracing::warn!(
                        late_ms,
                        "the model request could not leave in time; checking the session's owner again"
                    );
                }
                answered => return Ok(answered?),
            }
        }
    }

    /// The answer if it matches the response format; else one repair round
    /// that shows the model what is wrong (the exchange is not kept in the
    /// session); still wrong, the run fails naming the first errors.
    #[allow(clippy::too_many_arguments)]
    async fn checked(
        &self,
        agent: &ServedAgent,
        session: &SessionKey,
        fence: Option<&SessionFence>,
        asked: &[ChatMessage],
        answer: ChatMessage,
        format: &Value,
        usage: &mut Usage,
    ) -> Result<ChatMessage, AgentError> {
        let settings = self.settings.of(&agent.spec.name).over(&agent.spec.options);
        let errors =
            match response_format::check(format, answer.content.as_deref().unwrap_or_default()) {
                Ok(()) => return Ok(answer),
                Err(errors) => errors,
            };
        tracing::info!(errors = ?errors, "the structured answer does not match its schema; asking once more");
        let mut messages = asked.to_vec();
        messages.push(answer);
        messages.push(ChatMessage::user(format!(
            "Your answer does not match the required JSON Schema: {}. Reply again with only the corrected JSON.",
            errors.join("; ")
        )));
        let sending = self.send_check(session, fence);
        let request = ChatRequest {
            model: settings.model.as_deref().or(agent.spec.model.as_deref()),
            messages: &messages,
            tools: &[],
            response_format: Some(format),
            temperature: settings.temperature,
            max_output_tokens: settings.max_output_tokens,
            timeout: settings.timeout,
            send_by: sending.check.as_deref(),
        };
        let response = self
            .ask(&agent.spec.name, session, &sending, &request, &|_| {})
            .await?;
        *usage += response.usage;
        let mut repaired = response.message;
        repaired.role = Role::Assistant;
        match response_format::check(format, repaired.content.as_deref().unwrap_or_default()) {
            Ok(()) => Ok(repaired),
            Err(errors) => Err(AgentError::InvalidStructuredOutput(format!(
                "{} (after one repair round)",
                errors.join("; ")
            ))),
        }
    }
}

/// A run stopped at a caller's request, with results for the tool calls it
/// stored and did not run. What is not stored yet (the user message of a
/// run stopped before its first tool round) is dropped, as for a failure.
fn canceled(turn: &Turn<'_>) -> AgentError {
    let stored = &turn.history[..turn.history.len() - turn.unsaved];
    // This run's own calls only: an earlier run's are not this run's to close.
    let from = stored
        .iter()
        .position(|m| m.correlation_id == turn.correlation_id)
        .unwrap_or(stored.len());
    let closing = tools::unanswered_calls(&stored[from..])
        .into_iter()
        .map(|call| {
            ChatMessage::tool_result(
                call.id.clone(),
                tools::tool_error(&format!(
                    "not run: the run was canceled before this call of '{}'",
                    call.function.name
                )),
            )
        })
        .collect();
    AgentError::Canceled(closing)
}

/// See [`AgentRunner::send_check`]: the check a run's model requests carry,
/// and why it last refused when the store failed (else it was the fence).
struct SendCheck {
    /// Shared with the tools a run calls ([`crate::wasm::SendGate`]).
    check: Option<Arc<SendBy>>,
    failed: Arc<std::sync::Mutex<Option<StoreError>>>,
}

impl SendCheck {
    /// Why the check refused a request of `session`: the store's error
    /// when it could not be asked, else the fence.
    fn refusal(&self, session: &SessionKey) -> StoreError {
        let failed = self.failed.lock().unwrap_or_else(|p| p.into_inner()).take();
        failed.unwrap_or_else(|| StoreError::Fenced {
            session: session.session_id.clone(),
        })
    }
}
