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

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::agents::{AgentError, AgentRunner};
use crate::registry::Registry;
use crate::store::{NewRun, RunRecord, SessionKey, Store, StoreError, Wake};
use crate::streams::ResponseStreams;
use crate::workers::{drain, KeyedWorkers};

pub struct Runs {
    store: Store,
    registry: Arc<Registry>,
    runner: AgentRunner,
    streams: Arc<ResponseStreams>,
    session_ttl: Option<Duration>,
    /// Whether this process executes runs (not an HTTP-only front).
    works: bool,
    workers: KeyedWorkers<SessionKey>,
    finished: broadcast::Sender<String>,
    stopping: CancellationToken,
    tracker: TaskTracker,
}

/// Sessions one pass claims at most, so that other hosts get their share.
const CLAIM_AT_ONCE: usize = 64;

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
        works: bool,
    ) -> Arc<Self> {
        let (finished, _) = broadcast::channel(1024);
        Arc::new(Self {
            store,
            registry,
            runner,
            streams,
            session_ttl,
            works,
            workers: KeyedWorkers::default(),
            finished,
            stopping: CancellationToken::new(),
            tracker: TaskTracker::new(),
        })
    }

    /// Stores the run, then schedules it (here, or on the host that owns
    /// its session). Once this returns, the run survives a crash.
    pub async fn submit(self: &Arc<Self>, run: NewRun) -> Result<RunRecord, StoreError> {
        let (record, run_here) = self.store.enqueue_run(&run, self.session_ttl).await?;
        if run_here {
            self.wake(run.session);
        }
        Ok(record)
    }

    /// Resumes whatever a previous process left unfinished and, on a hub
    /// shared with other hosts, keeps taking the sessions they hand over
    /// (new runs, a dead host's sessions) and hears of runs they finish.
    pub fn start(self: &Arc<Self>) {
        let this = self.clone();
        self.tracker.spawn(async move { this.follow().await });
    }

    async fn follow(self: Arc<Self>) {
        let mut wakes = self.store.wakes();
        let mut first = true;
        loop {
            if self.works {
                match self.store.claim_sessions(CLAIM_AT_ONCE).await {
                    Ok(sessions) => {
                        if first && !sessions.is_empty() {
                            tracing::info!(sessions = sessions.len(), "resuming unfinished runs");
                        }
                        let full = sessions.len() >= CLAIM_AT_ONCE;
                        sessions.into_iter().for_each(|s| self.wake(s));
                        if full {
                            continue;
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "could not read sessions with unfinished runs")
                    }
                }
            }
            first = false;
            // Alone on its store, a host has nothing more to learn.
            let Some(wakes) = wakes.as_mut() else { return };
            let deadline = tokio::time::sleep(PASS);
            tokio::pin!(deadline);
            loop {
                let wake = tokio::select! {
                    wake = wakes.recv() => wake,
                    () = &mut deadline => break,
                    () = self.stopping.cancelled() => return,
                };
                let pass = match wake {
                    Err(broadcast::error::RecvError::Closed) => return,
                    Err(broadcast::error::RecvError::Lagged(_)) => true,
                    Ok(wake) => self.heard(wake),
                };
                if pass {
                    // One pass answers every wake-up queued meanwhile.
                    while let Ok(wake) = wakes.try_recv() {
                        self.heard(wake);
                    }
                    break;
                }
            }
        }
    }

    /// Takes in another host's notification; true when it asks for a pass
    /// over the sessions.
    fn heard(&self, wake: Wake) -> bool {
        match wake {
            Wake::RunFinished(id) => {
                let _ = self.finished.send(id);
                false
            }
            Wake::Sessions | Wake::Everything => true,
            Wake::Instances(_) => false,
        }
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
            // Read again at least every pass: a notification from another
            // host can be lost.
            let look_again = deadline.min(tokio::time::Instant::now() + PASS);
            loop {
                match tokio::time::timeout_at(look_again, finished.recv()).await {
                    Err(_) if look_again >= deadline => return Ok(None),
                    Err(_) => break,
                    Ok(Ok(id)) if id == correlation_id => break,
                    Ok(Ok(_)) => continue,
                    // Lagged or closed: re-read the store.
                    Ok(Err(_)) => break,
                }
            }
        }
    }

    fn wake(self: &Arc<Self>, session: SessionKey) {
        if !self.works || self.stopping.is_cancelled() || !self.workers.claim(&session) {
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
        let stream = self.streams.writer(&id);
        let deltas = |text: &str| stream.chunk(text);
        let result = match self.registry.agent(&run.agent) {
            Some(agent) => self.runner.run(&agent, &run, &deltas).await,
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
        match (stored, &result) {
            (Err(e), _) => {
                tracing::error!(error = %e, "could not store the run's outcome; it will run again at next start")
            }
            // The stream ends only once the record says how the run ended.
            (Ok(()), Ok(_)) => stream.complete(),
            (Ok(()), Err(e)) => stream.fail(&e.to_string()),
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
