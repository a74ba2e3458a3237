//! Owns the life of instances: starting them, running their episodes one at a
//! time per instance, running their tasks, firing timers, and the management
//! operations (raise, suspend, resume, terminate, purge).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::episode;
use super::episode_slot::Slot;
use super::fan_out;
use super::for_a_worker::ForAWorker;
use super::given_back::GivenBack;
use super::hot::HotInstances;
use super::in_flight::{InHand, ResultsInHand, TaskRunning, TasksInFlight};
use super::in_hand_episode;
use super::pace::ContinuePace;
use super::replay_check::{CheckLimits, OnNewVersion, ReplayChecks};
use super::tasks;
use crate::core::failure::{TaskError, TaskOutcome};
use crate::core::journal::Call;
use crate::core::lifecycle::task_done::Attempt;
use crate::core::lifecycle::Change;
use crate::core::limits::{LimitError, Limits};
use crate::health::SchedulerReads;
use crate::registry::Registry;
use crate::runs::Runs;
use crate::sdk_workers::{Patience, SdkWorkers};
use crate::store::{
    now_ms, Applied, DueTask, Store, StoreError, TaskFate, TaskRow, UnreadableTask, Wake,
};
use crate::wasm::Runtime;
use crate::workers::{drain, KeyedWorkers};

const MAX_CONCURRENT_EPISODES: usize = 32;

/// Due tasks one scheduler pass starts at most, besides those running.
const DUE_AT_ONCE: usize = 1_000;

/// While the scheduler's reads keep failing, one ERROR line per this many
/// passes (about a minute), not one a second.
const FAILING_PASSES_PER_LOG: u32 = 60;

/// The longest the scheduler sleeps between passes (ms): what it cannot be
/// told of (a row another host wrote, a notification lost) waits no longer.
const LONGEST_PAUSE_MS: i64 = 1_000;

#[derive(Debug, Clone)]
pub struct OrchestratorConfig {
    pub limits: Arc<Limits>,
    /// Longest one episode of orchestration code may run, in wall-clock time.
    pub episode_timeout: Duration,
    /// Memory for hot instances' state and journals, in bytes.
    pub hot_budget_bytes: usize,
    /// How long an activity no component serves waits for a Durable Task
    /// SDK worker (zero unless the gRPC endpoint is served), and for its
    /// answer.
    pub sdk_patience: Patience,
    /// What a replay check of a new version does with compatible instances.
    pub on_new_version: OnNewVersion,
    pub replay_check: CheckLimits,
}

pub struct Orchestrator {
    pub(super) store: Store,
    pub(super) registry: Arc<Registry>,
    pub(super) runtime: Arc<Runtime>,
    pub(super) runs: Arc<Runs>,
    pub(super) config: OrchestratorConfig,
    instances: KeyedWorkers<String>,
    /// State, journals and inboxes of recently run instances.
    pub(super) hot: Arc<HotInstances>,
    /// Every task running in this process, until its result is stored.
    tasks_in_flight: TasksInFlight,
    /// Results not yet stored, waiting for their instance's worker.
    results_in_hand: ResultsInHand,
    /// Bounds episodes running at once, so a burst of thousands of instances
    /// queues here rather than in the store's connection pool.
    pub(super) episodes: Arc<tokio::sync::Semaphore>,
    wake: Notify,
    /// When the scheduler's sleep ends (ms): something armed to come due
    /// sooner lowers it, and `due_sooner` tells the sleeping scheduler.
    planned_wake: AtomicI64,
    due_sooner: Notify,
    pub(super) stopping: CancellationToken,
    pub(super) tracker: TaskTracker,
    /// Whether this process runs episodes and tasks (not an HTTP-only front).
    works: bool,
    /// SDK workers connected over gRPC: they run the activities no
    /// component serves.
    pub(super) sdk_workers: Arc<SdkWorkers>,
    /// Items SDK workers gave back, in a row.
    pub(super) given_back: GivenBack,
    /// SDK instances no connected worker runs: not offered until one does.
    pub(super) for_a_worker: ForAWorker,
    /// Whether the scheduler's passes can read the store (health asks).
    scheduler_reads: Arc<SchedulerReads>,
    /// How fast each instance may continue as new.
    pub(super) continue_pace: ContinuePace,
    /// Replay checks of new versions, and their last reports.
    pub(super) replay_checks: ReplayChecks,
}

impl Orchestrator {
    pub fn new(
        store: Store,
        registry: Arc<Registry>,
        runtime: Arc<Runtime>,
        runs: Arc<Runs>,
        config: OrchestratorConfig,
        works: bool,
    ) -> Arc<Self> {
        let shared = store.owner_id().is_some();
        let hot = Arc::new(HotInstances::new(
            config.hot_budget_bytes,
            shared,
            store.hub(),
        ));
        let sink = hot.clone();
        store.on_inbox_rows(Arc::new(move |rows| sink.deliver(rows)));
        let sdk_workers = SdkWorkers::new(config.sdk_patience);
        let replay_checks = ReplayChecks::new(config.on_new_version, config.replay_check.clone());
        Arc::new(Self {
            store,
            registry,
            runtime,
            runs,
            instances: KeyedWorkers::default(),
            hot,
            config,
            tasks_in_flight: TasksInFlight::default(),
            results_in_hand: ResultsInHand::default(),
            episodes: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_EPISODES)),
            wake: Notify::new(),
            planned_wake: AtomicI64::new(i64::MIN),
            due_sooner: Notify::new(),
            stopping: CancellationToken::new(),
            tracker: TaskTracker::new(),
            works,
            sdk_workers,
            given_back: GivenBack::default(),
            for_a_worker: ForAWorker::default(),
            scheduler_reads: Arc::default(),
            continue_pace: ContinuePace::default(),
            replay_checks,
        })
    }

    /// Whether the scheduler's passes can read the store, for health.
    pub fn scheduler_reads(&self) -> Arc<SchedulerReads> {
        self.scheduler_reads.clone()
    }

    /// The Durable Task SDK workers connected here (the gRPC edge adds them).
    pub fn sdk_workers(&self) -> &Arc<SdkWorkers> {
        &self.sdk_workers
    }

    /// Whether this host runs episodes and tasks (not a `--no-worker` front).
    pub fn works(&self) -> bool {
        self.works
    }

    /// Starts the scheduler: it resumes whatever the store holds (instances
    /// with work, due tasks, timers) and runs until shutdown.
    pub fn start(self: &Arc<Self>) {
        if !self.works {
            return;
        }
        let this = self.clone();
        self.tracker.spawn(async move { this.schedule().await });
        self.check_new_versions();
        if let Some(wakes) = self.store.wakes() {
            let this = self.clone();
            self.tracker
                .spawn(async move { this.hear_other_hosts(wakes).await });
        }
    }

    /// Another host gave instances something new: a hot image of them is
    /// stale (the row reached the store, not this host's inbox sink).
    async fn hear_other_hosts(self: Arc<Self>, mut wakes: tokio::sync::broadcast::Receiver<Wake>) {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            let wake = tokio::select! {
                wake = wakes.recv() => wake,
                () = self.stopping.cancelled() => return,
            };
            match wake {
                // One that runs here has its episode run at once (on what
                // is stored); for the others the scheduler looks, and
                // claims those no live host has.
                Ok(Wake::Instances(ids)) => self.heard_of(ids, |id| self.hot.forget(id)),
                // Inbox rows only: an image at rest is kept, its inbox read
                // again by its next episode (one read on the pool instead of
                // the whole instance on the writer's connection).
                Ok(Wake::Posted(ids)) => self.heard_of(ids, |id| self.hot.inbox_changed(id)),
                Ok(Wake::Everything) => self.notify(),
                Ok(Wake::Due(at)) => self.wake_at(at),
                Ok(
                    Wake::Sessions
                    | Wake::Assigned(_)
                    | Wake::RunFinished(..)
                    | Wake::CancelRequested(..),
                ) => {}
                // Missed some: any image may be stale.
                Err(RecvError::Lagged(_)) => {
                    self.hot.clear();
                    self.notify();
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// Instances another host gave something new: those `held` here (hot
    /// or under way, told of the news) run now, the others are looked up.
    fn heard_of(self: &Arc<Self>, ids: Vec<String>, held: impl Fn(&str) -> bool) {
        let (here, cold): (Vec<String>, Vec<String>) = ids.into_iter().partition(|id| held(id));
        here.into_iter().for_each(|id| self.wake_instance(id));
        self.look_up(cold);
    }

    /// Instances another host gave something new that are not hot here:
    /// those this host owns run now; one that no live host owns (new, or a
    /// dead host's) wakes the scheduler, whose pass claims it. Most are
    /// another worker's: a pass for each notification read every instance
    /// with work, several milliseconds each, dozens of times a second.
    fn look_up(self: &Arc<Self>, ids: Vec<String>) {
        if ids.is_empty() {
            return;
        }
        let this = self.clone();
        self.tracker.spawn(async move {
            let store = &this.store;
            match store.within("whose instances", store.whose(&ids)).await {
                Ok((mine, orphaned)) => {
                    mine.into_iter().for_each(|id| this.wake_instance(id));
                    if orphaned {
                        this.notify();
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not look up instances another host named; looking at all");
                    this.notify();
                }
            }
        });
    }

    /// Something changed in the store: look for work now.
    pub fn notify(&self) {
        self.wake.notify_one();
    }

    /// Something comes due at `at` (ms): a scheduler asleep until later
    /// wakes then instead (a 50 ms timer fired a second late when its
    /// commit came after the pass that planned the sleep).
    fn wake_at(&self, at: i64) {
        if at < self.planned_wake.fetch_min(at, Ordering::AcqRel) {
            self.due_sooner.notify_one();
        }
    }

    async fn schedule(self: Arc<Self>) {
        loop {
            let now = now_ms();
            let store = &self.store;
            let mut failed = None;
            match store
                .within(
                    "the instances with work",
                    store.instances_with_work(now, 10_000),
                )
                .await
            {
                Ok(ids) => fan_out::each(ids, |id| self.wake_instance(id)).await,
                Err(e) => failed = Some(format!("could not read instances with work: {e}")),
            }
            let running_here = self.tasks_in_flight.len();
            match store
                .within(
                    "the due tasks",
                    store.due_tasks(now, DUE_AT_ONCE, running_here),
                )
                .await
            {
                Ok(due) => {
                    fan_out::each(due, |due| match due {
                        DueTask::Ready(row) => self.spawn_task(row, false),
                        DueTask::Unreadable(bad) => self.fail_unreadable(bad),
                    })
                    .await
                }
                Err(e) => failed = Some(format!("could not read due tasks: {e}")),
            }
            self.count_pass(failed);
            // Set before the read: what is armed from here on and due
            // sooner than the read finds lowers it (`wake_at`).
            self.planned_wake
                .store(now + LONGEST_PAUSE_MS, Ordering::Release);
            let next = store
                .within("the next due time", store.next_due_after(now))
                .await
                .ok()
                .flatten();
            if let Some(next) = next {
                self.planned_wake
                    .fetch_min(next.max(now + 1), Ordering::AcqRel);
            }
            if !self.sleep_until_planned().await {
                return;
            }
        }
    }

    /// Sleeps until the planned wake, which `wake_at` may bring forward
    /// meanwhile, or until a pass is asked for. False when stopping.
    async fn sleep_until_planned(&self) -> bool {
        loop {
            let until = self.planned_wake.load(Ordering::Acquire);
            let pause = u64::try_from(until - now_ms()).unwrap_or(0);
            tokio::select! {
                () = self.wake.notified() => return true,
                () = self.due_sooner.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(pause)) => return true,
                () = self.stopping.cancelled() => return false,
            }
        }
    }

    /// Records whether a scheduler pass could read the store. A read that
    /// keeps failing is logged at its first failure and then once a
    /// minute, not every second, and health reports it after a few passes.
    fn count_pass(&self, failed: Option<String>) {
        match failed {
            None => {
                let were = self.scheduler_reads.passed();
                if were > 0 {
                    tracing::info!(failed_passes = were, "the scheduler reads the store again");
                }
            }
            Some(reason) => {
                let failing = self.scheduler_reads.failed(reason.clone());
                if failing % FAILING_PASSES_PER_LOG == 1 {
                    tracing::error!(failed_passes = failing, error = %reason, "the scheduler could not read the store; timers and delayed retries wait");
                }
            }
        }
    }

    /// A due task whose stored call cannot be read is failed with the
    /// reason, as a task that ran and failed is (its instance's code sees
    /// it; no retry: the call it would retry is what cannot be read), so it
    /// leaves the due tasks once and stops no other. Logged once: its row
    /// is gone when the failure is stored.
    fn fail_unreadable(self: &Arc<Self>, bad: UnreadableTask) {
        if !self.works || self.stopping.is_cancelled() {
            return;
        }
        let key = (bad.instance_id.clone(), bad.execution, bad.task);
        let Some(running) = self.tasks_in_flight.start(key) else {
            return;
        };
        tracing::error!(instance_id = %bad.instance_id, execution = bad.execution, task = bad.task, attempt = bad.attempt, orchestration = %bad.orchestration, error = %bad.reason, "a due task could not be read from the store; it is failed with the reason");
        crate::metrics::task_unreadable(&bad.orchestration);
        let attempt = Attempt {
            execution: bad.execution,
            task: bad.task,
            attempt: bad.attempt,
            retry: None,
        };
        let result: TaskOutcome = Err(TaskError::from(format!(
            "the stored task could not be read: {}",
            bad.reason
        )));
        let this = self.clone();
        self.tracker.spawn(async move {
            this.deliver(&bad.instance_id, attempt, result, running)
                .await;
        });
    }

    fn wake_instance(self: &Arc<Self>, id: String) {
        if !self.works
            || self.stopping.is_cancelled()
            || self.for_a_worker.still_waits(&id, &self.sdk_workers)
            || !self.instances.claim(&id)
        {
            return;
        }
        self.run_instance(id);
    }

    /// Runs the episodes of an instance the caller claimed, one after the
    /// other while something new arrives. Results held for it go first: one
    /// alone is committed with the episode run on it; several are stored
    /// together, then one episode takes them all.
    fn run_instance(self: &Arc<Self>, id: String) {
        let this = self.clone();
        self.tracker.spawn(async move {
            loop {
                if this.stopping.is_cancelled() {
                    // Results in hand are stored before the host stops, so
                    // their tasks need not run again at the next start.
                    this.store_results_in_hand(&id).await;
                    this.instances.release(&id);
                    return;
                }
                // A tight continue-as-new loop waits for its turn before
                // it takes a slot (see `pace`).
                if let Some(wait) = this.continue_pace.wait(&id) {
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = this.stopping.cancelled() => continue,
                    }
                }
                // Boxed: an instance queued for a permit then costs a small
                // task, not the whole episode's state (a burst of 100,000
                // starts queues 100,000 of them).
                let ran = match this.episodes.clone().acquire_owned().await {
                    Ok(permit) => {
                        let slot = Slot::held(permit);
                        let mut held = this.results_in_hand.take(&id);
                        match held.len() {
                            0 => Box::pin(episode::run(&this, &id, &slot)).await,
                            1 => match held.pop() {
                                Some(one) => {
                                    Box::pin(in_hand_episode::run_on_result(&this, &id, one, &slot)).await
                                }
                                None => Ok(Applied::default()),
                            },
                            _ => Box::pin(in_hand_episode::run_on_results(&this, &id, held, &slot)).await,
                        }
                    }
                    Err(_) => return,
                };
                match ran {
                    // Straight to work: no scheduler pass between a step and the next.
                    Ok(applied) => this.dispatch(applied),
                    Err(e) => tracing::error!(instance_id = %id, error = %e, "episode failed; retrying on the next wake"),
                }
                if !this.instances.look_again(&id) {
                    return;
                }
            }
        });
    }

    /// Stores the results held for `id` as any others, without an episode
    /// (the host is stopping: the instance's next owner runs it).
    async fn store_results_in_hand(&self, id: &str) {
        let held = self.results_in_hand.take(id);
        if held.is_empty() {
            return;
        }
        let (writes, running): (Vec<_>, Vec<_>) = held
            .into_iter()
            .map(|h| ((h.attempt, h.result), h.running))
            .unzip();
        let limits = self.config.limits.clone();
        for result in self.store.tasks_done(id, writes, limits).await {
            if let Err(e) = result {
                tracing::warn!(instance_id = %id, error = %e, "a result in hand could not be stored as the host stops; its task runs again");
            }
        }
        drop(running);
    }

    /// Carries out what a commit asked for: run the tasks it scheduled, wake
    /// the instances it touched (those it created, and this host runs, are
    /// hot from the start).
    pub(super) fn dispatch(self: &Arc<Self>, applied: Applied) {
        if let Some(at) = applied.due {
            self.wake_at(at);
        }
        if self.works {
            let me = self.store.owner_id();
            applied
                .created
                .into_iter()
                .filter(|created| created.owner.as_deref() == me)
                .for_each(|created| self.hot.seed(created));
        }
        let Applied { tasks, wake, .. } = applied;
        // Marked running now, started a chunk at a time (`fan_out`): a
        // scheduler pass meanwhile must not run one of them (and finish it)
        // before its turn here, which would run it again unchecked.
        let tasks: Vec<_> = tasks
            .into_iter()
            .filter_map(|row| self.mark_running(row))
            .collect();
        if fan_out::one_chunk(tasks.len() + wake.len()) {
            tasks
                .into_iter()
                .for_each(|(row, running)| self.spawn_running(row, running, true));
            wake.into_iter().for_each(|id| self.wake_instance(id));
            return;
        }
        let this = self.clone();
        self.tracker.spawn(async move {
            fan_out::each(tasks, |(row, running)| {
                this.spawn_running(row, running, true);
            })
            .await;
            fan_out::each(wake, |id| this.wake_instance(id)).await;
        });
    }

    /// Runs a task unless it already runs here.
    fn spawn_task(self: &Arc<Self>, row: TaskRow, fresh: bool) {
        if let Some((row, running)) = self.mark_running(row) {
            self.spawn_running(row, running, fresh);
        }
    }

    /// The task marked running here, unless it already is (or the host does
    /// not run tasks).
    fn mark_running(&self, row: TaskRow) -> Option<(TaskRow, TaskRunning)> {
        if !self.works || self.stopping.is_cancelled() {
            return None;
        }
        let key = (row.instance_id.clone(), row.execution, row.task);
        let running = self.tasks_in_flight.start(key)?;
        Some((row, running))
    }

    /// Runs a task marked running. One read by a scheduler pass (`fresh`
    /// false) may have finished since that read: it is checked against the
    /// store first, so it never runs twice. Not when the host began to stop
    /// meanwhile: the task stays due in the store for the next start.
    fn spawn_running(self: &Arc<Self>, row: TaskRow, running: TaskRunning, fresh: bool) {
        if self.stopping.is_cancelled() {
            return;
        }
        let this = self.clone();
        self.tracker.spawn(async move {
            let store = &this.store;
            let still_due = fresh
                || match store
                    .within("a task's state", store.task_still_due(&row))
                    .await
                {
                    Ok(due) => due,
                    // Looked at again on the scheduler's next pass.
                    Err(e) => {
                        tracing::warn!(instance_id = %row.instance_id, task = row.task, error = %e, "whether a task is still due could not be read; it is looked at again later");
                        false
                    }
                };
            if still_due {
                this.run_task(&row, running).await;
            }
        });
    }

    async fn run_task(self: &Arc<Self>, row: &TaskRow, running: TaskRunning) {
        let Some(result) = tasks::run(self, row).await.recorded() else {
            return;
        };
        let retry = match &row.call {
            Call::CallActivity { retry, .. }
            | Call::CallAgent { retry, .. }
            | Call::CallRemoteAgent { retry, .. } => *retry,
            _ => None,
        };
        if let Err(error) = &result {
            tracing::info!(instance_id = %row.instance_id, task = row.task, attempt = row.attempt, %error, "task failed");
        }
        let attempt = Attempt {
            execution: row.execution,
            task: row.task,
            attempt: row.attempt,
            retry,
        };
        self.deliver(&row.instance_id, attempt, result, running)
            .await;
    }

    /// Hands a task's outcome to its instance.
    async fn deliver(
        self: &Arc<Self>,
        instance_id: &str,
        attempt: Attempt,
        result: TaskOutcome,
        running: TaskRunning,
    ) {
        let attempt_key = (attempt.execution, attempt.task);
        // The result goes to the instance's worker (started, or told to
        // look again), whose next episode runs on it before it is stored:
        // both are committed at once.
        if !self.stopping.is_cancelled() {
            let in_hand = InHand {
                attempt,
                result,
                running,
            };
            self.results_in_hand.hold(instance_id, in_hand);
            if self.instances.claim(&instance_id.to_string()) {
                self.run_instance(instance_id.to_string());
            }
            return;
        }
        match self
            .store
            .task_done(instance_id, attempt, result, self.config.limits.clone())
            .await
        {
            Ok((outcome, applied)) => {
                drop(running);
                // A retry's next attempt is due later: `applied` says when.
                if outcome == TaskFate::Dropped {
                    tracing::info!(instance_id = %instance_id, execution = attempt_key.0, task = attempt_key.1, "dropped the result of a task the instance no longer waits for")
                }
                self.dispatch(applied);
            }
            Err(e) => {
                tracing::error!(instance_id = %instance_id, task = attempt_key.1, error = %e, "could not record the task's outcome; it runs again")
            }
        }
    }

    /// Raises an event at an instance. One that runs here, hot, gets the
    /// event straight into its next episode, committed with it (unless an
    /// episode of it runs now); any other has it stored in its inbox.
    pub(super) async fn raise(
        self: &Arc<Self>,
        id: &str,
        event: &str,
        payload: &str,
    ) -> Result<(Result<Change, LimitError>, Applied), StoreError> {
        let limits = self.config.limits.clone();
        if !self.works || self.stopping.is_cancelled() || !self.instances.try_claim(&id.to_string())
        {
            return self.store.raise(id, event, payload, limits).await;
        }
        let raised = match self.episodes.clone().acquire_owned().await {
            Ok(permit) => {
                in_hand_episode::raise_on(self, id, event, payload, &Slot::held(permit)).await
            }
            Err(_) => self.store.raise(id, event, payload, limits).await,
        };
        // Whatever arrived meanwhile is the instance's worker's.
        if self.instances.look_again(&id.to_string()) {
            self.run_instance(id.to_string());
        }
        raised
    }

    /// Stops scheduling and waits up to `grace` for episodes and tasks under
    /// way; unfinished work stays in the store for the next start.
    pub async fn shutdown(&self, grace: Duration) {
        // SDK workers cannot answer once the gRPC server stops: what they
        // run now runs again at the next start, and no drain waits for it.
        self.sdk_workers.close();
        if !drain(&self.stopping, &self.tracker, grace).await {
            tracing::warn!(grace = ?grace, "orchestration work still running after the grace period; it resumes at next start");
        }
    }
}
