//! Whether this host can do its work: its store writer and, on a shared
//! hub, its lease. The edge asks this service; it never reads the store.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::store::{Store, WriterCheck};

/// Failed scheduler passes in a row after which the host reports itself
/// degraded: passes come a second apart at most, so about five seconds of
/// a store the scheduler cannot read (one failed pass is a blip).
pub const SCHEDULER_DEGRADED_AFTER: u32 = 5;

/// The scheduler's reads of the store, pass after pass: while they fail,
/// no timer fires and no delayed retry runs for any instance, though the
/// HTTP front answers and the writer commits. Health says so.
#[derive(Debug, Default)]
pub struct SchedulerReads {
    failing: AtomicU32,
    last: Mutex<String>,
}

impl SchedulerReads {
    /// A pass read what it needed; whether passes had been failing before.
    pub fn passed(&self) -> u32 {
        self.failing.swap(0, Ordering::Relaxed)
    }

    /// A pass could not read the store; how many have failed in a row now.
    pub fn failed(&self, reason: String) -> u32 {
        *self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = reason;
        self.failing
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1)
    }

    /// Why the scheduler is not doing its work, once its reads have failed
    /// [`SCHEDULER_DEGRADED_AFTER`] times in a row.
    pub fn problem(&self) -> Option<String> {
        let failing = self.failing.load(Ordering::Relaxed);
        (failing >= SCHEDULER_DEGRADED_AFTER).then(|| {
            let last = self
                .last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            format!("the scheduler's last {failing} reads of the store failed: {last}")
        })
    }
}

/// Answers the health routes from the store's writer and lease.
#[derive(Clone)]
pub struct Health {
    store: Store,
    /// A store batch under way for longer than this makes the host unhealthy.
    writer_deadline: Duration,
    scheduler: Arc<SchedulerReads>,
}

impl Health {
    pub fn new(store: Store, writer_deadline: Duration, scheduler: Arc<SchedulerReads>) -> Self {
        Self {
            store,
            writer_deadline,
            scheduler,
        }
    }

    /// Why the host does part of its work only (its scheduler cannot read
    /// the store: timers and delayed retries wait), if it does. Not a
    /// reason to take it out of a load balancer: it answers and commits.
    pub fn degraded(&self) -> Option<String> {
        self.scheduler.problem()
    }

    /// Why a supervisor should restart this process (its writer is dead or
    /// stuck), if it should. A writer that fails and retries is alive.
    pub fn dead(&self) -> Option<String> {
        match self.store.writer_check(self.writer_deadline) {
            WriterCheck::Dead(reason) | WriterCheck::Stalled(reason) => Some(reason),
            WriterCheck::Failing(_) | WriterCheck::Healthy => None,
        }
    }

    /// Why the process should end (its writer is dead, or stuck on one batch
    /// for four deadlines: nothing more can be committed), if it should.
    pub fn gone(&self) -> Option<String> {
        match self
            .store
            .writer_check(self.writer_deadline.saturating_mul(4))
        {
            WriterCheck::Dead(reason) | WriterCheck::Stalled(reason) => Some(reason),
            WriterCheck::Failing(_) | WriterCheck::Healthy => None,
        }
    }

    /// Why this host should get no work now (it cannot write, or it does not
    /// hold its lease on a shared hub), if it should not.
    pub fn not_ready(&self) -> Option<String> {
        self.store
            .writer_check(self.writer_deadline)
            .problem()
            .map(str::to_string)
            .or_else(|| self.store.lease_problem())
    }
}
