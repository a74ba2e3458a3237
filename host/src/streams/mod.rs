//! Response streams: the output of every agent run (from HTTP or from an
//! orchestration), chunk by chunk, keyed by its correlation id, so that a
//! client follows an answer while it is written and, after a dropped
//! connection, continues from the last entry it saw instead of running the
//! agent again.
//!
//! Two backends, one trait ([`StreamBackend`]): the store (embedded, the
//! default, no extra service) and Redis Streams (`REDIS_CONNECTION_STRING`,
//! key `agent:response:{correlation_id}`). Both keep entries until they
//! expire (`--stream-ttl`).
//!
//! One writer task takes every run's entries: what is queued is written at
//! once (one transaction, or one Redis pipeline), then published in-process,
//! so a live reader gets each entry as soon as it is stored, and a reader
//! that reconnects finds in the backend everything it was sent. A run hands
//! its entries to the writer and goes on: a slow backend, or a backend that
//! is down, never holds up an answer (the answer is in the run record and
//! the session either way).

mod embedded;
mod follow;
mod held;
mod redis_backend;
mod sealing;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, oneshot};

use crate::store::Store;

/// Entries one read returns at most.
const READ_LIMIT: usize = 512;
/// Entries one write takes at most.
const WRITE_BATCH: usize = 512;

/// What a stream holds: pieces of text, then how the run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    Chunk(String),
    Complete,
    Failed(String),
    /// Made by a reader, never stored: the run began again (a newer
    /// attempt); what was read of the older one is not its answer.
    Restart,
}

impl Entry {
    /// The entry after which nothing more comes.
    pub fn is_last(&self) -> bool {
        matches!(self, Entry::Complete | Entry::Failed(_))
    }
}

/// An entry's place in its stream, and the cursor a reader resumes after:
/// a Redis stream id (`1700000000000-0`) or the store's row id (`42`).
/// `0` is before the first entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryId(String);

impl EntryId {
    pub fn start() -> Self {
        Self("0".into())
    }

    /// A cursor as a client sends it; `None` when it is not an entry id.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        let (ms, seq) = text.split_once('-').unwrap_or((text, "0"));
        let valid = !ms.is_empty()
            && ms.bytes().all(|b| b.is_ascii_digit())
            && seq.bytes().all(|b| b.is_ascii_digit())
            && ms.parse::<u64>().is_ok()
            && seq.parse::<u64>().is_ok();
        valid.then(|| Self(text.to_string()))
    }

    fn key(&self) -> (u64, u64) {
        let (ms, seq) = self.0.split_once('-').unwrap_or((&self.0, "0"));
        (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl PartialOrd for EntryId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for EntryId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// A stored entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub id: EntryId,
    pub entry: Entry,
    /// When it was written, Unix milliseconds.
    pub at_ms: i64,
    /// The run attempt that wrote it ([`ResponseStreams::writer`]).
    pub attempt: i64,
}

/// One entry on its way to the backend: its run, the attempt, the entry.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    pub correlation_id: String,
    pub attempt: i64,
    pub entry: Entry,
}

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("the response stream store failed: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("Redis failed: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("cannot reach Redis at {address}: {reason}")]
    RedisUnreachable { address: String, reason: String },
    #[error("a stored stream entry is not valid: {0}")]
    Corrupt(String),
    #[error("{0} readers already follow response streams on this host (--max-stream-followers); retry later")]
    TooManyFollowers(usize),
}

/// Where streams are kept.
pub(crate) trait StreamBackend {
    /// Appends entries of any runs, in order; returns their ids.
    fn append(
        &self,
        entries: &[Outgoing],
        ttl: Duration,
    ) -> impl Future<Output = Result<Vec<EntryId>, StreamError>> + Send;
    /// The run's entries after `after`, oldest first, `limit` at most.
    fn read_after(
        &self,
        correlation_id: &str,
        after: &EntryId,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Stored>, StreamError>> + Send;
    /// Drops what has expired (Redis expires keys by itself).
    fn sweep(&self) -> impl Future<Output = Result<u64, StreamError>> + Send;
}

enum Backend {
    Embedded(embedded::Embedded),
    Redis(redis_backend::RedisBackend),
}

impl Backend {
    async fn append(
        &self,
        entries: &[Outgoing],
        ttl: Duration,
    ) -> Result<Vec<EntryId>, StreamError> {
        match self {
            Backend::Embedded(b) => b.append(entries, ttl).await,
            Backend::Redis(b) => b.append(entries, ttl).await,
        }
    }

    async fn read_after(
        &self,
        correlation_id: &str,
        after: &EntryId,
        limit: usize,
    ) -> Result<Vec<Stored>, StreamError> {
        match self {
            Backend::Embedded(b) => b.read_after(correlation_id, after, limit).await,
            Backend::Redis(b) => b.read_after(correlation_id, after, limit).await,
        }
    }

    async fn sweep(&self) -> Result<u64, StreamError> {
        match self {
            Backend::Embedded(b) => b.sweep().await,
            Backend::Redis(b) => b.sweep().await,
        }
    }
}

/// Where streams go, as configured.
#[derive(Debug, Clone)]
pub struct StreamSettings {
    /// `REDIS_CONNECTION_STRING`: `redis://HOST:PORT[/DB]` or `HOST:PORT`.
    pub redis: Option<String>,
    /// Refuse to start when Redis is configured but unreachable, instead of
    /// falling back to the embedded backend.
    pub require_redis: bool,
    pub ttl: Duration,
    /// Readers following streams at once at most (each one holds a task
    /// and reads the backend when it wakes): past it, a reader is refused.
    pub max_followers: usize,
}

enum Job {
    Entry(Outgoing),
    /// Answered once everything queued before it is written.
    Flush(oneshot::Sender<()>),
}

/// Every run's response stream.
pub struct ResponseStreams {
    backend: Arc<Backend>,
    queue: mpsc::UnboundedSender<Job>,
    live: broadcast::Sender<Arc<(String, Stored)>>,
    /// One permit per reader following a stream.
    followers: Arc<tokio::sync::Semaphore>,
    max_followers: usize,
    /// How long entries are kept.
    ttl: Duration,
    /// Whether every stream a reader here can follow is written by this
    /// process (its store is not shared): each entry is then published
    /// here, and followers read the backend only when woken, never on a
    /// timer.
    written_here: bool,
    /// The store, when streams are kept in it (not Redis): its run records
    /// are the streams of runs that ended held, with nobody following
    /// ([`held`]).
    store: Option<Store>,
    /// Whether every run's entries are held until a reader asks: this
    /// process alone writes and reads its streams. On a shared hub only a
    /// run whose caller waits here for its whole answer is held: nobody
    /// else knows its id before it ends.
    holds_every_run: bool,
    taps: Arc<held::Taps>,
    /// One reader at a time looks for, and if need be writes, an ended
    /// run's missing stream.
    sealing: sealing::Gates,
}

impl ResponseStreams {
    /// Opens the configured backend (Redis, or the store) and starts the
    /// writer. Redis that cannot be reached falls back to the store, with
    /// a warning, unless `require_redis`.
    pub async fn open(store: Store, settings: StreamSettings) -> Result<Arc<Self>, StreamError> {
        let store_is_shared = store.is_shared();
        let own_store = store.clone();
        let backend = match &settings.redis {
            Some(address) => match redis_backend::RedisBackend::connect(address).await {
                Ok(redis) => Backend::Redis(redis),
                Err(e) if settings.require_redis => return Err(e),
                Err(e) => {
                    tracing::warn!(error = %e, "response streams fall back to the store (start with --require-redis to refuse instead)");
                    Backend::Embedded(embedded::Embedded::new(store))
                }
            },
            None => Backend::Embedded(embedded::Embedded::new(store)),
        };
        let description = match (&backend, &settings.redis) {
            (Backend::Redis(_), Some(address)) => {
                format!("Redis Streams at {}", redis_backend::redacted(address))
            }
            _ => "the store".to_string(),
        };
        tracing::info!(backend = %description, ttl = ?settings.ttl, "response streams");
        let written_here = !store_is_shared;
        let store = match backend {
            Backend::Embedded(_) => Some(own_store),
            Backend::Redis(_) => None,
        };
        let backend = Arc::new(backend);
        let (queue, jobs) = mpsc::unbounded_channel();
        let (live, _) = broadcast::channel(4096);
        tokio::spawn(write_loop(
            backend.clone(),
            jobs,
            live.clone(),
            settings.ttl,
        ));
        Ok(Arc::new(Self {
            backend,
            queue,
            live,
            followers: Arc::new(tokio::sync::Semaphore::new(settings.max_followers)),
            max_followers: settings.max_followers,
            ttl: settings.ttl,
            written_here,
            store,
            holds_every_run: written_here,
            taps: Arc::new(held::Taps::new(settings.ttl)),
            sealing: sealing::Gates::default(),
        }))
    }

    /// The writer of one execution of a run. `attempt` orders executions
    /// of one run (when it began, in ms: a run executed again after a crash
    /// or on another host begins later): readers start over at a newer
    /// attempt and ignore entries of older ones, so a stream's text is
    /// always one execution's, the one whose answer is stored. `unseen`:
    /// the run's caller waits in this process for its whole answer, and
    /// nobody else was given its id.
    pub fn writer(&self, correlation_id: &str, attempt: i64, unseen: bool) -> StreamWriter {
        let holds = self.store.is_some() && (self.holds_every_run || unseen);
        let held = holds.then(|| self.taps.begin(correlation_id)).flatten();
        StreamWriter {
            held,
            ..self.writing(correlation_id, attempt)
        }
    }

    /// What the run's execution here holds is written now, the rest as it
    /// comes: its id is about to be handed out (a caller's wait ran out).
    pub fn release(&self, correlation_id: &str) {
        self.taps.release(correlation_id, &self.queue);
    }

    /// A writer whose entries are written at once.
    fn writing(&self, correlation_id: &str, attempt: i64) -> StreamWriter {
        StreamWriter {
            correlation_id: correlation_id.to_string(),
            attempt,
            queue: self.queue.clone(),
            held: None,
            taps: self.taps.clone(),
        }
    }

    /// A place for one more reader to follow a stream, or
    /// [`StreamError::TooManyFollowers`]: asked before a run is submitted
    /// for a caller who follows its answer, so a refusal starts nothing.
    pub fn admit(&self) -> Result<Follower, StreamError> {
        self.followers
            .clone()
            .try_acquire_owned()
            .map(|place| Follower {
                _place: place,
                _counted: crate::metrics::stream_follower(),
            })
            .map_err(|_| StreamError::TooManyFollowers(self.max_followers))
    }

    /// The run's stored entries after `after`. What its execution here
    /// holds is written first: a reader asked for it.
    pub async fn read_after(
        &self,
        correlation_id: &str,
        after: &EntryId,
    ) -> Result<Vec<Stored>, StreamError> {
        if self.taps.release(correlation_id, &self.queue) {
            self.flush().await;
        }
        self.backend
            .read_after(correlation_id, after, READ_LIMIT)
            .await
    }

    /// Whether the newest attempt of the stream has its last entry; `None`
    /// when the stream holds nothing (it expired, or nothing was written).
    pub async fn ended(&self, correlation_id: &str) -> Result<Option<bool>, StreamError> {
        let mut after = EntryId::start();
        let (mut newest, mut ended, mut any) = (i64::MIN, false, false);
        loop {
            let page = self.read_after(correlation_id, &after).await?;
            for stored in &page {
                any = true;
                if stored.attempt > newest {
                    (newest, ended) = (stored.attempt, false);
                }
                ended |= stored.attempt == newest && stored.entry.is_last();
            }
            match page.last() {
                Some(last) if page.len() >= READ_LIMIT => after = last.id.clone(),
                _ => return Ok(any.then_some(ended)),
            }
        }
    }

    /// Entries as they are published, of every run.
    fn subscribe(&self) -> broadcast::Receiver<Arc<(String, Stored)>> {
        self.live.subscribe()
    }

    /// Waits until everything handed to writers so far is written.
    pub async fn flush(&self) {
        let (reply, done) = oneshot::channel();
        if self.queue.send(Job::Flush(reply)).is_ok() {
            let _ = done.await;
        }
    }
}

/// A reader's place among the followers ([`ResponseStreams::admit`]),
/// given back when its follow ends.
pub struct Follower {
    _place: tokio::sync::OwnedSemaphorePermit,
    _counted: crate::metrics::Gauged,
}

/// Hands one run's entries to the stream writer; never waits.
pub struct StreamWriter {
    correlation_id: String,
    attempt: i64,
    queue: mpsc::UnboundedSender<Job>,
    /// Where the entries are held while nobody follows ([`held`]).
    held: Option<Arc<held::Held>>,
    taps: Arc<held::Taps>,
}

impl StreamWriter {
    pub fn chunk(&self, text: &str) {
        self.push(Entry::Chunk(text.to_string()));
    }

    pub fn complete(&self) {
        self.push(Entry::Complete);
    }

    pub fn fail(&self, error: &str) {
        self.push(Entry::Failed(error.to_string()));
    }

    /// Writes what is held and everything after it: the run comes to wait
    /// (for a human), maybe for longer than this process lives.
    pub fn keep(&self) {
        self.taps.keep(&self.correlation_id, &self.queue);
    }

    fn push(&self, entry: Entry) {
        let outgoing = Outgoing {
            correlation_id: self.correlation_id.clone(),
            attempt: self.attempt,
            entry,
        };
        match &self.held {
            Some(held) => held.push(&self.taps, outgoing, &self.queue),
            // Closed only when the host stops: the run's record still holds
            // its answer.
            None => {
                let last = outgoing.entry.is_last();
                let _ = self.queue.send(Job::Entry(outgoing));
                if last {
                    self.taps.ended(&self.correlation_id);
                }
            }
        }
    }
}

/// How often expired entries are dropped from the store.
const SWEEP: Duration = Duration::from_secs(60);

async fn write_loop(
    backend: Arc<Backend>,
    mut jobs: mpsc::UnboundedReceiver<Job>,
    live: broadcast::Sender<Arc<(String, Stored)>>,
    ttl: Duration,
) {
    let mut gaps = Gaps::default();
    let mut sweep = tokio::time::interval(SWEEP);
    loop {
        // Markers of streams that lost entries are retried on their own
        // while nothing else comes.
        let retry = tokio::time::sleep(if gaps.markers.is_empty() {
            SWEEP
        } else {
            MARKER_RETRY
        });
        let first = tokio::select! {
            job = jobs.recv() => match job {
                Some(job) => job,
                None => return,
            },
            () = retry, if !gaps.markers.is_empty() => Job::Flush(oneshot::channel().0),
            _ = sweep.tick() => {
                match backend.sweep().await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(entries = n, "expired stream entries dropped"),
                    Err(e) => tracing::warn!(error = %e, "could not drop expired stream entries"),
                }
                continue;
            }
        };
        let mut batch = Vec::new();
        let mut flushed = Vec::new();
        let mut next = Some(first);
        while let Some(job) = next.take() {
            match job {
                Job::Entry(outgoing) => batch.push(outgoing),
                Job::Flush(reply) => flushed.push(reply),
            }
            if batch.len() < WRITE_BATCH {
                next = jobs.try_recv().ok();
            }
        }
        let batch = gaps.admit(batch);
        if !batch.is_empty() {
            match append_retrying(&backend, &batch, ttl).await {
                Ok(ids) => {
                    gaps.written(&batch);
                    let at_ms = crate::store::now_ms();
                    for (outgoing, id) in batch.into_iter().zip(ids) {
                        let stored = Stored {
                            id,
                            entry: outgoing.entry,
                            at_ms,
                            attempt: outgoing.attempt,
                        };
                        let _ = live.send(Arc::new((outgoing.correlation_id, stored)));
                    }
                }
                // The runs go on (their answers are in their records); their
                // streams are marked failed as soon as the backend takes it.
                Err(e) => gaps.lost(&batch, &e),
            }
        }
        for reply in flushed {
            let _ = reply.send(());
        }
    }
}

/// How often pending failure markers are tried when no entry comes.
const MARKER_RETRY: Duration = Duration::from_secs(1);

/// How often a failed append is tried again before its entries count as lost.
const APPEND_TRIES: u32 = 3;

async fn append_retrying(
    backend: &Backend,
    batch: &[Outgoing],
    ttl: Duration,
) -> Result<Vec<EntryId>, StreamError> {
    let mut pause = Duration::from_millis(100);
    let mut tries = 1;
    loop {
        match backend.append(batch, ttl).await {
            Ok(ids) => return Ok(ids),
            Err(e) if tries >= APPEND_TRIES => return Err(e),
            Err(e) => {
                tracing::debug!(error = %e, tries, "a response stream append failed; trying again");
                tokio::time::sleep(pause).await;
                pause *= 3;
                tries += 1;
            }
        }
    }
}

/// Streams that lost entries. A stream with a hole must not read as whole:
/// its later entries are dropped and it gets a `failed` entry naming the
/// reason, written first in every batch until the backend takes it.
#[derive(Default)]
struct Gaps {
    /// (run, attempt) → its `failed` marker is written.
    broken: std::collections::HashMap<(String, i64), bool>,
    /// Markers not written yet.
    markers: Vec<Outgoing>,
}

impl Gaps {
    /// The batch to write: the pending markers, then what is not from a
    /// broken stream.
    fn admit(&mut self, batch: Vec<Outgoing>) -> Vec<Outgoing> {
        let mut out = self.markers.clone();
        for outgoing in batch {
            let key = (outgoing.correlation_id.clone(), outgoing.attempt);
            match self.broken.get(&key) {
                None => out.push(outgoing),
                // The run ended: once its marker is written it is forgotten.
                Some(true) if outgoing.entry.is_last() => {
                    self.broken.remove(&key);
                }
                Some(_) => {}
            }
        }
        out
    }

    fn written(&mut self, batch: &[Outgoing]) {
        if self.markers.is_empty() {
            return;
        }
        tracing::info!(
            streams = self.markers.len(),
            "response streams are written again; those that lost entries are marked failed"
        );
        for marker in std::mem::take(&mut self.markers) {
            self.broken
                .insert((marker.correlation_id, marker.attempt), true);
        }
        debug_assert!(!batch.is_empty());
    }

    fn lost(&mut self, batch: &[Outgoing], error: &StreamError) {
        let mut newly = 0;
        for outgoing in batch {
            let key = (outgoing.correlation_id.clone(), outgoing.attempt);
            if self.broken.contains_key(&key) {
                continue;
            }
            self.broken.insert(key, false);
            newly += 1;
            self.markers.push(Outgoing {
                correlation_id: outgoing.correlation_id.clone(),
                attempt: outgoing.attempt,
                entry: Entry::Failed(format!(
                    "the response stream lost entries ({error}); the run's answer is in its record (GET …/runs/{})",
                    outgoing.correlation_id
                )),
            });
        }
        if newly > 0 {
            tracing::warn!(error = %error, streams = newly, "response streams degraded: entries could not be written after {APPEND_TRIES} tries; those streams will read as failed, the runs go on");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::EntryId;

    #[test]
    fn entry_ids_of_both_backends_parse_and_order() {
        let id = |s: &str| EntryId::parse(s).unwrap_or_else(|| panic!("{s}"));
        assert!(id("0") < id("1"));
        assert!(id("9") < id("10"));
        assert!(id("1700000000000-0") < id("1700000000000-1"));
        assert!(id("1700000000000-9") < id("1700000000001-0"));
        assert_eq!(EntryId::start(), id("0"));
        for bad in ["", "x", "1-x", "-1", "1.5", "99999999999999999999999"] {
            assert_eq!(EntryId::parse(bad), None, "{bad}");
        }
    }
}
