//! A caller's hold on runs beyond starting them: asking one to stop, and
//! listing an agent's runs a page at a time.
//!
//! A cancel request is kept with the run before anything else happens, so
//! it outlives any crash: the host executing the run stops it at its next
//! step (told in-process, or by a notification on a shared hub), and a run
//! nobody executes (queued behind another run of its session, waiting for
//! a human, left by a dead host) ends as canceled when its worker reaches
//! it, which for one waiting on a human is at once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::answers::{RunState, RunsError};
use super::{RunStatus, Runs, SessionKey};
use crate::store::{now_ms, RunFilter};

/// What a cancel request came to within the caller's wait.
#[derive(Debug)]
pub enum CancelOutcome {
    /// The run ended: canceled, or it finished on its own first.
    Ended(RunState),
    /// Asked: the run ends at its next step (a tool call under way
    /// finishes first; a queued run ends when its turn comes).
    Requested(RunState),
}

/// The stops of the runs executing here, and the requests for runs that
/// were not (yet): a worker that read its run just before the request was
/// stored begins it just after, and finds the request here.
#[derive(Default)]
pub(super) struct Stops {
    executing: HashMap<String, CancellationToken>,
    asked: HashMap<String, Instant>,
}

/// How long a request for a run not executing here is kept for a worker
/// about to begin it: far longer than a read of the run takes.
const ASKED_FOR: Duration = Duration::from_secs(60);

impl Stops {
    /// The stop of a run this host begins, already stopped if asked.
    pub(super) fn begin(&mut self, correlation_id: &str) -> CancellationToken {
        let stop = CancellationToken::new();
        if self.asked.remove(correlation_id).is_some() {
            stop.cancel();
        }
        self.executing
            .insert(correlation_id.to_string(), stop.clone());
        stop
    }

    pub(super) fn end(&mut self, correlation_id: &str) {
        self.executing.remove(correlation_id);
    }

    /// Stops the run if it executes here (true); else keeps the request
    /// for a while, in case it is about to begin.
    fn ask(&mut self, correlation_id: &str) -> bool {
        if let Some(stop) = self.executing.get(correlation_id) {
            stop.cancel();
            return true;
        }
        let now = Instant::now();
        self.asked
            .retain(|_, at| now.duration_since(*at) < ASKED_FOR);
        self.asked.insert(correlation_id.to_string(), now);
        false
    }
}

/// A page of runs, newest first, and the position the next page starts
/// after (`None` on the last page).
#[derive(Debug)]
pub struct RunsPage {
    pub runs: Vec<RunState>,
    pub next: Option<i64>,
}

impl Runs {
    /// Asks the run `correlation_id` of `agent` to stop, then waits up to
    /// `budget` for it to end. A run that has ended, or that ends on its own
    /// before it reaches a step that stops it, is refused
    /// ([`RunsError::NotCancelable`]).
    pub async fn cancel(
        self: &Arc<Self>,
        agent: &str,
        correlation_id: &str,
        budget: Duration,
    ) -> Result<CancelOutcome, RunsError> {
        let not_cancelable = |status| RunsError::NotCancelable {
            correlation_id: correlation_id.to_string(),
            status,
        };
        let record = self.record(agent, correlation_id).await?;
        if record.status.is_finished() {
            return Err(not_cancelable(record.status));
        }
        // Listening before the request is stored: the end cannot be missed.
        let mut finished = self.finished.watch(correlation_id);
        let record = self
            .store
            .request_cancel(correlation_id, now_ms())
            .await?
            .ok_or_else(|| RunsError::RunNotFound {
                agent: agent.to_string(),
                correlation_id: correlation_id.to_string(),
            })?;
        if record.status.is_finished() {
            return Err(not_cancelable(record.status));
        }
        tracing::info!(agent, correlation_id, "a caller asked the run to stop");
        let session = record.session();
        self.stop(correlation_id, session.clone());
        if let Err(e) = self.store.announce_cancel(correlation_id, &session).await {
            tracing::warn!(error = %e, "could not tell the other hosts of a cancel request; the run stops when its worker next looks at it");
        }
        // What is heard before the end (another execution that began
        // before the request saying the run waits for a human) is not the
        // end: the wait goes on for the rest of the budget.
        let deadline = tokio::time::Instant::now() + budget;
        let waited = loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self
                .wait_on(&mut finished, correlation_id, left, true)
                .await?
            {
                Some(record) if !record.status.is_finished() && !left.is_zero() => {}
                other => break other,
            }
        };
        match waited {
            // It ended on its own before it reached a step that stops it:
            // nothing was canceled.
            Some(record) if record.status.is_finished() && record.status != RunStatus::Canceled => {
                Err(not_cancelable(record.status))
            }
            Some(record) if record.status.is_finished() => Ok(CancelOutcome::Ended(RunState {
                record,
                pending: Vec::new(),
            })),
            _ => Ok(CancelOutcome::Requested(
                self.state(agent, correlation_id).await?,
            )),
        }
    }

    /// Stops the run if it executes here; else wakes its session's worker
    /// (if this host has it), which ends the run when it reaches it.
    pub(super) fn stop(self: &Arc<Self>, correlation_id: &str, session: SessionKey) {
        let stopped = self
            .stops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .ask(correlation_id);
        if !stopped {
            self.wake(session);
        }
    }

    /// A page of `agent`'s runs (at most `filter.limit`), newest first. An
    /// agent that is not served and has no runs is unknown.
    pub async fn list(&self, agent: &str, filter: RunFilter) -> Result<RunsPage, RunsError> {
        let limit = filter.limit.max(1);
        let asked = RunFilter {
            limit: limit + 1,
            ..filter
        };
        let mut rows = self.store.list_runs(agent, &asked).await?;
        if rows.is_empty() && asked.before.is_none() {
            self.served(agent)?;
        }
        let next = match rows.len() > limit {
            true => {
                rows.truncate(limit);
                rows.last().map(|(position, _)| *position)
            }
            false => None,
        };
        let mut runs = Vec::with_capacity(rows.len());
        for (_, record) in rows {
            let pending = self.pending_of(&record).await?;
            runs.push(RunState { record, pending });
        }
        Ok(RunsPage { runs, next })
    }
}

#[cfg(test)]
mod tests {
    use super::Stops;

    #[test]
    fn a_request_stops_a_run_under_way_or_one_about_to_begin_and_no_other() {
        let mut stops = Stops::default();
        let under_way = stops.begin("a");
        assert!(stops.ask("a"), "executing here");
        assert!(under_way.is_cancelled());
        stops.end("a");
        // Read just before the request was stored, begun just after.
        assert!(!stops.ask("b"), "not executing here");
        assert!(stops.begin("b").is_cancelled());
        stops.end("b");
        // The request was used once: the run's next attempt is told by its
        // record, not by a left-over request.
        assert!(!stops.begin("b").is_cancelled());
        assert!(!stops.begin("c").is_cancelled());
    }
}
