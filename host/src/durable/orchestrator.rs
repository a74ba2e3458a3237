//! Owns the life of instances: starting them, running their episodes one at a
//! time per instance, running their tasks, firing timers, and the management
//! operations (raise, suspend, resume, terminate, purge).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::journal::Call;
use super::tasks::{self, Settled};
use super::{episode, DurableError};
use crate::registry::Registry;
use crate::runs::Runs;
use crate::runtime::{LoadedComponent, Runtime};
use crate::store::{now_ms, Change, NewInstance, Store, StoreError, TaskRow};
use crate::workers::{drain, KeyedWorkers};

const MAX_CONCURRENT_EPISODES: usize = 32;

#[derive(Debug, Clone)]
pub struct OrchestratorConfig {
    /// Largest orchestration input or output, in bytes.
    pub max_payload_bytes: usize,
}

pub struct Orchestrator {
    pub(super) store: Store,
    pub(super) registry: Arc<Registry>,
    pub(super) runtime: Arc<Runtime>,
    pub(super) runs: Arc<Runs>,
    pub(super) config: OrchestratorConfig,
    instances: KeyedWorkers<String>,
    tasks_in_flight: Mutex<HashSet<(String, u32)>>,
    /// Bounds episodes running at once, so a burst of thousands of instances
    /// queues here rather than in the store's connection pool.
    pub(super) episodes: tokio::sync::Semaphore,
    wake: Notify,
    pub(super) stopping: CancellationToken,
    tracker: TaskTracker,
}

impl Orchestrator {
    pub fn new(
        store: Store,
        registry: Arc<Registry>,
        runtime: Arc<Runtime>,
        runs: Arc<Runs>,
        config: OrchestratorConfig,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            registry,
            runtime,
            runs,
            config,
            instances: KeyedWorkers::default(),
            tasks_in_flight: Mutex::new(HashSet::new()),
            episodes: tokio::sync::Semaphore::new(MAX_CONCURRENT_EPISODES),
            wake: Notify::new(),
            stopping: CancellationToken::new(),
            tracker: TaskTracker::new(),
        })
    }

    /// Starts the scheduler: it resumes whatever the store holds (instances
    /// with work, due tasks, timers) and runs until shutdown.
    pub fn start(self: &Arc<Self>) {
        let this = self.clone();
        self.tracker.spawn(async move { this.schedule().await });
    }

    /// Something changed in the store: look for work now.
    pub fn notify(&self) {
        self.wake.notify_one();
    }

    async fn schedule(self: Arc<Self>) {
        loop {
            let now = now_ms();
            match self.store.instances_with_work(now, 10_000).await {
                Ok(ids) => ids.into_iter().for_each(|id| self.wake_instance(id)),
                Err(e) => tracing::error!(error = %e, "could not read instances with work"),
            }
            match self.store.due_tasks(now, 1_000).await {
                Ok(rows) => rows.into_iter().for_each(|row| self.spawn_task(row)),
                Err(e) => tracing::error!(error = %e, "could not read due tasks"),
            }
            let next = self.store.next_due_after(now).await.ok().flatten();
            let pause = next.map_or(1_000, |t| (t - now).clamp(1, 1_000));
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(u64::try_from(pause).unwrap_or(1_000))) => {}
                () = self.stopping.cancelled() => return,
            }
        }
    }

    fn wake_instance(self: &Arc<Self>, id: String) {
        if self.stopping.is_cancelled() || !self.instances.claim(&id) {
            return;
        }
        let this = self.clone();
        self.tracker.spawn(async move {
            loop {
                if this.stopping.is_cancelled() {
                    this.instances.release(&id);
                    return;
                }
                let ran = match this.episodes.acquire().await {
                    Ok(_permit) => episode::run(&this, &id).await,
                    Err(_) => return,
                };
                match ran {
                    Ok(follow_up) => {
                        // Straight to work: no scheduler pass between a step and the next.
                        follow_up.tasks.into_iter().for_each(|row| this.spawn_task(row));
                        follow_up.wake.into_iter().for_each(|other| this.wake_instance(other));
                    }
                    Err(e) => tracing::error!(instance_id = %id, error = %e, "episode failed; retrying on the next wake"),
                }
                if !this.instances.look_again(&id) {
                    return;
                }
            }
        });
    }

    fn spawn_task(self: &Arc<Self>, row: TaskRow) {
        let key = (row.instance_id.clone(), row.task);
        {
            let mut in_flight = self
                .tasks_in_flight
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if self.stopping.is_cancelled() || !in_flight.insert(key.clone()) {
                return;
            }
        }
        let this = self.clone();
        self.tracker.spawn(async move {
            let instance = row.instance_id.clone();
            let settled = tasks::run(&this, row).await;
            this.tasks_in_flight
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key);
            // Wake only who must act: a full scheduler pass per finished
            // task would re-scan the store for every step of every instance.
            match settled {
                Settled::Delivered => this.wake_instance(instance),
                Settled::Retrying => this.notify(),
                Settled::Left => {}
            }
        });
    }

    /// Starts an instance of orchestration `name`; returns its id.
    pub async fn start_instance(
        self: &Arc<Self>,
        name: &str,
        instance_id: Option<String>,
        input: String,
    ) -> Result<String, DurableError> {
        let served = self.registry.orchestration(name).ok_or_else(|| {
            DurableError::UnknownOrchestration {
                name: name.to_string(),
                registered: self.registry.orchestration_names(),
            }
        })?;
        self.check_size("input", &input)?;
        let id = instance_id.unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        if id.is_empty() || id.len() > 256 || id.contains('/') {
            return Err(DurableError::BadInstanceId);
        }
        let created = self
            .store
            .create_instance(&NewInstance {
                id: &id,
                name,
                input: &input,
                component_digest: &served.component.digest,
                parent: None,
            })
            .await?;
        if !created {
            return Err(DurableError::AlreadyExists(id));
        }
        tracing::info!(instance_id = %id, orchestration = %name, "instance started");
        self.wake_instance(id.clone());
        Ok(id)
    }

    /// The version each sub-orchestration in `calls` starts on: the parent's
    /// own version when it holds the orchestration (a family of orchestrations
    /// shipped together stays together), else the one served now. A name
    /// served by nobody gets no entry; the child then fails with that reason.
    pub(super) fn child_digests(
        &self,
        parent: Option<&LoadedComponent>,
        calls: &[Call],
    ) -> HashMap<String, String> {
        let mut digests = HashMap::new();
        for call in calls {
            let Call::CallOrchestration { name, .. } = call else {
                continue;
            };
            if parent.is_some_and(|p| p.manifest.orchestration(name).is_some()) {
                continue;
            }
            if let Some(served) = self.registry.orchestration(name) {
                digests.insert(name.clone(), served.component.digest.clone());
            }
        }
        digests
    }

    pub(super) fn check_size(&self, what: &'static str, payload: &str) -> Result<(), DurableError> {
        let limit = self.config.max_payload_bytes;
        if payload.len() > limit {
            return Err(DurableError::TooLarge {
                what,
                size: payload.len(),
                limit,
            });
        }
        Ok(())
    }

    pub async fn raise_event(
        &self,
        id: &str,
        event: &str,
        payload: &str,
    ) -> Result<Change, DurableError> {
        self.check_size("event payload", payload)?;
        let change = self.store.raise_event(id, event, payload).await?;
        self.notify();
        Ok(change)
    }

    pub async fn set_suspended(&self, id: &str, suspended: bool) -> Result<Change, StoreError> {
        let change = self.store.set_suspended(id, suspended).await?;
        self.notify();
        Ok(change)
    }

    pub async fn terminate(self: &Arc<Self>, id: &str, reason: &str) -> Result<Change, StoreError> {
        let (change, parent) = self.store.terminate(id, reason).await?;
        if let Some(parent) = parent {
            self.wake_instance(parent);
        }
        Ok(change)
    }

    /// Stops scheduling and waits up to `grace` for episodes and tasks under
    /// way; unfinished work stays in the store for the next start.
    pub async fn shutdown(&self, grace: Duration) {
        if !drain(&self.stopping, &self.tracker, grace).await {
            tracing::warn!(grace = ?grace, "orchestration work still running after the grace period; it resumes at next start");
        }
    }
}
