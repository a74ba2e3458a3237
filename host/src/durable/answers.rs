//! What the durable service answers the management API: an instance's
//! status with its history, pages of instances, purges, and the refusals of
//! management operations as typed errors.

use std::sync::Arc;

use super::{DurableError, Orchestrator};
use crate::core::journal::Entry;
use crate::core::lifecycle::Change;
use crate::store::{
    InstanceFilter, InstanceRecord, Operation, PendingCall, RunRecord, VersionInUse,
};

/// An instance and, when asked for, what it did.
#[derive(Debug)]
pub struct InstanceView {
    pub instance: InstanceRecord,
    pub history: Option<InstanceHistory>,
}

/// An instance's journal (each entry with when it was written, ms) and the
/// agent runs of its current execution with the tool calls they wait on.
#[derive(Debug)]
pub struct InstanceHistory {
    pub journal: Vec<(Entry, i64)>,
    pub runs: Vec<(RunRecord, Vec<PendingCall>)>,
}

/// What a purge of every matching instance did.
#[derive(Debug, Clone, Copy)]
pub struct Purged {
    pub deleted: u64,
    /// Matching instances may remain (the purge stopped at its budget).
    pub more: bool,
}

impl DurableError {
    /// The refusal a management operation's [`Change`] stands for.
    /// A purge refused is refused because the instance has not finished.
    fn refused(change: Change, id: &str, purging: bool) -> Result<(), Self> {
        let id = id.to_string();
        match change {
            Change::Done => Ok(()),
            Change::NotFound => Err(Self::InstanceNotFound(id)),
            Change::Finished | Change::NotApplicable if purging => Err(Self::InstanceRunning(id)),
            Change::Finished => Err(Self::InstanceFinished(id)),
            Change::NotApplicable => Err(Self::InvalidState(id)),
        }
    }
}

impl Orchestrator {
    /// The instance `id`; its journal and agent runs with `with_history`.
    pub async fn status(&self, id: &str, with_history: bool) -> Result<InstanceView, DurableError> {
        let instance = self
            .store
            .instance(id)
            .await?
            .ok_or_else(|| DurableError::InstanceNotFound(id.to_string()))?;
        let history = if with_history {
            let journal = self.store.journal(id).await?;
            let records = self.store.runs_of_instance(id, instance.execution).await?;
            let mut runs = Vec::with_capacity(records.len());
            for run in records {
                let pending = self.runs.pending_of(&run).await?;
                runs.push((run, pending));
            }
            Some(InstanceHistory { journal, runs })
        } else {
            None
        };
        Ok(InstanceView { instance, history })
    }

    /// Up to `top` instances matching `filter`, after the `(created_at, id)`
    /// of the previous page's last.
    pub async fn list(
        &self,
        filter: &InstanceFilter,
        top: usize,
        after: Option<(i64, String)>,
    ) -> Result<Vec<InstanceRecord>, DurableError> {
        Ok(self.store.list_instances(filter, top, after).await?)
    }

    /// The component versions instances not ended run on, with how many.
    pub async fn versions_in_use(&self) -> Result<Vec<VersionInUse>, DurableError> {
        Ok(self.store.versions_in_use().await?)
    }

    /// Deletes finished instances matching `filter`, in a bounded time.
    pub async fn purge_matching(&self, filter: &InstanceFilter) -> Result<Purged, DurableError> {
        let purge = self.store.purge_matching(filter).await?;
        Ok(Purged {
            deleted: purge.deleted,
            more: purge.more,
        })
    }

    /// Brings the engine's gauges up to date for a scrape: the hot images
    /// and their inbox rows (counted in memory), and the instances waiting
    /// (one count read from the store: the engine holds only some of them).
    pub async fn refresh_gauges(&self) -> Result<(), DurableError> {
        self.hot.publish();
        let waiting = self.store.count_waiting_instances().await?;
        crate::metrics::waiting_instances(waiting);
        Ok(())
    }

    /// The largest input, output, event or activity result an instance takes.
    pub fn max_payload_bytes(&self) -> usize {
        self.config.limits.max_payload_bytes
    }

    /// Raises `event` with `payload` on instance `id`.
    pub async fn raise_event(
        self: &Arc<Self>,
        id: &str,
        event: &str,
        payload: &str,
    ) -> Result<(), DurableError> {
        if event == crate::core::sdk_entities::OPERATION_EVENT {
            return Err(DurableError::ReservedEvent(event.to_string()));
        }
        self.raise_unchecked(id, event, payload).await
    }

    /// [`Self::raise_event`] for the host's own events (an entity's
    /// operations).
    pub(super) async fn raise_unchecked(
        self: &Arc<Self>,
        id: &str,
        event: &str,
        payload: &str,
    ) -> Result<(), DurableError> {
        let (change, applied) = self.raise(id, event, payload).await?;
        self.dispatch(applied);
        DurableError::refused(change?, id, false)
    }

    /// Suspend, resume, terminate or purge an instance.
    pub async fn manage(self: &Arc<Self>, id: &str, op: Operation) -> Result<(), DurableError> {
        // Its state changes outside its episodes: the next one reads it anew.
        self.hot.forget(id);
        let purging = matches!(op, Operation::Purge);
        let (change, applied) = self.store.manage(id, op).await?;
        self.hot.forget(id);
        self.dispatch(applied);
        // A resumed instance may have work waiting in its inbox.
        self.notify();
        DurableError::refused(change, id, purging)
    }
}
