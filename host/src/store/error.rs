//! The store's one error type: what a caller of the store is told went
//! wrong (an unsupported URL, a database out of reach, a refused write, a
//! fence that no longer holds).

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("unsupported store URL '{0}': use sqlite://PATH (e.g. sqlite://agenthost.db) or postgres://USER@HOST:PORT/DATABASE")]
    UnsupportedUrl(String),
    #[error("cannot connect to the task hub store at {address}: {source}")]
    Connect {
        address: String,
        source: sqlx::Error,
    },
    #[error("could not migrate the store schema: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("store query failed: {0}")]
    Query(#[from] sqlx::Error),
    #[error("store write failed: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("store write failed: {0}")]
    Write(String),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// What a reader of a store that is not there (or holds no such hub)
    /// is told.
    #[error("{0}")]
    Absent(String),
    #[error("the store did not answer {what} within {after:?}: the database is unreachable or its connection went silent")]
    Deadline {
        what: &'static str,
        after: std::time::Duration,
    },
    #[error("this host no longer owns session '{session}': another host took it over while this one was paused or cut off, so this host's write was refused and its work on the run dropped")]
    Fenced { session: String },
    /// A run's caller may not continue the session: another caller's first
    /// message claimed it ([`super::run_tx::continues`]). Nothing of the
    /// run was stored.
    #[error("session '{session}' of agent '{agent}' was started by another caller: use a session id of your own")]
    SessionOfAnother { agent: String, session: String },
    #[error("this host's lease on the task hub ran out before it could send session '{session}' its next model request: the request was not sent, and the run goes on once the lease is renewed (or on the host that takes the session over)")]
    LeaseLapsed { session: String },
    #[error("the SQLite store {path} is already served by another process (pid {holder}): one process serves a SQLite file. Stop that one first, give this one another --store or --taskhub, or use PostgreSQL (--store postgres://…) to run several hosts on one task hub")]
    Locked { path: String, holder: String },
}

impl StoreError {
    /// The database could not be reached at all (as opposed to refusing a
    /// statement).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, StoreError::Connect { .. })
    }
}
