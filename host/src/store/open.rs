//! Opening a store: SQLite (one file, embedded default) or PostgreSQL (several
//! hosts share one task hub), each with its own migrations.
//!
//! A store has two halves. Plain queries (runs, sessions, lists, versions)
//! go through one sqlx `Any` pool, in SQL both databases run as written. The
//! durable engine's writes go through the [`Committer`], on a connection of
//! its own, in the database's own dialect ([`super::tx::Tx`]).

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AnyPool, Connection, Executor};

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use super::file_lock::{self, StoreLock};
use super::group_commit::Committer;
use super::hub::TaskHub;
use super::shared_hub::{Membership, SharedHub};
use super::writer_health::WriterCheck;
use super::StoreError;

/// The durable store: sessions, runs, component versions, and the durable
/// engine's instances, journals, inboxes and tasks, of one task hub.
#[derive(Clone)]
pub struct Store {
    pool: AnyPool,
    committer: Committer,
    kind: Kind,
    /// This host on a hub that several hosts share (PostgreSQL).
    shared: Option<Arc<SharedHub>>,
    /// The OS lock that makes this process the only one on a SQLite file;
    /// released when the last clone of the store is dropped.
    _lock: Option<Arc<StoreLock>>,
    /// Until when (ms) connections coming back to the pool are in doubt (a
    /// store call ran past its deadline: connections may have gone silent)
    /// and are pinged under a deadline before reuse.
    doubt_until: Arc<AtomicI64>,
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

/// How long a pooled PostgreSQL connection has to answer a ping before it is
/// dropped rather than reused (or its slot held for ever by a silent one).
const PING_DEADLINE: Duration = Duration::from_secs(2);

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

    pub(super) fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub(super) fn committer(&self) -> &Committer {
        &self.committer
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Where committed inbox rows go, on the writer's thread (see [`super::InboxSink`]).
    pub fn on_inbox_rows(&self, sink: super::InboxSink) {
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
                    .fetch_max(super::now_ms() + DOUBT_FOR_MS, Ordering::Relaxed);
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
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .filter(|p| !p.is_empty())
        .ok_or_else(|| StoreError::UnsupportedUrl(url.to_string()))?;
    // A durable store is a file: the pool and the committer's own connection
    // must open the same one.
    if path.starts_with(":memory:") || path.starts_with("memory:") || path.starts_with("file:") {
        return Err(StoreError::UnsupportedUrl(url.to_string()));
    }
    let path = hub.sqlite_file(Path::new(path));
    // Before anything touches the file: a second host must not even migrate.
    let lock = match file_lock::lock(&path) {
        // A missing or read-only directory: the remedy of an unreachable store.
        Err(StoreError::Write(e)) => {
            return Err(StoreError::Connect {
                address: path.display().to_string(),
                source: sqlx::Error::Configuration(e.into()),
            })
        }
        other => other?,
    };
    let open_error = |source| StoreError::Connect {
        address: path.display().to_string(),
        source,
    };
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(10))
        .foreign_keys(true);
    {
        let migrations = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(open_error)?;
        sqlx::migrate!("./migrations").run(&migrations).await?;
        migrations.close().await;
    }
    let pool = AnyPoolOptions::new()
        .max_connections(POOL_CONNECTIONS)
        .after_connect(|connection, _| {
            Box::pin(async move {
                connection
                    .execute(
                        "PRAGMA busy_timeout = 10000; PRAGMA synchronous = NORMAL; \
                         PRAGMA foreign_keys = ON;",
                    )
                    .await
                    .map(|_| ())
            })
        })
        .connect(&format!("sqlite://{}", path.display()))
        .await
        .map_err(open_error)?;
    let committer = Committer::sqlite(&path)?;
    Ok(Store {
        pool,
        committer,
        kind: Kind::Sqlite,
        shared: None,
        _lock: Some(Arc::new(lock)),
        doubt_until: Arc::new(AtomicI64::new(0)),
    })
}

async fn open_postgres(
    url: &str,
    hub: &TaskHub,
    membership: Membership,
) -> Result<Store, StoreError> {
    let options =
        PgConnectOptions::from_str(url).map_err(|_| StoreError::UnsupportedUrl(url.to_string()))?;
    let address = format!(
        "postgres://{}:{}/{}",
        options.get_host(),
        options.get_port(),
        options.get_database().unwrap_or("")
    );
    let connect_error = |source| StoreError::Connect {
        address: address.clone(),
        source,
    };
    let schema = hub.postgres_schema();
    {
        let mut admin = sqlx::PgConnection::connect_with(&options)
            .await
            .map_err(connect_error)?;
        create_schema(&mut admin, &schema).await?;
        admin.close().await.map_err(connect_error)?;
    }
    let migrating = options.clone().options([("search_path", schema.as_str())]);
    let in_hub = options.clone().options(
        std::iter::once(("search_path", schema.as_str())).chain(SESSION_GUARDS.iter().copied()),
    );
    {
        let migrations = PgPoolOptions::new()
            .max_connections(1)
            .connect_with(migrating)
            .await
            .map_err(connect_error)?;
        sqlx::migrate!("./migrations-postgres")
            .run(&migrations)
            .await?;
        migrations.close().await;
    }
    let session_settings = std::iter::once(format!("SET search_path TO {schema}"))
        .chain(
            SESSION_GUARDS
                .iter()
                .map(|(name, value)| format!("SET {name} = '{value}'")),
        )
        .collect::<Vec<_>>();
    let doubt_until = Arc::new(AtomicI64::new(0));
    let released_doubt = doubt_until.clone();
    let pool = AnyPoolOptions::new()
        .max_connections(POOL_CONNECTIONS)
        .acquire_timeout(CALL_DEADLINE)
        // sqlx pings a connection when it comes back to the pool; on a silent
        // one that ping would wait for ever and keep the pool's slot. While
        // connections are in doubt (a store call ran past its deadline) a
        // ping under a deadline goes first, and a connection that does not
        // answer is closed instead; otherwise one ping is enough.
        .after_release(move |connection, _| {
            let in_doubt = super::now_ms() <= released_doubt.load(Ordering::Relaxed);
            Box::pin(async move {
                if !in_doubt {
                    return Ok(true);
                }
                match tokio::time::timeout(PING_DEADLINE, connection.ping()).await {
                    Ok(Ok(())) => Ok(true),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(sqlx::Error::PoolTimedOut),
                }
            })
        })
        .after_connect(move |connection, _| {
            let set_path = session_settings.clone();
            Box::pin(async move {
                for statement in &set_path {
                    connection.execute(statement.as_str()).await?;
                }
                Ok(())
            })
        })
        .connect(url)
        .await
        .map_err(connect_error)?;
    let shared =
        Arc::new(SharedHub::join(&pool, in_hub.clone(), &hub.to_string(), membership).await?);
    let committer = Committer::postgres(in_hub, shared.clone()).await?;
    Ok(Store {
        pool,
        committer,
        kind: Kind::Postgres,
        shared: Some(shared),
        _lock: None,
        doubt_until,
    })
}

/// Settings of every PostgreSQL session a host opens (migrations aside),
/// so that the server, too, gives up on what a vanished host left: a
/// transaction left open by a client that went silent would otherwise hold
/// its row locks for good and stall every host that needs those rows, and
/// its connection would count against `max_connections` for ever. No
/// statement of the host runs long, and none waits for a lock longer than
/// a store call's deadline; server-side keepalives find a peer that is gone.
const SESSION_GUARDS: [(&str, &str); 6] = [
    ("idle_in_transaction_session_timeout", "10s"),
    ("lock_timeout", "10s"),
    ("statement_timeout", "30s"),
    ("tcp_keepalives_idle", "10"),
    ("tcp_keepalives_interval", "5"),
    ("tcp_keepalives_count", "3"),
];

/// Creates the hub's schema. Two hosts starting at once may both try: the
/// loser's duplicate error is the winner's success.
async fn create_schema(admin: &mut sqlx::PgConnection, schema: &str) -> Result<(), StoreError> {
    match admin
        .execute(format!("CREATE SCHEMA IF NOT EXISTS {schema}").as_str())
        .await
    {
        Ok(_) => Ok(()),
        Err(sqlx::Error::Database(e))
            if matches!(e.code().as_deref(), Some("23505") | Some("42P06")) =>
        {
            Ok(())
        }
        Err(e) => Err(StoreError::Query(e)),
    }
}
