//! The SQLite writer. SQLite has one writer at a time; this one owns its own
//! connection, so a statement costs microseconds (through sqlx each one is a
//! hand-off to the connection's thread and back, which dominated a step).
//!
//! The connection and the queue are held together, by whichever thread
//! commits next. Mostly that is the writer's own thread, which takes every
//! job queued at the moment into one transaction. But a caller that finds
//! the writer idle, nothing queued and no contention lately commits its own
//! light jobs on its own thread: for a lone caller each job was two thread
//! wake-ups, to the writer and back, which took as long as SQLite's own
//! work (measured on a one-connection agent run). Jobs leave the queue only
//! while the lock is held and are answered before it is released, so a
//! caller that holds it before an empty queue comes after every job sent
//! before its own: the order of commits is the order of sends, as before.

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::mpsc;

use super::checkpoint::Checkpoints;
use super::tx::SqliteTx;
use super::whole_runs;
use crate::store::clock::now_ms;
use crate::store::commit_queue::{all_failed, Job, Shared, Taken};
use crate::store::durable_records::{Write, Written};
use crate::store::error::StoreError;
use crate::store::writes::{read_one, write_one};

/// Statements kept prepared on the writer's connection (chunked inserts of
/// different sizes are distinct statements).
const PREPARED_STATEMENTS: usize = 64;

/// How long after a sign of contention (a caller found the writer busy or
/// jobs queued) callers leave their jobs to the writer's thread. Committed
/// on callers' threads, the jobs of a busy writer were a transaction each,
/// and the runtime's threads waited on one another's commits: sixteen
/// connections lost 5–7% of their runs per second. Queued, jobs share
/// transactions again.
const CONTENDED_FOR: Duration = Duration::from_millis(20);

/// The writer: its connection and queue, and its thread to wake.
pub(in crate::store) struct Writer {
    held: Mutex<Held>,
    thread: std::thread::Thread,
    shared: Shared,
    /// When contention was last seen (µs since `epoch`).
    contended_at: AtomicU64,
    epoch: Instant,
}

/// What the committing thread holds.
struct Held {
    /// `None` once closed.
    connection: Option<Connection>,
    queue: mpsc::UnboundedReceiver<Job>,
    checkpoints: Option<Checkpoints>,
}

/// The writer's page cache (KiB), as SQLite counts it: filled only as pages
/// are read. SQLite's default, 2 MiB, holds the inner pages of a store's
/// B-trees only while the store is small: on a million sessions each write
/// read them again from the file (a run on an old session took 1.30× as
/// long as on a small store).
const WRITER_CACHE_KIB: u32 = 32 * 1024;

pub(in crate::store) fn start(
    path: &Path,
    queue: mpsc::UnboundedReceiver<Job>,
    shared: Shared,
) -> Result<Handle, StoreError> {
    let connection = Connection::open(path)?;
    connection.busy_timeout(super::checkpoint::WRITER_WAIT)?;
    connection.execute_batch(&format!(
        "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; \
             PRAGMA cache_size = -{WRITER_CACHE_KIB};"
    ))?;
    connection.set_prepared_statement_cache_capacity(PREPARED_STATEMENTS);
    let checkpoints = Checkpoints::start(path, &connection)?;
    let held = Mutex::new(Held {
        connection: Some(connection),
        queue,
        checkpoints: Some(checkpoints),
    });
    // The thread is told its writer once it exists (it needs the writer's
    // handle to its thread, to be woken).
    let (hand, handed) = std::sync::mpsc::sync_channel::<Arc<Writer>>(1);
    let thread = std::thread::Builder::new()
        .name("agenthost-committer".into())
        .spawn(move || {
            if let Ok(writer) = handed.recv() {
                write_loop(&writer);
            }
        })
        .map_err(|e| StoreError::Write(format!("cannot start the store's writer: {e}")))?;
    let writer = Arc::new(Writer {
        held,
        thread: thread.thread().clone(),
        shared,
        contended_at: AtomicU64::new(0),
        epoch: Instant::now(),
    });
    hand.send(writer.clone())
        .map_err(|_| StoreError::Write("the store's writer did not start".into()))?;
    Ok(Handle(writer))
}

/// The committer's hold on the writer. Dropped (after the queue's senders),
/// it wakes the writer's thread, which then finds the queue closed and ends.
pub(in crate::store) struct Handle(Arc<Writer>);

impl Handle {
    /// Tells the writer's thread that a job was queued.
    pub(in crate::store) fn wake(&self) {
        self.0.wake();
    }

    /// See [`Writer::try_here`].
    pub(in crate::store) fn try_here(&self, jobs: Vec<Job>) -> Result<(), Vec<Job>> {
        self.0.try_here(jobs)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.0.wake();
    }
}

impl Writer {
    fn wake(&self) {
        self.thread.unpark();
    }

    /// Does `jobs` here and now, together, if the writer is idle and has
    /// been for [`CONTENDED_FOR`], nothing is queued and every job is light;
    /// else hands them back, to be queued.
    fn try_here(&self, jobs: Vec<Job>) -> Result<(), Vec<Job>> {
        let light = jobs.iter().all(|job| match job {
            Job::Write(write, _) => write.light(),
            Job::Writes(writes) => writes.iter().all(|(write, _)| write.light()),
            Job::Read(..) => true,
            Job::Close(_) => false,
        });
        if !light || self.contended_lately() {
            return Err(jobs);
        }
        let mut held = match self.held.try_lock() {
            Ok(held) => held,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                self.contended();
                return Err(jobs);
            }
        };
        if held.connection.is_none() {
            return Err(jobs);
        }
        if !held.queue.is_empty() {
            self.contended();
            return Err(jobs);
        }
        let mut taken = Taken::default();
        for job in jobs {
            taken.add(job);
        }
        held.commit(taken, &self.shared, false);
        // The WAL's restart waits on readers: the writer's thread does it.
        if held.restart_due() {
            self.wake();
        }
        Ok(())
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn contended(&self) {
        self.contended_at.store(self.now(), Ordering::Relaxed);
    }

    fn contended_lately(&self) -> bool {
        let at = self.contended_at.load(Ordering::Relaxed);
        let window = u64::try_from(CONTENDED_FOR.as_micros()).unwrap_or(u64::MAX);
        at != 0 && self.now().saturating_sub(at) < window
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The writer's thread: commits what is queued, then sleeps until woken.
/// Ends when the store is closed or every sender is gone.
fn write_loop(writer: &Writer) {
    let _alive = writer.shared.health.guard();
    loop {
        let mut held = writer.lock();
        if held.connection.is_none() {
            return;
        }
        match held.queue.try_recv() {
            Ok(job) => {
                let taken = Taken::from(job, &mut held.queue);
                if held.commit(taken, &writer.shared, true) {
                    return;
                }
            }
            Err(mpsc::error::TryRecvError::Empty) => {
                held.restart_if_due();
                drop(held);
                // A wake-up between the look and here is not lost: it
                // makes `park` return at once.
                std::thread::park();
            }
            Err(mpsc::error::TryRecvError::Disconnected) => return,
        }
    }
}

impl Held {
    /// Commits the writes taken, then answers the reads; `restart`: whether
    /// a WAL restart due is done now (the writer's thread), else left to
    /// it. True once closed.
    fn commit(&mut self, taken: Taken, shared: &Shared, restart: bool) -> bool {
        let Some(connection) = self.connection.as_mut() else {
            return true;
        };
        // Reads are answered after the batch commits, so they see it whole.
        if !taken.writes.is_empty() {
            shared.health.batch_started();
            let (writes, replies): (Vec<_>, Vec<_>) = taken.writes.into_iter().unzip();
            let (batch, started) = (writes.len(), std::time::Instant::now());
            let results = write_batch(connection, writes);
            crate::metrics::commit(batch, started.elapsed());
            shared.answer(replies, results);
            if let Some(checkpoints) = &self.checkpoints {
                checkpoints.wrote();
                if restart {
                    checkpoints.restart_if_due(connection);
                }
            }
        }
        for (read, reply) in taken.reads {
            let _ = reply.send(run_now(read_one(&mut SqliteTx(connection), read)));
        }
        if let Some(reply) = taken.close {
            shared.health.closed();
            self.queue.close();
            self.connection = None;
            if let Some(checkpoints) = self.checkpoints.take() {
                checkpoints.stop();
            }
            let _ = reply.send(());
            return true;
        }
        false
    }

    fn restart_due(&self) -> bool {
        self.checkpoints
            .as_ref()
            .is_some_and(Checkpoints::restart_due)
    }

    fn restart_if_due(&mut self) {
        if let (Some(checkpoints), Some(connection)) = (&self.checkpoints, &self.connection) {
            checkpoints.restart_if_due(connection);
        }
    }
}

/// Writes a batch in one transaction. Most batches have no failing write, so
/// they run without savepoints; if one fails, the batch is rolled back and
/// written again with a savepoint per write, so that the failure spoils
/// nothing else. Decisions are made inside the transaction, so writing again
/// decides again, on the same state.
fn write_batch(
    connection: &mut Connection,
    writes: Vec<Write>,
) -> Vec<Result<Written, StoreError>> {
    let count = writes.len();
    let tx = match connection.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return all_failed(count, &e),
    };
    let now = now_ms();
    let mut results: Vec<Option<Written>> = (0..count).map(|_| None).collect();
    let mut failed = false;
    for (at, pair) in whole_runs::pairs(&writes).into_iter().enumerate() {
        if results[at].is_some() {
            continue;
        }
        let whole = pair.and_then(|end| Some((end, whole_runs::whole(&writes, at, end)?)));
        if let Some((end, whole)) = whole {
            match whole_runs::insert(&tx, &whole, now) {
                Ok(Some((started, ended))) => {
                    results[at] = Some(started);
                    results[end] = Some(ended);
                    continue;
                }
                Ok(None) => {}
                Err(_) => {
                    failed = true;
                    break;
                }
            }
        }
        match run_now(write_one(&mut SqliteTx(&tx), writes[at].clone(), now)) {
            Ok(written) => results[at] = Some(written),
            Err(_) => {
                failed = true;
                break;
            }
        }
    }
    if !failed {
        return match tx.commit() {
            Ok(()) => results
                .into_iter()
                .map(|written| {
                    written.ok_or_else(|| {
                        StoreError::Write("a write of the batch got no answer".into())
                    })
                })
                .collect(),
            Err(e) => all_failed(count, &e),
        };
    }
    if let Err(e) = tx.rollback() {
        return all_failed(count, &e);
    }
    write_isolated(connection, writes)
}

/// The slow path: each write in its own savepoint.
fn write_isolated(
    connection: &mut Connection,
    writes: Vec<Write>,
) -> Vec<Result<Written, StoreError>> {
    let count = writes.len();
    let mut tx = match connection.transaction_with_behavior(TransactionBehavior::Immediate) {
        Ok(tx) => tx,
        Err(e) => return all_failed(count, &e),
    };
    let now = now_ms();
    let mut results = Vec::with_capacity(count);
    for write in writes {
        let savepoint = match tx.savepoint() {
            Ok(savepoint) => savepoint,
            Err(e) => return all_failed(count, &e),
        };
        let result = run_now(write_one(&mut SqliteTx(&savepoint), write, now));
        // A savepoint dropped without commit rolls back to where it began.
        let ended = match &result {
            Ok(_) => savepoint.commit(),
            Err(_) => savepoint.finish(),
        };
        if let Err(e) = ended {
            return all_failed(count, &e);
        }
        results.push(result);
    }
    match tx.commit() {
        Ok(()) => results,
        Err(e) => all_failed(count, &e),
    }
}

/// Runs a future that cannot wait: SQLite's statements complete inside the
/// call, so the shared async write code finishes in one poll on the writer
/// thread, with no runtime under it.
fn run_now<T>(future: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    use futures::FutureExt;
    future.now_or_never().unwrap_or_else(|| {
        Err(StoreError::Write(
            "a SQLite write waited on something: it must complete at once".into(),
        ))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, OnceLock};
    use std::time::{Duration, Instant};

    use tokio::sync::{mpsc, oneshot};

    use super::{start, Handle, Job, Shared};
    use crate::core::instance::RuntimeStatus;
    use crate::store::durable_records::{Write, Written};
    use crate::store::test_fixtures::new;
    use crate::store::{Operation, StoreError};

    /// A second writer on a migrated store's file, on a queue of its own.
    async fn writer() -> Result<
        (
            tempfile::TempDir,
            Handle,
            mpsc::UnboundedSender<Job>,
            crate::store::Store,
        ),
        StoreError,
    > {
        let (dir, store) = crate::store::test_fixtures::sqlite().await?;
        let (jobs, queue) = mpsc::unbounded_channel();
        let shared = Shared {
            stats: Arc::default(),
            sink: Arc::new(OnceLock::new()),
            health: Arc::default(),
        };
        let handle = start(&dir.path().join("t.db"), queue, shared)?;
        Ok((dir, handle, jobs, store))
    }

    fn start_of(id: &str) -> (Job, oneshot::Receiver<Result<Written, StoreError>>) {
        let (reply, answer) = oneshot::channel();
        (Job::Write(Box::new(Write::Start(new(id))), reply), answer)
    }

    /// A lone caller's write is committed before `try_here` returns: on the
    /// caller's thread, no hand-off to the writer's and back.
    #[tokio::test]
    async fn an_idle_writer_commits_a_lone_callers_write_on_its_thread() -> Result<(), StoreError> {
        let (_dir, writer, _jobs, store) = writer().await?;
        let (job, mut answer) = start_of("here");
        assert!(writer.try_here(vec![job]).is_ok(), "an idle writer refused");
        let written = answer
            .try_recv()
            .map_err(|e| StoreError::Write(format!("not answered at once: {e}")))??;
        assert!(matches!(written, Written::Start(Some(_))), "{written:?}");
        let loaded = store.load("here").await?;
        assert_eq!(loaded.map(|l| l.state.status), Some(RuntimeStatus::Pending));
        Ok(())
    }

    /// What a caller finds queued goes first: it queues behind it rather
    /// than commit ahead of it. Whenever it does commit here, the write
    /// queued before it was already answered. And a busy writer is neither
    /// waited for nor gone around.
    #[tokio::test]
    async fn a_caller_never_commits_ahead_of_what_is_queued_or_while_busy() -> Result<(), StoreError>
    {
        let (_dir, writer, jobs, _store) = writer().await?;
        let closed = |_| StoreError::Write("closed".into());
        let mut queued_behind = 0;
        for i in 0..50 {
            let (first, mut first_answer) = start_of(&format!("first{i}"));
            // Queued without waking the writer's thread: unless it is
            // still awake from the last round, the job stays queued.
            jobs.send(first).map_err(closed)?;
            let (second, mut second_answer) = start_of(&format!("second{i}"));
            match writer.try_here(vec![second]) {
                Ok(()) => {
                    assert!(
                        first_answer.try_recv().is_ok(),
                        "round {i}: committed ahead of a queued write"
                    );
                    assert!(second_answer.try_recv().is_ok());
                }
                Err(second) => {
                    queued_behind += 1;
                    for job in second {
                        jobs.send(job).map_err(closed)?;
                    }
                    writer.wake();
                    for answer in [first_answer, second_answer] {
                        let written = answer
                            .await
                            .map_err(|_| StoreError::Write("no answer".into()))??;
                        assert!(matches!(written, Written::Start(Some(_))), "{written:?}");
                    }
                }
            }
        }
        assert!(queued_behind > 0, "the writer's thread never slept");
        let busy = writer.0.lock();
        let (third, _answer) = start_of("third");
        assert!(
            writer.try_here(vec![third]).is_err(),
            "waited for, or went around, a writer that was busy"
        );
        drop(busy);
        Ok(())
    }

    /// A purge may delete a whole history: never on a caller's thread.
    #[tokio::test]
    async fn a_heavy_write_is_left_to_the_writers_thread() -> Result<(), StoreError> {
        let (_dir, writer, _jobs, _store) = writer().await?;
        let (reply, _answer) = oneshot::channel();
        let purge = Job::Write(
            Box::new(Write::Manage {
                instance: "any".into(),
                op: Operation::Purge,
            }),
            reply,
        );
        assert!(writer.try_here(vec![purge]).is_err());
        Ok(())
    }

    /// Once the committer lets go (its senders, then its handle), the
    /// writer's thread ends and lets go of the connection.
    #[tokio::test]
    async fn the_writer_ends_when_its_committer_is_dropped() -> Result<(), StoreError> {
        let (_dir, writer, jobs, _store) = writer().await?;
        let held = Arc::downgrade(&writer.0);
        drop(jobs);
        drop(writer);
        let deadline = Instant::now() + Duration::from_secs(10);
        while held.upgrade().is_some() {
            assert!(Instant::now() < deadline, "the writer's thread did not end");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }
}
