//! What the durable service answers the management API: an instance's
//! status with its history, pages of instances, purges, and the refusals of
//! management operations as typed errors.

use std::sync::Arc;

use super::{DurableError, Orchestrator};
use crate::core::failure::FailureDetails;
use crate::core::instance::RuntimeStatus;
use crate::core::journal::{Call, Entry};
use crate::core::lifecycle::Change;
use crate::core::sdk_history;
use crate::store::{
    InstanceFilter, InstanceRecord, Operation, PendingCall, RunRecord, VersionInUse,
};

/// Journal entries read from its end to find the episode that ended a
/// failed SDK instance (what arrived for that episode precedes its marker).
const ENDING_TAIL: usize = 256;

/// Most sub-orchestrations one recursive terminate or purge walks.
const TREE: usize = 10_000;

/// An instance and, when asked for, what it did.
#[derive(Debug)]
pub struct InstanceView {
    pub instance: InstanceRecord,
    pub history: Option<InstanceHistory>,
    /// What the instance waits for that nothing here provides: an SDK
    /// orchestration no connected worker runs (a worker that runs it has
    /// not connected yet, or its name is one no worker registers).
    pub waiting_for: Option<String>,
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
    pub(super) fn refused(change: Change, id: &str, purging: bool) -> Result<(), Self> {
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
    /// Whether instance `id`'s inbox holds nothing (a scheduled row not yet
    /// due counts).
    pub async fn inbox_empty(&self, id: &str) -> Result<bool, DurableError> {
        Ok(self.store.inbox(id).await?.is_empty())
    }

    /// The instance `id`; its journal and agent runs with `with_history`.
    pub async fn status(&self, id: &str, with_history: bool) -> Result<InstanceView, DurableError> {
        never_stored(id)?;
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
        let waiting_for = self.waiting_for(&instance);
        Ok(InstanceView {
            instance,
            history,
            waiting_for,
        })
    }

    /// [`InstanceView::waiting_for`]: said by the host that found no worker
    /// for it (on a shared hub, the instance's owner; another host's workers
    /// are not this one's).
    fn waiting_for(&self, instance: &InstanceRecord) -> Option<String> {
        if !instance.status.is_active()
            || !self
                .for_a_worker
                .still_waits(&instance.id, &self.sdk_workers)
        {
            return None;
        }
        let version = sdk_history::version_of(&instance.component_digest);
        let of = version.map_or_else(String::new, |v| format!(" at version '{v}'"));
        Some(format!(
            "a Durable Task SDK worker that runs orchestration '{}'{of}: none connected to this host \
             does; its next step runs once one connects",
            instance.name
        ))
    }

    /// How a Durable Task SDK worker reported the failure of `instance`, a
    /// failed instance it ran: kept in the journal with the episode that
    /// ended it. `None` for any other instance (its failure is its output's
    /// text), read without touching the store.
    pub async fn reported_failure(
        &self,
        instance: &InstanceRecord,
    ) -> Result<Option<FailureDetails>, DurableError> {
        if instance.status != RuntimeStatus::Failed
            || !sdk_history::is_sdk(&instance.component_digest)
        {
            return Ok(None);
        }
        // The episode that ended it is the last: its marker is among the
        // journal's last entries (what arrived for it, then its calls).
        let tail = self.store.journal_tail(&instance.id, ENDING_TAIL).await?;
        Ok(tail
            .into_iter()
            .find_map(|entry| match entry {
                Entry::Call(Call::SdkEpisode { failure, .. }) => Some(failure.map(|f| *f)),
                _ => None,
            })
            .flatten())
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
        crate::metrics::waiting_instances(self.store.hub(), waiting);
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
        // The host's own messages to entities (operations, lock requests,
        // releases, wakes): a caller's raise must not forge one.
        let reserved = [
            crate::core::sdk_entities::OPERATION_EVENT,
            crate::core::entity_locks::LOCK_EVENT,
            crate::core::entity_locks::UNLOCK_EVENT,
            crate::core::entity_locks::WAKE_EVENT,
        ];
        if reserved.contains(&event) {
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
        never_stored(id)?;
        let (change, applied) = self.raise(id, event, payload).await?;
        self.dispatch(applied);
        DurableError::refused(change?, id, false)
    }

    /// Terminates `id`, then every sub-orchestration under it not ended
    /// yet (the parent first, so that it does not take their ends for
    /// news), each with `output` (JSON text, or an SDK's own). At most
    /// [`TREE`] instances are looked at.
    pub async fn terminate_tree(
        self: &Arc<Self>,
        id: &str,
        output: &str,
    ) -> Result<(), DurableError> {
        let terminate = || Operation::Terminate {
            output: output.to_string(),
        };
        self.manage(id, terminate()).await?;
        for (child, status) in self.descendants(id).await? {
            if status.is_finished() {
                continue;
            }
            match self.manage(&child, terminate()).await {
                // It ended meanwhile, or went: nothing to stop.
                Ok(())
                | Err(DurableError::InstanceNotFound(_) | DurableError::InstanceFinished(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Purges `id` and every finished sub-orchestration under it; how many
    /// were deleted. One still running (left by a terminate that was not
    /// recursive) stays, with a word.
    pub async fn purge_tree(self: &Arc<Self>, id: &str) -> Result<u64, DurableError> {
        // Read before the parent goes: the children name it.
        let descendants = self.descendants(id).await?;
        self.manage(id, Operation::Purge).await?;
        let mut deleted = 1;
        for (child, status) in descendants {
            if !status.is_finished() {
                tracing::info!(instance_id = %child, parent = id, "a sub-orchestration still running is not purged with its parent");
                continue;
            }
            match self.manage(&child, Operation::Purge).await {
                Ok(()) => deleted += 1,
                Err(DurableError::InstanceNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }

    /// The sub-orchestrations under `id`, at any depth, parents before
    /// their children; at most [`TREE`].
    async fn descendants(&self, id: &str) -> Result<Vec<(String, RuntimeStatus)>, DurableError> {
        let mut found = Vec::new();
        let mut next = 0;
        let mut parent = id.to_string();
        loop {
            for child in self.store.children(&parent).await? {
                if found.len() >= TREE {
                    return Err(DurableError::TooManyDescendants(id.to_string(), TREE));
                }
                found.push(child);
            }
            let Some((child, _)) = found.get(next) else {
                return Ok(found);
            };
            parent = child.clone();
            next += 1;
        }
    }

    /// Suspend, resume, terminate or purge an instance.
    pub async fn manage(self: &Arc<Self>, id: &str, op: Operation) -> Result<(), DurableError> {
        never_stored(id)?;
        // Its state changes outside its episodes: the next one reads it anew.
        self.hot.forget(id);
        self.for_a_worker.forget(id);
        let purging = matches!(op, Operation::Purge);
        let (change, applied) = self.store.manage(id, op).await?;
        self.hot.forget(id);
        self.dispatch(applied);
        // A resumed instance may have work waiting in its inbox.
        self.notify();
        DurableError::refused(change, id, purging)
    }
}

/// An id no instance can have (a NUL, which no start lets in) is answered
/// as unknown before the store is asked: PostgreSQL's text refuses it, and
/// the caller would be told the store failed.
fn never_stored(id: &str) -> Result<(), DurableError> {
    match id.contains('\0') {
        true => Err(DurableError::InstanceNotFound(
            id.escape_debug().to_string(),
        )),
        false => Ok(()),
    }
}
