//! Executes stored runs: one run at a time per session, in arrival order, and
//! resumes whatever a previous process left unfinished. Each run's text goes
//! to its response stream as the model writes it.
//!
//! The store is the queue. Submitting a run stores it and wakes the session's
//! worker; the worker executes the session's oldest unfinished run until none
//! is left. Because the order comes from the store, a restart resumes in the
//! same order, and no in-memory queue can drift from what was accepted.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::agents::{AgentRunner, AgentsSettings};
use crate::core::fence::SessionFence;
use crate::registry::Registry;
use crate::store::{Decided, Deletion, Store, StoreError};
use crate::streams::ResponseStreams;
use crate::wasm::AgentOptions;

mod answers;
mod control;
mod driven;
mod ends;
mod execute;
mod history;
mod other_hosts;
mod waiting;

/// The records callers of this service read and write.
pub use crate::store::{
    sorted_id, Decision, NewRun, PendingCall, RunFilter, RunRecord, RunStatus, SessionKey, CANCELED,
};
pub use answers::{Answer, RunState, RunsError};
pub use control::CancelOutcome;
pub use waiting::Listening;

use crate::workers::{drain, KeyedWorkers};
use driven::Driven;
use history::Histories;

pub struct Runs {
    store: Store,
    registry: Arc<Registry>,
    runner: AgentRunner,
    streams: Arc<ResponseStreams>,
    session_ttl: Option<Duration>,
    /// The operator's per-agent settings (session expiry).
    settings: Arc<AgentsSettings>,
    /// Whether this process executes runs (not an HTTP-only front).
    works: bool,
    /// Histories of hot sessions (where this process executes runs).
    histories: Option<Histories>,
    /// The stream attempt of each run this process has begun and not ended:
    /// when it first executed it (ms). A run that goes on after a human's
    /// decision keeps its attempt; one executed again after a crash or on
    /// another host begins a newer one.
    attempts: std::sync::Mutex<std::collections::HashMap<String, i64>>,
    /// Runs whose caller waits here for the whole answer and was not given
    /// their id yet: nobody else can follow their streams.
    asked: std::sync::Mutex<std::collections::HashSet<String>>,
    /// What stops each run executing here at a caller's request.
    stops: std::sync::Mutex<control::Stops>,
    workers: KeyedWorkers<SessionKey>,
    finished: Arc<ends::Ends>,
    /// On a shared hub, the runs somebody here waits for (how many wait for
    /// each): the backstop reads them all at once.
    waited: std::sync::Mutex<std::collections::HashMap<String, usize>>,
    stopping: CancellationToken,
    tracker: TaskTracker,
}

/// A run ended: its record when this process ended it (else it is read).
#[derive(Clone)]
struct Finished {
    correlation_id: String,
    record: Option<Arc<RunRecord>>,
}

/// How often tool calls past their approval deadline are denied.
const APPROVAL_SWEEP: Duration = Duration::from_secs(1);

/// Bytes of hot sessions' histories kept between their runs.
const HISTORY_BUDGET: usize = 64 << 20;

/// How often, at the longest, unfinished runs are looked for, which is how
/// soon a killed host's sessions are taken over once its lease expired.
const PASS: Duration = Duration::from_secs(1);

impl Runs {
    pub fn new(
        store: Store,
        registry: Arc<Registry>,
        runner: AgentRunner,
        streams: Arc<ResponseStreams>,
        session_ttl: Option<Duration>,
        settings: Arc<AgentsSettings>,
        works: bool,
    ) -> Arc<Self> {
        let finished = Arc::new(ends::Ends::default());
        let histories = works.then(|| Histories::new(HISTORY_BUDGET, session_ttl));
        Arc::new(Self {
            store,
            registry,
            runner,
            streams,
            session_ttl,
            settings,
            works,
            histories,
            attempts: std::sync::Mutex::default(),
            asked: std::sync::Mutex::default(),
            stops: std::sync::Mutex::default(),
            workers: KeyedWorkers::default(),
            finished,
            waited: std::sync::Mutex::default(),
            stopping: CancellationToken::new(),
            tracker: TaskTracker::new(),
        })
    }

    /// Stores the run, then schedules it (here, or on the host that owns
    /// its session). Once this returns, the run survives a crash.
    /// An agent nobody serves gets the default settings: its run fails
    /// when executed, with the reason (an orchestration's call of it).
    pub async fn submit(self: &Arc<Self>, run: NewRun) -> Result<RunRecord, StoreError> {
        let described = self
            .registry
            .agent(&run.session.agent)
            .map(|a| a.spec.options)
            .unwrap_or_default();
        self.enqueue(run, described).await
    }

    /// Schedules the run of a session minted for it, whose caller waits
    /// here for the whole answer and is told nothing before: its start is
    /// held back and committed with its first write
    /// ([`crate::store::Store::hold_run`]), one commit where there were two.
    /// Enqueued as any other where this process executes nothing (a front)
    /// or is stopping.
    ///
    /// The session's worker is handed back for the caller to drive while it
    /// waits ([`Driven`]).
    async fn hold(
        self: &Arc<Self>,
        run: NewRun,
        described: AgentOptions,
    ) -> Result<(RunRecord, Option<Driven>), StoreError> {
        let here = self.works && !self.stopping.is_cancelled();
        let Some((record, fence)) = here.then(|| self.store.hold_run(&run)).flatten() else {
            return Ok((self.enqueue(run, described).await?, None));
        };
        let first = Handed {
            run: record.clone(),
            fence,
            new_session: true,
        };
        let worker = self.claim(&run.session).then(|| {
            let this = self.clone();
            let work = async move { this.work(run.session, Some(first), None).await };
            Driven::new(&self.tracker, work)
        });
        Ok((record, worker))
    }

    /// Stores the run of an agent described by `described`, then schedules it.
    async fn enqueue(
        self: &Arc<Self>,
        run: NewRun,
        described: AgentOptions,
    ) -> Result<RunRecord, StoreError> {
        let ttl = self
            .settings
            .of(&run.session.agent)
            .over(&described)
            .session_ttl
            .unwrap_or(self.session_ttl);
        let enqueued = self.store.enqueue_run(&run, ttl).await?;
        if enqueued.run_here {
            // The next in line is handed to the session's worker, which
            // then reads nothing to find it.
            let first = enqueued.next_in_line.then(|| Handed {
                run: enqueued.record.clone(),
                fence: enqueued.fence.clone(),
                new_session: enqueued.new_session,
            });
            self.wake_with(run.session, first, None);
        }
        Ok(enqueued.record)
    }

    /// Records a human's decision on a tool call and wakes the run.
    pub async fn decide(
        self: &Arc<Self>,
        correlation_id: &str,
        call_id: &str,
        decision: Decision,
    ) -> Result<Decided, StoreError> {
        let decided = self
            .store
            .decide(correlation_id, call_id, &decision)
            .await?;
        if let Decided::Recorded(session) = &decided {
            tracing::info!(
                correlation_id,
                call_id,
                approved = decision.approved,
                "tool call decided"
            );
            self.resume(session.clone()).await;
        }
        Ok(decided)
    }

    /// Wakes a session whose run can go on: here, and the host that owns
    /// it on a shared hub.
    async fn resume(self: &Arc<Self>, session: SessionKey) {
        if let Err(e) = self.store.announce_sessions().await {
            tracing::warn!(error = %e, "could not tell the other hosts; they look again within a second");
        }
        self.wake(session);
    }

    /// Denies, once a second, the tool calls whose approval deadline passed.
    async fn expire_approvals(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(APPROVAL_SWEEP);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = self.stopping.cancelled() => return,
            }
            let store = &self.store;
            match store
                .within(
                    "expired approvals",
                    store.expire_approvals(crate::store::now_ms()),
                )
                .await
            {
                Ok(sessions) => {
                    for session in sessions {
                        tracing::info!(agent = %session.agent, session = %session.session_id, "tool calls denied: no decision before the deadline");
                        self.resume(session).await;
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not expire tool approvals"),
            }
        }
    }

    /// Forgets a session (its history and the record of it), unless a run
    /// of it has not ended.
    pub async fn delete_session(&self, session: &SessionKey) -> Result<Deletion, StoreError> {
        let deleted = self.store.delete_session(session).await?;
        if let Some(histories) = &self.histories {
            histories.forget(session);
        }
        Ok(deleted)
    }

    /// Resumes whatever a previous process left unfinished and, on a hub
    /// shared with other hosts, keeps taking the sessions they hand over
    /// (new runs, a dead host's sessions) and hears of runs they finish.
    pub fn start(self: &Arc<Self>) {
        let this = self.clone();
        self.tracker.spawn(async move { this.follow().await });
        if self.store.is_shared() {
            let this = self.clone();
            self.tracker.spawn(async move { this.backstop().await });
        }
        if self.works {
            let this = self.clone();
            self.tracker
                .spawn(async move { this.expire_approvals().await });
        }
    }

    fn wake(self: &Arc<Self>, session: SessionKey) {
        self.wake_with(session, None, None);
    }

    /// Starts the session's worker unless one runs (it is told to look
    /// again); `first`, the session's next run if the caller knows it, and
    /// `known`, this host's fence of the session if the caller read it, are
    /// used only by a worker started here.
    fn wake_with(
        self: &Arc<Self>,
        session: SessionKey,
        first: Option<Handed>,
        known: Option<SessionFence>,
    ) {
        if !self.claim(&session) {
            return;
        }
        let this = self.clone();
        self.tracker
            .spawn(async move { this.work(session, first, known).await });
    }

    /// Whether a worker of the session is to start here: none runs (one
    /// that does is told to look again), and this process executes runs.
    fn claim(&self, session: &SessionKey) -> bool {
        self.works && !self.stopping.is_cancelled() && self.workers.claim(session)
    }

    async fn work(
        self: Arc<Self>,
        session: SessionKey,
        mut first: Option<Handed>,
        mut known: Option<SessionFence>,
    ) {
        // `known`: what this host holds of the session, as the claim or the
        // enqueue read it, kept from run to run while its lease stays
        // unbroken (then it need not be read again).
        loop {
            if self.stopping.is_cancelled() {
                self.workers.release(&session);
                return;
            }
            let handed = first.take();
            let was_handed = handed.is_some();
            let mut empty_history = false;
            if let Some(Handed {
                fence, new_session, ..
            }) = &handed
            {
                known = fence.clone();
                empty_history = *new_session;
            }
            let next = match handed {
                Some(Handed { run, .. }) => Ok(Some(run)),
                None => {
                    let store = &self.store;
                    store
                        .within("the next run", store.next_unfinished_run(&session))
                        .await
                }
            };
            match next {
                Ok(Some(run)) => {
                    let (ended, used) = self.execute(run, known.take(), empty_history).await;
                    known = used;
                    // A run handed over was the session's only one, and a
                    // run waiting for a human holds the session up: unless
                    // something arrived meanwhile (it woke this worker: a
                    // decision, a new run), there is nothing to look for.
                    if (was_handed || !ended) && !self.workers.look_again(&session) {
                        return;
                    }
                }
                Ok(None) if self.workers.look_again(&session) => {}
                Ok(None) => return,
                Err(e) => {
                    tracing::error!(agent = %session.agent, session = %session.session_id, error = %e, "could not read the next run; will retry at next start");
                    self.workers.release(&session);
                    return;
                }
            }
        }
    }

    /// Stops taking new runs and waits up to `grace` for the ones executing.
    /// Whatever is left stays in the store and resumes at the next start.
    pub async fn shutdown(&self, grace: Duration) {
        if !drain(&self.stopping, &self.tracker, grace).await {
            tracing::warn!(grace = ?grace, "runs still executing after the grace period; they resume at next start");
        }
    }
}

/// A run handed to its session's worker by the enqueue that stored it, with
/// what the enqueue found this host holds of the session.
struct Handed {
    run: RunRecord,
    fence: Option<SessionFence>,
    /// The session began with this run (or had expired): it has no history
    /// to read.
    new_session: bool,
}
