//! Executes stored runs: one run at a time per session, in arrival order, and
//! resumes whatever a previous process left unfinished.
//!
//! The store is the queue. Submitting a run stores it and wakes the session's
//! worker; the worker executes the session's oldest unfinished run until none
//! is left. Because the order comes from the store, a restart resumes in the
//! same order, and no in-memory queue can drift from what was accepted.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::agents::{AgentError, AgentRunner};
use crate::registry::Registry;
use crate::store::{NewRun, RunRecord, SessionKey, Store, StoreError};
use crate::workers::{drain, KeyedWorkers};

pub struct Runs {
    store: Store,
    registry: Arc<Registry>,
    runner: AgentRunner,
    session_ttl: Option<Duration>,
    workers: KeyedWorkers<SessionKey>,
    finished: broadcast::Sender<String>,
    stopping: CancellationToken,
    tracker: TaskTracker,
}

impl Runs {
    pub fn new(
        store: Store,
        registry: Arc<Registry>,
        runner: AgentRunner,
        session_ttl: Option<Duration>,
    ) -> Arc<Self> {
        let (finished, _) = broadcast::channel(1024);
        Arc::new(Self {
            store,
            registry,
            runner,
            session_ttl,
            workers: KeyedWorkers::default(),
            finished,
            stopping: CancellationToken::new(),
            tracker: TaskTracker::new(),
        })
    }

    /// Stores the run, then schedules it. Once this returns, the run survives a crash.
    pub async fn submit(self: &Arc<Self>, run: NewRun) -> Result<RunRecord, StoreError> {
        let record = self.store.enqueue_run(&run, self.session_ttl).await?;
        self.wake(run.session);
        Ok(record)
    }

    /// Schedules every session that a previous process left with work.
    pub async fn resume_unfinished(self: &Arc<Self>) -> Result<usize, StoreError> {
        let sessions = self.store.sessions_with_unfinished_runs().await?;
        let count = sessions.len();
        for session in sessions {
            tracing::info!(agent = %session.agent, session = %session.session_id, "resuming unfinished runs");
            self.wake(session);
        }
        Ok(count)
    }

    /// Waits up to `budget` for the run to finish; `None` when it has not.
    pub async fn wait_for(
        &self,
        correlation_id: &str,
        budget: Duration,
    ) -> Result<Option<RunRecord>, StoreError> {
        // Subscribe before reading, so a completion between the read and the
        // wait is not missed.
        let mut finished = self.finished.subscribe();
        let deadline = tokio::time::Instant::now() + budget;
        loop {
            if let Some(run) = self.store.run(correlation_id).await? {
                if run.status.is_finished() {
                    return Ok(Some(run));
                }
            }
            loop {
                match tokio::time::timeout_at(deadline, finished.recv()).await {
                    Err(_) => return Ok(None),
                    Ok(Ok(id)) if id == correlation_id => break,
                    Ok(Ok(_)) => continue,
                    // Lagged or closed: re-read the store.
                    Ok(Err(_)) => break,
                }
            }
        }
    }

    fn wake(self: &Arc<Self>, session: SessionKey) {
        if self.stopping.is_cancelled() || !self.workers.claim(&session) {
            return;
        }
        let this = self.clone();
        self.tracker.spawn(async move { this.work(session).await });
    }

    async fn work(self: Arc<Self>, session: SessionKey) {
        loop {
            if self.stopping.is_cancelled() {
                self.workers.release(&session);
                return;
            }
            match self.store.next_unfinished_run(&session).await {
                Ok(Some(run)) => self.execute(run).await,
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

    /// Runs inside a span with the run's ids. `Instrument`, not `Span::enter`:
    /// an entered guard held across `.await` corrupts the span stack when the
    /// task moves between worker threads.
    async fn execute(&self, run: RunRecord) {
        let span = tracing::info_span!("run", agent = %run.agent, session = %run.thread_id, correlation_id = %run.correlation_id);
        self.execute_in_span(run).instrument(span).await;
    }

    async fn execute_in_span(&self, run: RunRecord) {
        let id = run.correlation_id.clone();
        if let Err(e) = self.store.mark_running(&id).await {
            tracing::error!(error = %e, "could not mark the run running");
        }
        let result = match self.registry.agent(&run.agent) {
            Some(agent) => self.runner.run(&agent, &run).await,
            None => Err(AgentError::AgentGone(run.agent.clone())),
        };
        let stored = match &result {
            Ok(outcome) => {
                self.store
                    .complete_run(&id, &outcome.response, outcome.usage)
                    .await
            }
            Err(e) => {
                tracing::warn!(error = %e, code = e.code(), "run failed");
                self.store
                    .fail_run(&id, &e.to_string(), e.code(), Default::default())
                    .await
            }
        };
        if let Err(e) = stored {
            tracing::error!(error = %e, "could not store the run's outcome; it will run again at next start");
        }
        let _ = self.finished.send(id);
    }

    /// Stops taking new runs and waits up to `grace` for the ones executing.
    /// Whatever is left stays in the store and resumes at the next start.
    pub async fn shutdown(&self, grace: Duration) {
        if !drain(&self.stopping, &self.tracker, grace).await {
            tracing::warn!(grace = ?grace, "runs still executing after the grace period; they resume at next start");
        }
    }
}
