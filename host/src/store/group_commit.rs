//! Group commit: one writer thread takes every write waiting at the moment
//! (episode ends, task results, starts, raises, management operations) and
//! commits them in a single transaction.
//!
//! Batching shares a BEGIN/COMMIT between all writes ready together. Each
//! write reads the instance inside the transaction and asks the core what to
//! do, so a decision never rests on a stale read. The loop that takes the
//! queue is the database's own: a thread with its own connection for SQLite
//! ([`super::sqlite`]; a caller that finds it idle and nothing queued
//! commits its own light write on its own thread instead), a task with its
//! own connection for PostgreSQL ([`super::postgres`]).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use tokio::sync::{mpsc, oneshot};

use super::commit_queue::{InboxSink, Job, Shared, Stats};
use super::durable_records::{Read, ReadOut, Write, Written};
use super::error::StoreError;
use super::postgres::{self, SharedHub};
use super::sqlite;
use super::writer_health::{WriterCheck, WriterHealth};

/// Writes one [`Committer::commit_all`] call has queued at most at a time:
/// what another caller queues meanwhile waits for no more than these.
const QUEUED_AT_ONCE: usize = 64;

/// The answer to a write handed over by [`Committer::send_together`].
pub(super) type Answer = oneshot::Receiver<Result<Written, StoreError>>;

/// What the writer answered, or why it could not.
pub(super) async fn answered<T>(
    answer: oneshot::Receiver<Result<T, StoreError>>,
) -> Result<T, StoreError> {
    answer
        .await
        .map_err(|_| StoreError::Write("the store's writer stopped".into()))?
}

#[derive(Clone)]
pub struct Committer {
    /// Declared before `here`: the last clone drops its sender first, so
    /// the thread `here` wakes as it drops finds the queue closed.
    jobs: mpsc::UnboundedSender<Job>,
    /// SQLite's writer, which a caller may find idle and commit on
    /// (PostgreSQL's is a task reading the queue: it needs no waking).
    here: Option<Arc<sqlite::WriterHandle>>,
    stats: Arc<Stats>,
    sink: Arc<OnceLock<InboxSink>>,
    health: Arc<WriterHealth>,
}

impl Committer {
    /// The SQLite writer: a thread with its own connection to the database
    /// file at `path` (its schema already migrated).
    pub fn sqlite(path: &Path) -> Result<Self, StoreError> {
        let (mut committer, queue) = Self::new();
        let writer = sqlite::start(path, queue, committer.shared())?;
        committer.here = Some(Arc::new(writer));
        Ok(committer)
    }

    /// The PostgreSQL writer: a task with its own connection to the hub.
    pub async fn postgres(
        options: sqlx::postgres::PgConnectOptions,
        hub: Arc<SharedHub>,
    ) -> Result<Self, StoreError> {
        let (committer, queue) = Self::new();
        postgres::start(options, hub, queue, committer.shared()).await?;
        Ok(committer)
    }

    fn new() -> (Self, mpsc::UnboundedReceiver<Job>) {
        let (jobs, queue) = mpsc::unbounded_channel();
        let committer = Self {
            jobs,
            here: None,
            stats: Arc::new(Stats::default()),
            sink: Arc::new(OnceLock::new()),
            health: Arc::new(WriterHealth::default()),
        };
        (committer, queue)
    }

    fn shared(&self) -> Shared {
        Shared {
            stats: self.stats.clone(),
            sink: self.sink.clone(),
            health: self.health.clone(),
        }
    }

    /// Whether the writer is alive and its batches commit within `deadline`.
    pub fn check(&self, deadline: std::time::Duration) -> WriterCheck {
        self.health.check(deadline)
    }

    /// Where committed inbox rows go from now on (set once; later calls are
    /// ignored).
    pub fn on_inbox_rows(&self, sink: InboxSink) {
        let _ = self.sink.set(sink);
    }

    pub async fn commit(&self, write: Write) -> Result<Written, StoreError> {
        self.ask(|reply| Job::Write(Box::new(write), reply)).await
    }

    pub async fn read(&self, read: Read) -> Result<ReadOut, StoreError> {
        self.ask(|reply| Job::Read(read, reply)).await
    }

    async fn ask<T>(
        &self,
        job: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Job,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        let queued = match &self.here {
            Some(writer) => writer.try_here(vec![job(reply)]).err(),
            None => Some(vec![job(reply)]),
        };
        for job in queued.into_iter().flatten() {
            self.send(job)?;
        }
        answered(answer).await
    }

    /// Hands `writes` to the writer at once, in order: committed here and
    /// now, in one transaction, if the writer is idle; else queued as one
    /// job, which a writer takes into one batch whole. All are handed over
    /// when this returns: what the caller sends next comes after them.
    pub(super) fn send_together(&self, writes: Vec<Write>) -> Vec<Answer> {
        let (writes, answers): (Vec<_>, Vec<_>) = writes
            .into_iter()
            .map(|write| {
                let (reply, answer) = oneshot::channel();
                ((write, reply), answer)
            })
            .unzip();
        let jobs = vec![Job::Writes(writes)];
        let queued = match &self.here {
            Some(writer) => writer.try_here(jobs).err(),
            None => Some(jobs),
        };
        for job in queued.into_iter().flatten() {
            // A closed store drops the job's reply: its answer says so.
            let _ = self.send(job);
        }
        answers
    }

    /// Queues the writes [`QUEUED_AT_ONCE`] at a time (those queued together
    /// share transactions), each group once the one before is answered;
    /// the answers in order.
    ///
    /// Never all at once: the queue is first come, first served, and one
    /// caller's thousands of writes (an instance's 15,000 task results,
    /// coalesced) queued together held every other write, a tenant's step
    /// or agent run, behind them for as long as the writer took to commit
    /// them all (1 s on an idle debug build, tens of seconds on a busy
    /// one). A group at a time, what others queue meanwhile goes in between.
    pub async fn commit_all(&self, writes: Vec<Write>) -> Vec<Result<Written, StoreError>> {
        let mut results = Vec::with_capacity(writes.len());
        let mut writes = writes.into_iter().peekable();
        while writes.peek().is_some() {
            let answers: Vec<_> = writes
                .by_ref()
                .take(QUEUED_AT_ONCE)
                .map(|write| {
                    let (reply, answer) = oneshot::channel();
                    let sent = self.send(Job::Write(Box::new(write), reply)).is_ok();
                    (sent, answer)
                })
                .collect();
            for (sent, answer) in answers {
                results.push(match (sent, answer.await) {
                    (true, Ok(result)) => result,
                    (false, _) => Err(StoreError::Write("the store is closed".into())),
                    (true, Err(_)) => Err(StoreError::Write("the store's writer stopped".into())),
                });
            }
        }
        results
    }

    /// Commits what is queued, then closes the writer's connection; later
    /// writes (from any clone) fail with "the store is closed".
    pub async fn close(&self) {
        let (reply, answer) = oneshot::channel();
        if self.send(Job::Close(reply)).is_ok() {
            let _ = answer.await;
        }
    }

    /// Queues a job for the writer, waking it.
    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.jobs
            .send(job)
            .map_err(|_| StoreError::Write("the store is closed".into()))?;
        if let Some(writer) = &self.here {
            writer.wake();
        }
        Ok(())
    }

    /// (writes committed, transactions used).
    pub fn stats(&self) -> (u64, u64) {
        (
            self.stats.writes.load(Ordering::Relaxed),
            self.stats.transactions.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::Write;
    use crate::core::effects::Effect;
    use crate::core::instance::RuntimeStatus;
    use crate::core::lifecycle::task_done::Attempt;
    use crate::core::limits::Limits;
    use crate::store::test_fixtures::new;
    use crate::store::{Operation, Store, StoreError, TaskFate};

    async fn store() -> Result<(tempfile::TempDir, Store), StoreError> {
        crate::store::test_fixtures::sqlite().await
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

    /// Issue 54: an instance's thousands of task results, written with one
    /// `commit_all`, were queued at once, and another caller's write (a
    /// tenant's step) waited behind every one of them. Now it waits behind
    /// one group: answered long before the bulk is committed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn another_write_goes_in_between_a_bulk_commit() -> Result<(), StoreError> {
        const BULK: u64 = 3_000;
        let (_dir, store) = store().await?;
        let bulk: Vec<_> = (0..BULK)
            .map(|i| Write::Start(new(&format!("bulk{i}"))))
            .collect();
        let committer = store.committer().clone();
        let bulk = tokio::spawn(async move { committer.commit_all(bulk).await });
        // Once the bulk is being committed (bounded: it commits in seconds).
        let began = std::time::Instant::now();
        while store.commit_stats().0 == 0 {
            assert!(began.elapsed() < std::time::Duration::from_secs(60));
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert!(store.start(new("tenant")).await?.is_some());
        let (committed, _) = store.commit_stats();
        assert!(
            committed < BULK,
            "the tenant's write was answered after {committed} writes, the bulk's {BULK} all before it"
        );
        let written = bulk.await.map_err(|e| StoreError::Write(e.to_string()))?;
        assert_eq!(written.len() as u64, BULK);
        assert!(written.iter().all(Result::is_ok));
        assert_eq!(store.commit_stats().0, BULK + 1);
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
        store.manage("x", Operation::terminate_for("stop")).await?;
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
        assert!(store.commit_episode(target, 0, complete).await?.is_none());
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
        assert_eq!(outcome, TaskFate::Dropped);
        assert!(applied.wake.is_empty());
        Ok(())
    }

    #[tokio::test]
    async fn an_episode_whose_journal_moved_on_meanwhile_is_not_applied() -> Result<(), StoreError>
    {
        use crate::core::journal::{Call, Entry};
        let (_dir, store) = store().await?;
        store.start(new("x")).await?;
        let execution = store.load("x").await?.map_or(0, |l| l.state.execution);
        let target = || crate::store::Target {
            id: "x".into(),
            execution,
            name: "o".into(),
            digest: "d".into(),
        };
        // Two episodes that both replayed the empty journal: the first to
        // commit appends; the other decided from a journal that is gone.
        let first = vec![Effect::Append {
            entries: vec![Entry::Call(Call::Now { value: 1 })],
            at: 1,
        }];
        assert!(store.commit_episode(target(), 0, first).await?.is_some());
        let stale = vec![Effect::SetStatus {
            status: RuntimeStatus::Completed,
            output: Some("stale".into()),
            custom_status: None,
        }];
        assert!(store.commit_episode(target(), 0, stale).await?.is_none());
        let loaded = store.load("x").await?;
        assert_eq!(loaded.as_ref().map(|l| l.state.history.events), Some(1));
        assert_ne!(
            loaded.map(|l| l.state.status),
            Some(RuntimeStatus::Completed)
        );
        // One that replayed what is stored commits.
        let done = vec![Effect::SetStatus {
            status: RuntimeStatus::Completed,
            output: Some("1".into()),
            custom_status: None,
        }];
        assert!(store.commit_episode(target(), 1, done).await?.is_some());
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
            tokio::spawn(async move { store.commit_episode(t, 0, bad).await })
        }];
        for id in ["g0", "g1", "g2", "g3"] {
            let store = store.clone();
            let t = target(id, execution(id).await?);
            handles.push(tokio::spawn(async move {
                store.commit_episode(t, 0, vec![done()]).await
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
