//! Waiting for runs to end: a synchronous caller, an orchestration's agent
//! call. Alone on its store a host hears of every end it waits for; on a
//! shared hub another host's notification can be lost, so one backstop per
//! host reads every run waited for here once a pass, in one query.

use std::sync::Arc;
use std::time::Duration;

use super::ends::EndWatch;
use super::{Finished, Runs, PASS};
use crate::store::{RunRecord, RunStatus, StoreError};

impl Runs {
    /// Waits up to `budget` for the run to finish; `None` when it has not.
    pub async fn wait_for(
        &self,
        correlation_id: &str,
        budget: Duration,
    ) -> Result<Option<RunRecord>, StoreError> {
        // Subscribe before reading, so a completion between the read and the
        // wait is not missed.
        let mut finished = self.finished.watch(correlation_id);
        self.wait_on(&mut finished, correlation_id, budget, true)
            .await
    }

    /// Listens for the run's ends from now: pass it to
    /// [`Self::wait_settled`] once whatever the wait follows (a decision) is
    /// stored, so that a run that goes on and comes to wait again meanwhile
    /// is not missed.
    pub fn listen(&self, correlation_id: &str) -> Listening {
        Listening(self.finished.watch(correlation_id))
    }

    /// Waits up to `budget` for the run to end, or to wait for a human on a
    /// call nobody decided yet (read from the store first, then heard);
    /// `None` when neither happened in time. Once a decision is stored, an
    /// execution that began before it may still say the run waits: with no
    /// call left undecided that word is stale (the decision's own wake-up
    /// runs the calls), and the wait goes on.
    pub async fn wait_settled(
        &self,
        listening: Listening,
        correlation_id: &str,
        budget: Duration,
    ) -> Result<Option<RunRecord>, StoreError> {
        let Listening(mut finished) = listening;
        let deadline = tokio::time::Instant::now() + budget;
        if let Some(mut run) = self.store.run(correlation_id).await? {
            if run.status.is_finished() {
                return Ok(Some(run));
            }
            if !self
                .store
                .pending_approvals(correlation_id)
                .await?
                .is_empty()
            {
                run.status = RunStatus::AwaitingApproval;
                return Ok(Some(run));
            }
        }
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let waited = self
                .wait_on(&mut finished, correlation_id, left, false)
                .await?;
            match waited {
                Some(run)
                    if run.status == RunStatus::AwaitingApproval
                        && !left.is_zero()
                        && self
                            .store
                            .pending_approvals(correlation_id)
                            .await?
                            .is_empty() => {}
                other => return Ok(other),
            }
        }
    }

    pub(super) async fn wait_on(
        &self,
        finished: &mut EndWatch,
        correlation_id: &str,
        budget: Duration,
        mut read: bool,
    ) -> Result<Option<RunRecord>, StoreError> {
        let deadline = tokio::time::Instant::now() + budget;
        let _counted = crate::metrics::waiting_caller();
        // Alone on its store, this process hears every end. On a shared hub
        // another host's notification can be lost: the backstop reads every
        // waited run once a pass, in one query for all of them.
        let _waiting = self
            .store
            .is_shared()
            .then(|| Waiting::new(self, correlation_id));
        loop {
            if read {
                if let Some(run) = self.store.run(correlation_id).await? {
                    if run.status.is_finished() {
                        return Ok(Some(run));
                    }
                }
            }
            read = true;
            match tokio::time::timeout_at(deadline, finished.recv()).await {
                Err(_) => return Ok(None),
                Ok(Some(done)) => {
                    if let Some(record) = done.record {
                        return Ok(Some(RunRecord::clone(&record)));
                    }
                    // Ended elsewhere, its record not sent: read.
                }
                // Nobody can tell any more (the watch outlives its sender,
                // which it never should): the store says, at the deadline.
                Ok(None) => tokio::time::sleep_until(deadline).await,
            }
        }
    }

    /// On a shared hub: once a pass, the runs waited for here that ended
    /// without this host hearing of it (a notification lost with a
    /// connection, a host that died between its commit and its NOTIFY), in
    /// one read for all of them, however many wait.
    pub(super) async fn backstop(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(PASS);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticker.tick() => {}
                () = self.stopping.cancelled() => return,
            }
            let ids: Vec<String> = self
                .waited
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .keys()
                .cloned()
                .collect();
            if ids.is_empty() {
                continue;
            }
            let store = &self.store;
            match store
                .within("the runs waited for", store.finished_runs(&ids))
                .await
            {
                Ok(ended) => {
                    for run in ended {
                        self.finished.tell(Finished {
                            correlation_id: run.correlation_id.clone(),
                            record: Some(Arc::new(run)),
                        });
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not read the runs waited for"),
            }
        }
    }
}

/// A run waited for on a shared hub, counted while the waiter waits.
struct Waiting<'a> {
    runs: &'a Runs,
    id: String,
}

impl<'a> Waiting<'a> {
    fn new(runs: &'a Runs, id: &str) -> Self {
        *runs
            .waited
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.to_string())
            .or_default() += 1;
        Self {
            runs,
            id: id.to_string(),
        }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut waited = self.runs.waited.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = waited.get_mut(&self.id) {
            *count -= 1;
            if *count == 0 {
                waited.remove(&self.id);
            }
        }
    }
}

/// Runs' ends heard from the moment [`Runs::listen`] was called.
pub struct Listening(EndWatch);
