//! Whether this host can do its work: its store writer and, on a shared
//! hub, its lease. The edge asks this service; it never reads the store.

use std::time::Duration;

use crate::store::{Store, WriterCheck};

/// Answers the health routes from the store's writer and lease.
#[derive(Clone)]
pub struct Health {
    store: Store,
    /// A store batch under way for longer than this makes the host unhealthy.
    writer_deadline: Duration,
}

impl Health {
    pub fn new(store: Store, writer_deadline: Duration) -> Self {
        Self {
            store,
            writer_deadline,
        }
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
