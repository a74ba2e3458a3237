//! Opening a store: SQLite (one file, embedded default) or PostgreSQL (several
//! hosts share one task hub), each with its own migrations.
//!
//! A store has two halves. Plain queries (runs, sessions, lists, versions)
//! go through one sqlx `Any` pool, in SQL both databases run as written. The
//! durable engine's writes go through the [`Committer`], on a connection of
//! its own, in the database's own dialect ([`super::tx::Tx`]). How each
//! database is reached and migrated is its own folder's
//! ([`super::sqlite`], [`super::postgres`]); this file puts a store together.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::AnyPool;

use super::clock::now_ms;
use super::commit_queue::InboxSink;
use super::durable_records::Write;
use super::error::StoreError;
use super::group_commit::Committer;
use super::hub::TaskHub;
use super::postgres::{self, Membership, SharedHub};
use super::records::SessionKey;
use super::sqlite::{self, StoreLock};
use super::writer_health::WriterCheck;

/// The durable store: sessions, runs, component versions, and the durable
/// engine's instances, journals, inboxes and tasks, of one task hub.
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    committer: Committer,
    kind: Kind,
    /// The task hub's name: what metrics and logs of several hubs say.
    hub: Arc<str>,
    /// This host on a hub that several hosts share (PostgreSQL).
    shared: Option<Arc<SharedHub>>,
    /// The OS lock that makes this process the only one on a SQLite file;
    /// released when the last clone of the store is dropped.
    _lock: Option<Arc<StoreLock>>,
    /// Until when (ms) connections coming back to the pool are in doubt (a
    /// store call ran past its deadline: connections may have gone silent)
    /// and are pinged under a deadline before reuse.
    doubt_until: Arc<AtomicI64>,
    /// The starts of runs held back until the run's first write (SQLite:
    /// see [`Store::hold_run`]), by correlation id.
    held: HeldStarts,
}

/// Starts held back, by the run's correlation id. Each behind a lock of
/// its own, held until its commit is answered: whoever writes of the run
/// next waits for it, and nobody else does.
pub(super) type HeldStarts =
    Arc<std::sync::Mutex<std::collections::HashMap<String, Arc<HeldStart>>>>;

/// A run's start held back ([`Store::hold_run`]), and the session it names.
pub(super) struct HeldStart {
    pub(super) session: SessionKey,
    /// Taken by whoever commits it, and held until that commit is answered.
    pub(super) start: tokio::sync::Mutex<Option<Write>>,
}

/// How long connections stay in doubt after a store call ran past its
/// deadline.
const DOUBT_FOR_MS: i64 = 60_000;

/// Which database a store is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    Postgres,
}

/// Plain-query connections per process.
const POOL_CONNECTIONS: u32 = 8;

/// How long one store call may take before it counts as lost.
pub(super) const CALL_DEADLINE: Duration = Duration::from_secs(10);

impl Store {
    /// Opens (creating if needed) the task hub `hub` of the store at `url`
    /// (`sqlite://PATH` or `postgres://…`) and applies migrations. On
    /// PostgreSQL the process joins the hub as `membership` says; SQLite is
    /// served by one process, whatever it says.
    pub async fn open(
        url: &str,
        hub: &TaskHub,
        membership: Membership,
    ) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            open_postgres(url, hub, membership).await
        } else {
            open_sqlite(url, hub).await
        }
    }

    pub(super) fn shared(&self) -> Option<&SharedHub> {
        self.shared.as_deref()
    }

    /// Whether other hosts may write this store (a shared PostgreSQL hub):
    /// what they do reaches this process by notifications, which can be lost.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    pub(super) fn held(&self) -> &HeldStarts {
        &self.held
    }

    pub(super) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub(super) fn committer(&self) -> &Committer {
        &self.committer
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Where committed inbox rows go, on the writer's thread (see [`InboxSink`]).
    pub fn on_inbox_rows(&self, sink: InboxSink) {
        self.committer.on_inbox_rows(sink);
    }

    /// Bounds one store call by [`CALL_DEADLINE`]. The loops that keep the
    /// host working (scheduling, claims, expiry) go through it: a connection
    /// that went silent (no reset: a partition, a dropped NAT entry) would
    /// otherwise hold them for ever, while health still said 200. The call's
    /// connection is dropped with the call (the pool tests it on release).
    pub async fn within<T>(
        &self,
        what: &'static str,
        call: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::select! {
            done = call => done,
            () = tokio::time::sleep(CALL_DEADLINE) => {
                // Before the call (and its connection) is dropped here: the
                // pool must test that connection under a deadline.
                self.doubt_until
                    .fetch_max(now_ms() + DOUBT_FOR_MS, Ordering::Relaxed);
                Err(StoreError::Deadline {
                    what,
                    after: CALL_DEADLINE,
                })
            }
        }
    }

    /// Whether the store's writer is alive and committing within `deadline`.
    pub fn writer_check(&self, deadline: Duration) -> WriterCheck {
        self.committer.check(deadline)
    }

    /// Episodes committed and the transactions they took (group commit).
    pub fn commit_stats(&self) -> (u64, u64) {
        self.committer.stats()
    }

    /// The task hub this store holds.
    pub fn hub(&self) -> &str {
        &self.hub
    }

    /// Commits the writes queued, hands back what this host owned on a
    /// shared hub, then closes the connections.
    pub async fn close(&self) {
        self.committer.close().await;
        if let Some(shared) = &self.shared {
            shared.leave(&self.pool).await;
        }
        self.pool.close().await;
    }
}

async fn open_sqlite(url: &str, hub: &TaskHub) -> Result<Store, StoreError> {
    let (pool, path, lock) = sqlite::open(url, hub, POOL_CONNECTIONS).await?;
    let committer = Committer::sqlite(&path)?;
    Ok(Store {
        pool,
        committer,
        kind: Kind::Sqlite,
        hub: hub.to_string().into(),
        shared: None,
        _lock: Some(Arc::new(lock)),
        doubt_until: Arc::new(AtomicI64::new(0)),
        held: HeldStarts::default(),
    })
}

async fn open_postgres(
    url: &str,
    hub: &TaskHub,
    membership: Membership,
) -> Result<Store, StoreError> {
    let doubt_until = Arc::new(AtomicI64::new(0));
    let (pool, in_hub) = postgres::open(
        url,
        hub,
        POOL_CONNECTIONS,
        CALL_DEADLINE,
        doubt_until.clone(),
    )
    .await?;
    let shared =
        Arc::new(SharedHub::join(&pool, in_hub.clone(), &hub.to_string(), membership).await?);
    let committer = Committer::postgres(in_hub, shared.clone()).await?;
    Ok(Store {
        pool,
        committer,
        kind: Kind::Postgres,
        hub: hub.to_string().into(),
        shared: Some(shared),
        _lock: None,
        doubt_until,
        held: HeldStarts::default(),
    })
}
