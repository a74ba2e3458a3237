//! Group commit: one writer task takes every write waiting at the moment
//! (episode ends, task results, starts, raises, management operations) and
//! commits them in a single transaction, each in its own savepoint.
//!
//! SQLite has one writer at a time, and each statement costs a round trip to
//! the connection's thread; a transaction per write makes concurrent
//! instances queue for the write lock one BEGIN/COMMIT at a time. Batching
//! shares those between all writes ready together, and a failing write rolls
//! back to its savepoint without taking the others down. Each write reads the
//! instance inside the transaction and asks the core what to do, so a
//! decision never rests on a stale read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use sqlx::{SqliteConnection, SqlitePool};
use tokio::sync::{mpsc, oneshot};

use super::apply::{apply, create, Applied, Target};
use super::instances::{inbox_size, load, task_pending};
use super::{now_ms, StoreError};
use crate::core::effects::Effect;
use crate::core::instance::NewInstance;
use crate::core::lifecycle::task_done::{self, Attempt, Settled};
use crate::core::lifecycle::{purge, raise, resume, suspend, terminate, Change, Decision};
use crate::core::limits::{LimitError, Limits};

/// Writes committed in one transaction at most.
const MAX_BATCH: usize = 256;

/// A management operation on one instance.
#[derive(Debug, Clone)]
pub enum Operation {
    Suspend,
    Resume,
    Terminate { reason: String },
    Purge,
}

/// One write, decided inside the transaction that commits it.
#[derive(Clone)]
pub enum Write {
    /// An episode's effects, applied only if the instance is still in the
    /// execution and an active status the episode ran on.
    Episode {
        target: Target,
        effects: Vec<Effect>,
    },
    TaskDone {
        instance: String,
        attempt: Attempt,
        result: Result<String, String>,
        limits: Arc<Limits>,
    },
    Start(NewInstance),
    Raise {
        instance: String,
        name: String,
        payload: String,
        limits: Arc<Limits>,
    },
    Manage {
        instance: String,
        op: Operation,
    },
}

/// What a write did.
#[derive(Debug)]
pub enum Written {
    /// `None` when the episode no longer applied (terminated, suspended or
    /// restarted meanwhile): nothing was written.
    Episode(Option<Applied>),
    TaskDone(TaskOutcome, Applied),
    /// `None` when the id is held by an unfinished instance.
    Start(Option<Applied>),
    Raise(Result<Change, LimitError>, Applied),
    Manage(Change, Applied),
}

/// What became of a task's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskOutcome {
    Delivered,
    Retrying,
    Dropped,
}

type Job = (Write, oneshot::Sender<Result<Written, StoreError>>);

#[derive(Clone)]
pub struct Committer {
    jobs: mpsc::UnboundedSender<Job>,
    stats: Arc<Stats>,
}

#[derive(Default)]
struct Stats {
    writes: AtomicU64,
    transactions: AtomicU64,
}

impl Committer {
    /// Starts the writer task on the current tokio runtime.
    pub fn start(pool: SqlitePool) -> Self {
        let (jobs, queue) = mpsc::unbounded_channel();
        let stats = Arc::new(Stats::default());
        tokio::spawn(write_loop(pool, queue, stats.clone()));
        Self { jobs, stats }
    }

    pub async fn commit(&self, write: Write) -> Result<Written, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send((write, reply))
            .map_err(|_| StoreError::Write("the store is closed".into()))?;
        answer
            .await
            .map_err(|_| StoreError::Write("the store's writer stopped".into()))?
    }

    /// (writes committed, transactions used).
    pub fn stats(&self) -> (u64, u64) {
        (
            self.stats.writes.load(Ordering::Relaxed),
            self.stats.transactions.load(Ordering::Relaxed),
        )
    }
}

async fn write_loop(pool: SqlitePool, mut queue: mpsc::UnboundedReceiver<Job>, stats: Arc<Stats>) {
    while let Some(first) = queue.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let (writes, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let count = writes.len() as u64;
        let results = write_batch(&pool, writes).await;
        stats.writes.fetch_add(count, Ordering::Relaxed);
        stats.transactions.fetch_add(1, Ordering::Relaxed);
        for (reply, result) in replies.into_iter().zip(results) {
            let _ = reply.send(result);
        }
    }
}

/// Writes a batch in one transaction. Most batches have no failing write, so
/// they run without savepoints (two statements fewer per write); if one
/// fails, the batch is rolled back and written again with a savepoint per
/// write, so that the failure spoils nothing else. Decisions are made inside
/// the transaction, so writing again decides again, on the same state.
async fn write_batch(pool: &SqlitePool, writes: Vec<Write>) -> Vec<Result<Written, StoreError>> {
    let count = writes.len();
    let mut tx = match pool.begin_with("BEGIN IMMEDIATE").await {
        Ok(tx) => tx,
        Err(e) => return all_failed(count, &e),
    };
    let now = now_ms();
    let mut results = Vec::with_capacity(count);
    let mut failed = false;
    for write in &writes {
        match write_one(&mut tx, write.clone(), now).await {
            Ok(written) => results.push(Ok(written)),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    if !failed {
        return match tx.commit().await {
            Ok(()) => results,
            Err(e) => all_failed(count, &e),
        };
    }
    if let Err(e) = tx.rollback().await {
        return all_failed(count, &e);
    }
    write_isolated(pool, writes).await
}

/// The slow path: each write in its own savepoint.
async fn write_isolated(pool: &SqlitePool, writes: Vec<Write>) -> Vec<Result<Written, StoreError>> {
    let count = writes.len();
    let mut tx = match pool.begin_with("BEGIN IMMEDIATE").await {
        Ok(tx) => tx,
        Err(e) => return all_failed(count, &e),
    };
    let now = now_ms();
    let mut results = Vec::with_capacity(count);
    for write in writes {
        if let Err(e) = sqlx::query("SAVEPOINT write").execute(&mut *tx).await {
            return all_failed(count, &e);
        }
        let result = write_one(&mut tx, write, now).await;
        if result.is_err() {
            if let Err(e) = sqlx::query("ROLLBACK TO write").execute(&mut *tx).await {
                return all_failed(count, &e);
            }
        }
        if let Err(e) = sqlx::query("RELEASE write").execute(&mut *tx).await {
            return all_failed(count, &e);
        }
        results.push(result);
    }
    match tx.commit().await {
        Ok(()) => results,
        Err(e) => all_failed(count, &e),
    }
}

async fn write_one(
    tx: &mut SqliteConnection,
    write: Write,
    now: i64,
) -> Result<Written, StoreError> {
    match write {
        Write::Episode { target, effects } => {
            let current = load(tx, &target.id).await?;
            let Some(current) = current
                .filter(|c| c.state.execution == target.execution && c.state.status.is_active())
            else {
                return Ok(Written::Episode(None));
            };
            let journal_len = current.state.history.events;
            Ok(Written::Episode(Some(
                apply(tx, &target, journal_len, effects, now).await?,
            )))
        }
        Write::TaskDone {
            instance,
            attempt,
            result,
            limits,
        } => {
            let Some(current) = load(tx, &instance).await? else {
                return Ok(Written::TaskDone(TaskOutcome::Dropped, Applied::default()));
            };
            let pending = task_pending(tx, &instance, &attempt).await?;
            let (outcome, effects) = match task_done::decide(
                Some(&current.state),
                pending,
                &attempt,
                result,
                now,
                &limits,
            ) {
                Settled::Delivered(effects) => (TaskOutcome::Delivered, effects),
                Settled::Retrying(effects) => (TaskOutcome::Retrying, effects),
                Settled::Dropped => (TaskOutcome::Dropped, Vec::new()),
            };
            let target = Target {
                id: instance,
                execution: attempt.execution,
                name: current.name,
                digest: current.digest,
            };
            let journal_len = current.state.history.events;
            Ok(Written::TaskDone(
                outcome,
                apply(tx, &target, journal_len, effects, now).await?,
            ))
        }
        Write::Start(new) => {
            let id = new.id.clone();
            Ok(Written::Start(match create(tx, new, now).await? {
                Ok(()) => Some(Applied {
                    tasks: Vec::new(),
                    wake: vec![id],
                }),
                Err(()) => None,
            }))
        }
        Write::Raise {
            instance,
            name,
            payload,
            limits,
        } => {
            let current = load(tx, &instance).await?;
            let waiting = match &current {
                Some(_) => inbox_size(tx, &instance).await?,
                None => Default::default(),
            };
            match raise::decide(
                current.as_ref().map(|c| &c.state),
                &name,
                &payload,
                waiting,
                &limits,
            ) {
                Ok(decision) => {
                    let (change, applied) = decide_and_apply(tx, current, decision, now).await?;
                    Ok(Written::Raise(Ok(change), applied))
                }
                Err(refused) => Ok(Written::Raise(Err(refused), Applied::default())),
            }
        }
        Write::Manage { instance, op } => {
            let current = load(tx, &instance).await?;
            let state = current.as_ref().map(|c| &c.state);
            let decision = match &op {
                Operation::Suspend => suspend::decide(state),
                Operation::Resume => resume::decide(state),
                Operation::Terminate { reason } => terminate::decide(state, reason),
                Operation::Purge => purge::decide(state),
            };
            let (change, applied) = decide_and_apply(tx, current, decision, now).await?;
            Ok(Written::Manage(change, applied))
        }
    }
}

async fn decide_and_apply(
    tx: &mut SqliteConnection,
    current: Option<super::instances::Loaded>,
    decision: Decision,
    now: i64,
) -> Result<(Change, Applied), StoreError> {
    let applied = match current {
        Some(c) if !decision.effects.is_empty() => {
            let target = Target {
                id: c.state.id.clone(),
                execution: c.state.execution,
                name: c.name,
                digest: c.digest,
            };
            apply(tx, &target, c.state.history.events, decision.effects, now).await?
        }
        _ => Applied::default(),
    };
    Ok((decision.change, applied))
}

/// Every write of a batch failed with the same store error.
fn all_failed(count: usize, error: &sqlx::Error) -> Vec<Result<Written, StoreError>> {
    (0..count)
        .map(|_| Err(StoreError::Write(error.to_string())))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::core::effects::Effect;
    use crate::core::instance::RuntimeStatus;
    use crate::core::lifecycle::task_done::Attempt;
    use crate::core::limits::Limits;
    use crate::store::test_fixtures::new;
    use crate::store::{Operation, Store, StoreError, TaskOutcome};

    async fn store() -> Result<(tempfile::TempDir, Store), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let store = Store::open(&format!("sqlite://{}", dir.path().join("t.db").display())).await?;
        Ok((dir, store))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_share_transactions_and_all_apply() -> Result<(), StoreError> {
        let (_dir, store) = store().await?;
        let starts: Vec<_> = (0..200)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move { store.start(new(&format!("i{i}"))).await })
            })
            .collect();
        for start in starts {
            let applied = start
                .await
                .map_err(|e| StoreError::Write(e.to_string()))??;
            assert!(applied.is_some());
        }
        for i in 0..200 {
            let loaded = store.load(&format!("i{i}")).await?;
            assert_eq!(loaded.map(|l| l.state.status), Some(RuntimeStatus::Pending));
        }
        let (writes, transactions) = store.commit_stats();
        assert_eq!(writes, 200);
        assert!(
            transactions < 200,
            "200 concurrent starts used {transactions} transactions"
        );
        Ok(())
    }

    #[tokio::test]
    async fn an_episode_of_a_terminated_incarnation_is_not_applied_to_a_recreated_one(
    ) -> Result<(), StoreError> {
        let (_dir, store) = store().await?;
        store.start(new("x")).await?;
        let old = store
            .load("x")
            .await?
            .map(|l| l.state.execution)
            .unwrap_or(0);
        store
            .manage(
                "x",
                Operation::Terminate {
                    reason: "stop".into(),
                },
            )
            .await?;
        store.start(new("x")).await?;
        let target = crate::store::Target {
            id: "x".into(),
            execution: old,
            name: "o".into(),
            digest: "d".into(),
        };
        let complete = vec![Effect::SetStatus {
            status: RuntimeStatus::Completed,
            output: Some("1".into()),
            custom_status: None,
        }];
        assert!(store.commit_episode(target, complete).await?.is_none());
        let status = store.load("x").await?.map(|l| l.state.status);
        assert_eq!(
            status,
            Some(RuntimeStatus::Pending),
            "the new incarnation is untouched"
        );

        let attempt = Attempt {
            execution: old,
            task: 0,
            attempt: 0,
            retry: None,
        };
        let (outcome, applied) = store
            .task_done("x", attempt, Ok("1".into()), Arc::new(Limits::default()))
            .await?;
        assert_eq!(outcome, TaskOutcome::Dropped);
        assert!(applied.wake.is_empty());
        Ok(())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_write_spoils_nothing_else_in_its_batch() -> Result<(), StoreError> {
        let (_dir, store) = store().await?;
        for id in ["bad", "taken", "g0", "g1", "g2", "g3"] {
            store.start(new(id)).await?;
        }
        let execution = |id: &'static str| {
            let store = store.clone();
            async move { Ok::<_, StoreError>(store.load(id).await?.map_or(0, |l| l.state.execution)) }
        };
        let target = |id: &str, execution: i64| crate::store::Target {
            id: id.into(),
            execution,
            name: "o".into(),
            digest: "d".into(),
        };
        let done = || Effect::SetStatus {
            status: RuntimeStatus::Completed,
            output: Some("1".into()),
            custom_status: None,
        };
        // Completes, then creates an instance over a running one: the store refuses.
        let bad = vec![done(), Effect::Create(new("taken"))];
        let mut handles = vec![{
            let store = store.clone();
            let t = target("bad", execution("bad").await?);
            tokio::spawn(async move { store.commit_episode(t, bad).await })
        }];
        for id in ["g0", "g1", "g2", "g3"] {
            let store = store.clone();
            let t = target(id, execution(id).await?);
            handles.push(tokio::spawn(async move {
                store.commit_episode(t, vec![done()]).await
            }));
        }
        let mut results = Vec::new();
        for handle in handles {
            results.push(handle.await.map_err(|e| StoreError::Write(e.to_string()))?);
        }
        assert!(results[0].is_err(), "the bad write fails");
        assert!(results[1..].iter().all(|r| matches!(r, Ok(Some(_)))));
        let status = |id: &'static str| {
            let store = store.clone();
            async move { Ok::<_, StoreError>(store.load(id).await?.map(|l| l.state.status)) }
        };
        assert_eq!(
            status("bad").await?,
            Some(RuntimeStatus::Pending),
            "nothing of it was written"
        );
        for id in ["g0", "g1", "g2", "g3"] {
            assert_eq!(status(id).await?, Some(RuntimeStatus::Completed));
        }
        Ok(())
    }
}
