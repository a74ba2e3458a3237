//! The committer's queue as its writer loops see it: the jobs, what a loop
//! takes at once, and what it reports to (counters, the inbox sink, its
//! health). Shared by [`super::group_commit`], which owns the queue, and the
//! two writer loops (in [`super::sqlite`] and [`super::postgres`]), which
//! drain it; it uses neither.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::{mpsc, oneshot};

use super::durable_records::{InboxRow, Read, ReadOut, Write, Written};
use super::error::StoreError;
use super::writer_health::WriterHealth;

/// Writes committed in one transaction at most.
const MAX_BATCH: usize = 256;

/// Told, on the writer's thread, of the inbox rows of each batch once it is
/// committed and before any later read or write runs: whoever keeps inboxes
/// in memory sees every row exactly when the store does.
pub type InboxSink = Arc<dyn Fn(Vec<(String, InboxRow)>) + Send + Sync>;

pub(super) type Reply = oneshot::Sender<Result<Written, StoreError>>;
pub(super) type ReadReply = oneshot::Sender<Result<ReadOut, StoreError>>;

pub(super) enum Job {
    /// Boxed: a write is several times larger than the other jobs.
    Write(Box<Write>, Reply),
    /// Writes taken into one batch: a held run's start and the write it is
    /// committed with, never split between two transactions by a writer
    /// that took the queue between them.
    Writes(Vec<(Write, Reply)>),
    Read(Read, ReadReply),
    /// Commit what came before, close the connection, then answer.
    Close(oneshot::Sender<()>),
}

#[derive(Default)]
pub(super) struct Stats {
    pub(super) writes: AtomicU64,
    pub(super) transactions: AtomicU64,
}

/// What a writer loop reports to: the counters, the inbox sink and its health.
pub(super) struct Shared {
    pub(super) stats: Arc<Stats>,
    pub(super) sink: Arc<OnceLock<InboxSink>>,
    pub(super) health: Arc<WriterHealth>,
}

impl Shared {
    /// A batch is committed (or failed whole): hands its inbox rows to the
    /// sink, then answers each writer.
    pub(super) fn answer(
        &self,
        replies: Vec<Reply>,
        mut results: Vec<Result<Written, StoreError>>,
    ) {
        // A batch whose every write failed failed as a transaction (the
        // database refused it); one bad write among good ones is that write's.
        let failure = match results.first() {
            Some(Err(e)) if results.iter().all(Result::is_err) => Some(e.to_string()),
            _ => None,
        };
        self.health.batch_ended(failure);
        let posted: Vec<_> = results
            .iter_mut()
            .filter_map(|r| r.as_mut().ok().and_then(Written::applied_mut))
            .flat_map(|applied| std::mem::take(&mut applied.posted))
            .collect();
        if let (Some(sink), false) = (self.sink.get(), posted.is_empty()) {
            sink(posted);
        }
        self.stats
            .writes
            .fetch_add(replies.len() as u64, Ordering::Relaxed);
        self.stats.transactions.fetch_add(1, Ordering::Relaxed);
        for (reply, result) in replies.into_iter().zip(results) {
            let _ = reply.send(result);
        }
    }
}

/// What the writer took off its queue at once.
#[derive(Default)]
pub(super) struct Taken {
    pub writes: Vec<(Write, Reply)>,
    pub reads: Vec<(Read, ReadReply)>,
    pub close: Option<oneshot::Sender<()>>,
}

impl Taken {
    /// The first job and whatever else is queued, up to a batch.
    pub(super) fn from(first: Job, queue: &mut mpsc::UnboundedReceiver<Job>) -> Self {
        let mut taken = Self::default();
        taken.add(first);
        while !taken.is_full() {
            match queue.try_recv() {
                Ok(job) => taken.add(job),
                Err(_) => break,
            }
        }
        taken
    }

    pub(super) fn add(&mut self, job: Job) {
        match job {
            Job::Write(write, reply) => self.writes.push((*write, reply)),
            Job::Writes(writes) => self.writes.extend(writes),
            Job::Read(read, reply) => self.reads.push((read, reply)),
            Job::Close(reply) => self.close = Some(reply),
        }
    }

    fn is_full(&self) -> bool {
        self.close.is_some() || self.writes.len() + self.reads.len() >= MAX_BATCH
    }
}

/// Every write of a batch failed with the same store error.
pub(super) fn all_failed(
    count: usize,
    error: &dyn std::fmt::Display,
) -> Vec<Result<Written, StoreError>> {
    (0..count)
        .map(|_| Err(StoreError::Write(error.to_string())))
        .collect()
}
