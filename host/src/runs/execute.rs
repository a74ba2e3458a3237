//! The execution of one run: its tries over store errors, its stream, and
//! the storing of how it ended. `mod.rs` decides which run executes when;
//! this is what happens once one does.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::history::{self, Kept};
use super::{Finished, RunRecord, RunStatus, Runs, SessionKey};
use crate::agents::{AgentError, RunOutcome as AgentOutcome};
use crate::core::fence::SessionFence;
use crate::store::{RunOutcome, StoreError, StoredMessage};
use crate::streams::StreamWriter;

/// The record of a run this process just ended.
fn ended_record(run: &RunRecord, result: Result<&AgentOutcome, &AgentError>) -> RunRecord {
    let mut record = run.clone();
    record.updated_at = crate::store::now_ms();
    match result {
        Ok(outcome) => {
            record.status = RunStatus::Completed;
            record.response = Some(outcome.response.clone());
            record.usage = Some(outcome.usage);
        }
        Err(e) => {
            record.status = match e {
                AgentError::Canceled(_) => RunStatus::Canceled,
                _ => RunStatus::Failed,
            };
            record.error = Some(e.to_string());
            record.error_code = Some(e.code().to_string());
            record.usage = Some(Default::default());
        }
    }
    record
}

/// The first and the longest pause between tries over a store error.
const END_RETRY_FIRST: Duration = Duration::from_millis(100);
const END_RETRY_LONGEST: Duration = Duration::from_secs(5);

impl Runs {
    /// Runs inside a span with the run's ids. `Instrument`, not `Span::enter`:
    /// an entered guard held across `.await` corrupts the span stack when the
    /// task moves between worker threads.
    /// Executes a run; false when it waits for a human's decision (it is
    /// not ended, and nothing of it stays in memory).
    /// `empty_history`: the session is known to hold no messages yet.
    pub(super) async fn execute(
        &self,
        run: RunRecord,
        known: Option<SessionFence>,
        empty_history: bool,
    ) -> (bool, Option<SessionFence>) {
        let span = tracing::info_span!("run", agent = %run.agent, session = %run.thread_id, correlation_id = %run.correlation_id);
        // The trace of the request that started the run, wherever and
        // whenever it executes.
        crate::telemetry::continue_trace(&span, run.traceparent.as_deref());
        self.execute_in_span(run, known, empty_history)
            .instrument(span)
            .await
    }

    async fn execute_in_span(
        &self,
        run: RunRecord,
        known: Option<SessionFence>,
        empty_history: bool,
    ) -> (bool, Option<SessionFence>) {
        let id = run.correlation_id.clone();
        let session = run.session();
        // On a shared hub: what this host holds of the session, carried by
        // every write of the run so that a take-over refuses them. One read
        // by the enqueue or an earlier run still holds while this host's
        // lease has not broken since; else it is read again.
        let known = known.filter(|held| self.store.holds_by_lease(held));
        let fence = match known {
            Some(held) => Some(held),
            None => match self
                .store
                .within("the session's owner", self.store.session_fence(&session))
                .await
            {
                Ok(fence) => fence,
                Err(e) => {
                    tracing::warn!(error = %e, "not executing the run here");
                    return (false, None);
                }
            },
        };
        // A session that began with this run has no history to read. Else,
        // where histories are kept in memory they are taken (so that a run
        // going on after a human's decision reads the store) and, on a hub,
        // checked against the store before they are used. Nothing is kept
        // for a new session before its run executes: a worker that another
        // wake-up started (the pass at start) may run it first, and a
        // history kept after that would be stale, and would make the
        // session's next run forget its conversation.
        // A run this process began before (it came to wait for a human) is
        // not its session's first whatever its hand-over said: a late
        // notification can hand over a run the pass found first.
        let empty_history = empty_history
            && !self
                .attempts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&id);
        let mut kept = match (&self.histories, empty_history) {
            (histories, true) => {
                if let Some(histories) = histories {
                    let _stale = histories.take(&session);
                }
                Some(Kept::Fresh {
                    born: run.created_at,
                })
            }
            (Some(histories), false) => histories.take(&session),
            (None, false) => None,
        };
        // A run asked to stop before it got here (queued, waiting for a
        // human, left by a host that died) ends at once.
        let stop = self
            .stops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .begin(&id);
        if run.cancel_requested {
            stop.cancel();
        }
        let executing = Executing {
            runs: self,
            id: id.clone(),
        };
        let mut pause = END_RETRY_FIRST;
        // With how the run ended, the session's `created_at` as its last
        // try learnt it.
        let (stream, result, born) = loop {
            let attempt = *self
                .attempts
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(id.clone())
                .or_insert_with(crate::store::now_ms);
            let unseen = self
                .asked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&id);
            let stream = self.streams.writer(&id, attempt, unseen);
            let (result, known_born) = match self
                .attempt(&run, &session, kept.take(), &stream, fence.as_ref(), &stop)
                .await
            {
                Ok((outcome, known_born)) => (Ok(outcome), known_born),
                Err(e) => (Err(e), None),
            };
            match &result {
                // The store failed mid-run (a connection cut, a deadline):
                // not the run's failure. It goes on from what was stored, as
                // a new attempt of its stream (readers are told to restart).
                Err(AgentError::Store(e))
                    if !matches!(e, StoreError::Fenced { .. }) && !self.stopping.is_cancelled() =>
                {
                    tracing::warn!(error = %e, retry_in = ?pause, "the store failed during the run; it goes on from what was stored");
                    self.back_off(&mut pause).await;
                    self.attempts
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(id.clone(), crate::store::now_ms());
                }
                // Stopping: the run stays as stored and goes on at the next
                // start (or on another host); a store error is not its end.
                Err(AgentError::Store(e)) if !matches!(e, StoreError::Fenced { .. }) => {
                    tracing::warn!(error = %e, "the store failed during the run while the host stops; it goes on at the next start");
                    return (false, fence);
                }
                _ => break (stream, result, known_born),
            }
        };
        if let Err(AgentError::AwaitingApproval(_)) = &result {
            // Its text so far outlives this execution (and this process).
            stream.keep();
            // Asked to stop as it came to wait: its worker (this one, which
            // holds the session) looks again, and ends it as canceled. The
            // run stops counting as executing first: a request after that
            // wakes the session (this worker looks again), one before it
            // stopped `stop`; none falls between the two.
            drop(executing);
            if stop.is_cancelled() {
                let _ = self.workers.claim(&session);
            }
            // Its history moved on in the store (the tool round): not kept.
            let mut record = run.clone();
            record.status = RunStatus::AwaitingApproval;
            self.finished.tell(Finished {
                correlation_id: id,
                record: Some(Arc::new(record)),
            });
            return (false, fence);
        }
        if let Err(e) = &result {
            tracing::warn!(error = %e, code = e.code(), "run failed");
        }
        let ended = self.store_end(&session, &id, &result, fence.as_ref()).await;
        let record = match (ended, result) {
            (Err(e), _) => {
                tracing::error!(error = %e, "the host stopped before the run's outcome could be stored; it runs again at next start");
                None
            }
            (Ok(changed), result) => {
                if changed {
                    // An orchestration may name an agent nobody serves: the
                    // label stays within the served names.
                    let agent = match self.registry.agent(&run.agent) {
                        Some(_) => run.agent.as_str(),
                        None => "unknown",
                    };
                    crate::metrics::run_ended(agent, result.is_ok());
                }
                if !changed {
                    tracing::info!(
                        "the run had already ended elsewhere; its outcome here is dropped"
                    );
                }
                // The stream ends only once the record says how the run ended,
                // and only by the host that ended it: one that lost the run
                // must not end the stream its new owner writes.
                match result {
                    _ if !changed => None,
                    Ok(outcome) => {
                        stream.complete();
                        let record = ended_record(&run, Ok(&outcome));
                        if let Some(histories) = &self.histories {
                            histories.keep(session, outcome.history, born);
                        }
                        Some(record)
                    }
                    Err(e) => {
                        stream.fail(&e.to_string());
                        Some(ended_record(&run, Err(&e)))
                    }
                }
            }
        };
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        self.finished.tell(Finished {
            correlation_id: id,
            record: record.map(Arc::new),
        });
        (true, fence)
    }

    /// Waits `pause` (less if the host stops meanwhile), then doubles it
    /// for the next try, up to [`END_RETRY_LONGEST`].
    async fn back_off(&self, pause: &mut Duration) {
        tokio::select! {
            () = tokio::time::sleep(*pause) => {}
            () = self.stopping.cancelled() => {}
        }
        *pause = (*pause * 2).min(END_RETRY_LONGEST);
    }

    /// One try of the run: on the history kept in memory where it is the
    /// stored one, else as stored. With its outcome, the session's
    /// `created_at` where it was learnt (to check what is kept next time).
    async fn attempt(
        &self,
        run: &RunRecord,
        session: &SessionKey,
        kept: Option<Kept>,
        stream: &StreamWriter,
        fence: Option<&SessionFence>,
        stop: &CancellationToken,
    ) -> Result<(AgentOutcome, Option<i64>), AgentError> {
        let Some(agent) = self.registry.agent(&run.agent) else {
            return Err(AgentError::AgentGone(run.agent.clone()));
        };
        let (history, born) = self.starting_history(session, kept).await?;
        let deltas = |text: &str| stream.chunk(text);
        let outcome = self
            .runner
            .run(&agent, run, history, &deltas, fence, stop)
            .await?;
        Ok((outcome, born))
    }

    /// The history a run starts from, and the session's `created_at` where
    /// it is known. Where this process alone writes, what is kept is the
    /// truth. On a hub another host may have run the session, or deleted
    /// it, meanwhile: what is kept is used only if one indexed read of the
    /// session shows the store holds exactly it; else the store's history
    /// is read, with the session's `created_at` to check it next time.
    async fn starting_history(
        &self,
        session: &SessionKey,
        kept: Option<Kept>,
    ) -> Result<(Vec<StoredMessage>, Option<i64>), StoreError> {
        let shared = self.store.is_shared();
        match kept {
            Some(Kept::Fresh { born }) => Ok((Vec::new(), Some(born))),
            Some(Kept::Ended { messages, born }) if !shared => Ok((messages, born)),
            None if !shared => Ok((self.store.history(session).await?, None)),
            Some(Kept::Ended { messages, born }) => {
                let stamp = self.store.session_stamp(session).await?;
                if stamp.is_some_and(|stamp| history::is_stored(&messages, born, &stamp)) {
                    return Ok((messages, born));
                }
                self.store.history_and_birth(session).await
            }
            None => self.store.history_and_birth(session).await,
        }
    }

    /// Stores how the run ended (true when this write ended it), retrying
    /// with backoff for as long as the store refuses: a full disk, a lock
    /// held by another process, a connection gone. A run whose end was not
    /// stored would otherwise stay pending, its caller waiting, until the
    /// next start. Gives up only when the host stops (the run then runs
    /// again at the next start).
    async fn store_end(
        &self,
        session: &SessionKey,
        id: &str,
        result: &Result<AgentOutcome, AgentError>,
        fence: Option<&SessionFence>,
    ) -> Result<bool, StoreError> {
        let end = || async {
            match result {
                Ok(outcome) => {
                    let completed = RunOutcome::Completed {
                        response: &outcome.response,
                        usage: outcome.usage,
                    };
                    self.store
                        .end_run(session, id, &outcome.unsaved(), completed, fence)
                        .await
                }
                Err(e) => {
                    let failed = RunOutcome::Failed {
                        error: &e.to_string(),
                        code: e.code(),
                        usage: Default::default(),
                    };
                    // A canceled run closes the tool calls it stored.
                    let closing = match e {
                        AgentError::Canceled(closing) => closing.as_slice(),
                        _ => &[],
                    };
                    self.store
                        .end_run(session, id, closing, failed, fence)
                        .await
                }
            }
        };
        let mut pause = END_RETRY_FIRST;
        loop {
            // A try under way always finishes: a host told to stop still
            // stores the end of a run it finished within its grace.
            match end().await {
                Ok(changed) => return Ok(changed),
                Err(e) if self.stopping.is_cancelled() => return Err(e),
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?pause, "could not store the run's outcome; retrying");
                    self.back_off(&mut pause).await;
                }
            }
        }
    }
}

/// A run executing here, listed (with its stop) until it returns.
struct Executing<'a> {
    runs: &'a Runs,
    id: String,
}

impl Drop for Executing<'_> {
    fn drop(&mut self) {
        self.runs
            .stops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .end(&self.id);
    }
}
