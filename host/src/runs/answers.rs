//! What the runs service answers its callers (the HTTP edge, the client):
//! typed outcomes and typed refusals, so a caller never reads the store to
//! complete an answer and never decides what a missing row means.

use std::sync::Arc;
use std::time::Duration;

use super::driven::Driven;
use super::ends::EndWatch;
use super::Runs;
use crate::core::chat::Usage;
use crate::store::{
    Decided, Decision, Deletion, NewRun, PendingCall, RunRecord, RunStatus, SessionKey, StoreError,
    StoredMessage,
};
use crate::wasm::AgentOptions;

/// Why the runs service refused or could not answer.
#[derive(Debug, thiserror::Error)]
pub enum RunsError {
    #[error("agent '{name}' is not registered; registered agents: {}", registered.join(", "))]
    UnknownAgent {
        name: String,
        registered: Vec<String>,
    },
    #[error("agent '{agent}' has no run with correlation id '{correlation_id}'")]
    RunNotFound {
        agent: String,
        correlation_id: String,
    },
    #[error("agent '{}' has no session '{}' (never used, expired, or deleted)", .0.agent, .0.session_id)]
    SessionNotFound(SessionKey),
    #[error("session '{}' of agent '{}' has a run under way: delete it once the run ended", .0.session_id, .0.agent)]
    SessionBusy(SessionKey),
    /// The store refused the run: the session is another caller's (its
    /// first message claimed it). Nothing of the run was stored.
    #[error("session '{}' of agent '{}' was started by another caller: use a session id of your own", .0.session_id, .0.agent)]
    SessionOfAnother(SessionKey),
    #[error("run '{correlation_id}' of agent '{agent}' waits for no decision on call '{call_id}'")]
    NoSuchApproval {
        agent: String,
        correlation_id: String,
        call_id: String,
    },
    #[error("run '{correlation_id}' has already ended ({}): there is nothing to cancel", .status.as_str())]
    NotCancelable {
        correlation_id: String,
        status: RunStatus,
    },
    #[error("call '{call_id}' was already {}", if *approved { "approved" } else { "denied" })]
    AlreadyDecided { call_id: String, approved: bool },
    #[error(transparent)]
    Store(StoreError),
}

/// A store error as the runs service tells it: the store's refusal of a
/// run on another caller's session is the caller's to hear, typed.
impl From<StoreError> for RunsError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::SessionOfAnother { agent, session } => Self::SessionOfAnother(SessionKey {
                agent,
                session_id: session,
            }),
            other => Self::Store(other),
        }
    }
}

/// An agent served when its request arrived: what its runs are stored with.
#[derive(Debug, Clone)]
pub struct Served {
    name: String,
    options: AgentOptions,
}

/// A run as its caller sees it: the record and the tool calls it waits on.
#[derive(Debug, Clone)]
pub struct RunState {
    pub record: RunRecord,
    /// Empty unless the run awaits approvals.
    pub pending: Vec<PendingCall>,
}

/// How a run asked for synchronously ended within its caller's budget.
#[derive(Debug)]
pub enum Answer {
    /// The answer, and the session's message count when it was asked for.
    Completed {
        record: RunRecord,
        messages: Option<u64>,
    },
    /// A tool call waits for a human's decision.
    AwaitingApproval(RunState),
    Failed(RunRecord),
    /// Not finished within the budget: the stored run, to follow.
    StillRunning(RunRecord),
}

/// One page of a session's conversation and the session's token use.
#[derive(Debug)]
pub struct ConversationPage {
    pub messages: Vec<(i64, StoredMessage)>,
    pub usage: Usage,
}

impl Runs {
    /// The agent `name` as served now, or the refusal naming those that
    /// are: looked up once per request, before its body is read.
    pub fn served(&self, name: &str) -> Result<Served, RunsError> {
        self.registry
            .agent(name)
            .map(|a| Served {
                name: name.to_string(),
                options: a.spec.options,
            })
            .ok_or_else(|| RunsError::UnknownAgent {
                name: name.to_string(),
                registered: self.registry.agent_names(),
            })
    }

    /// Stores a run of a served agent and schedules it.
    pub async fn accept(
        self: &Arc<Self>,
        agent: Served,
        run: NewRun,
    ) -> Result<RunRecord, RunsError> {
        debug_assert_eq!(agent.name, run.session.agent);
        Ok(self.enqueue(run, agent.options).await?)
    }

    /// [`Self::accept`], then waits up to `budget` for the run's end.
    /// `count_messages`: whether a completed answer carries the session's
    /// message count (one more read). `minted`: the run's session id was
    /// minted for it, and nobody is told it before the answer (its start is
    /// then held back, see [`Self::hold`]).
    pub async fn ask(
        self: &Arc<Self>,
        agent: Served,
        run: NewRun,
        budget: Duration,
        count_messages: bool,
        minted: bool,
    ) -> Result<Answer, RunsError> {
        debug_assert_eq!(agent.name, run.session.agent);
        // Listening before it is stored, nothing can be missed: no read.
        let mut finished = self.finished.watch(&run.correlation_id);
        let asked = Asked::new(self, &run.correlation_id);
        let (record, worker) = match minted {
            true => self.hold(run, agent.options).await?,
            false => (self.enqueue(run, agent.options).await?, None),
        };
        let done = self
            .wait_driving(&mut finished, &record.correlation_id, budget, worker)
            .await?;
        drop(asked);
        Ok(match done {
            None => {
                // Its id is handed out now: the run is stored first (if
                // its start was held), and its stream may be followed from
                // anywhere.
                self.store.release_run(&record.correlation_id).await?;
                self.streams.release(&record.correlation_id);
                Answer::StillRunning(record)
            }
            Some(done) => match done.status {
                RunStatus::Completed => {
                    let messages = if count_messages {
                        Some(self.store.message_count(&done.session()).await?)
                    } else {
                        None
                    };
                    Answer::Completed {
                        record: done,
                        messages,
                    }
                }
                RunStatus::AwaitingApproval => {
                    let pending = self.store.pending_approvals(&done.correlation_id).await?;
                    Answer::AwaitingApproval(RunState {
                        record: done,
                        pending,
                    })
                }
                _ => Answer::Failed(done),
            },
        })
    }

    /// [`Self::wait_on`], polling the run's worker meanwhile if the caller
    /// was handed it: once the wait ends, what is left of the worker goes on
    /// in a task of its own.
    async fn wait_driving(
        &self,
        finished: &mut EndWatch,
        correlation_id: &str,
        budget: Duration,
        worker: Option<Driven>,
    ) -> Result<Option<RunRecord>, StoreError> {
        let Some(mut worker) = worker else {
            return self.wait_on(finished, correlation_id, budget, false).await;
        };
        let waiting = self.wait_on(finished, correlation_id, budget, false);
        tokio::pin!(waiting);
        loop {
            let working = !worker.ended();
            tokio::select! {
                done = &mut waiting => return done,
                () = &mut worker, if working => {}
            }
        }
    }

    /// The run `correlation_id` of `agent`, without its pending calls.
    pub async fn record(&self, agent: &str, correlation_id: &str) -> Result<RunRecord, RunsError> {
        match self.store.run(correlation_id).await? {
            Some(run) if run.agent == agent => Ok(run),
            _ => Err(RunsError::RunNotFound {
                agent: agent.to_string(),
                correlation_id: correlation_id.to_string(),
            }),
        }
    }

    /// The run `correlation_id` of `agent` and, while it is not finished, the
    /// tool calls it waits on.
    pub async fn state(&self, agent: &str, correlation_id: &str) -> Result<RunState, RunsError> {
        let record = self.record(agent, correlation_id).await?;
        let pending = self.pending_of(&record).await?;
        Ok(RunState { record, pending })
    }

    /// The tool calls an unfinished run waits on (none for a finished one).
    pub async fn pending_of(&self, run: &RunRecord) -> Result<Vec<PendingCall>, StoreError> {
        if run.status.is_finished() {
            Ok(Vec::new())
        } else {
            self.store.pending_approvals(&run.correlation_id).await
        }
    }

    /// Records a human's decision on a tool call of the run `correlation_id`
    /// of `agent` and wakes the run.
    pub async fn approve(
        self: &Arc<Self>,
        agent: &str,
        correlation_id: &str,
        call_id: &str,
        decision: Decision,
    ) -> Result<(), RunsError> {
        let no_such = || RunsError::NoSuchApproval {
            agent: agent.to_string(),
            correlation_id: correlation_id.to_string(),
            call_id: call_id.to_string(),
        };
        // A run asked to stop (or canceled) keeps its undecided calls, and
        // waits for no decision: it ends without running them. One that
        // ended waits for none either; a decision made before is told as such.
        match self.store.run(correlation_id).await? {
            Some(run) if run.agent != agent => return Err(no_such()),
            Some(run) if run.status.is_finished() || run.cancel_requested => {
                let decided = self.store.decisions(correlation_id).await?;
                return Err(match decided.into_iter().find(|(id, _)| id == call_id) {
                    Some((_, decision)) => RunsError::AlreadyDecided {
                        call_id: call_id.to_string(),
                        approved: decision.approved,
                    },
                    None => no_such(),
                });
            }
            Some(_) => {}
            None => return Err(no_such()),
        }
        match self.decide(correlation_id, call_id, decision).await? {
            Decided::Recorded(_) => Ok(()),
            Decided::Already { approved } => Err(RunsError::AlreadyDecided {
                call_id: call_id.to_string(),
                approved,
            }),
            Decided::Unknown => Err(no_such()),
        }
    }

    /// A page of the session's messages after `after` (at most `limit`),
    /// with the session's token use.
    pub async fn conversation(
        &self,
        session: &SessionKey,
        after: i64,
        limit: usize,
    ) -> Result<ConversationPage, RunsError> {
        let messages = self
            .store
            .messages_page(session, after, limit)
            .await?
            .ok_or_else(|| RunsError::SessionNotFound(session.clone()))?;
        let usage = self.store.session_usage(session).await?;
        Ok(ConversationPage { messages, usage })
    }

    /// Forgets a session, unless a run of it has not ended.
    pub async fn forget_session(&self, session: &SessionKey) -> Result<(), RunsError> {
        match self.delete_session(session).await? {
            Deletion::Done => Ok(()),
            Deletion::Missing => Err(RunsError::SessionNotFound(session.clone())),
            Deletion::Busy => Err(RunsError::SessionBusy(session.clone())),
        }
    }

    /// Tool calls waiting for a decision, over every run (for `/metrics`).
    pub async fn pending_approvals_count(&self) -> Result<i64, StoreError> {
        self.store.count_pending_approvals().await
    }
}

/// A run whose caller waits here for its whole answer, listed while it does
/// ([`Runs::asked`]).
struct Asked<'a> {
    runs: &'a Runs,
    correlation_id: String,
}

impl<'a> Asked<'a> {
    fn new(runs: &'a Runs, correlation_id: &str) -> Self {
        runs.asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(correlation_id.to_string());
        Self {
            runs,
            correlation_id: correlation_id.to_string(),
        }
    }
}

impl Drop for Asked<'_> {
    fn drop(&mut self) {
        self.runs
            .asked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.correlation_id);
    }
}
