//! Durable state: sessions and their messages, agent runs, and the durable
//! engine's instances, journals, inboxes and tasks.
//!
//! The store only stores: it imports the core and nothing above it. Writes of
//! the durable engine carry out core decisions ([`crate::core::effects`]).
//! SQLite (WAL) is the embedded default; PostgreSQL lets several hosts share
//! one task hub. The two differ only in [`tx::Tx`] and in their writer loop.

mod apply;
mod approvals;
#[cfg(test)]
mod batch_equivalence;
mod claims;
mod commit_queue;
mod durable_records;
mod episodes;
mod file_lock;
#[cfg(test)]
mod front_runs;
mod group_commit;
mod hub;
mod instances;
mod open;
mod postgres_batch;
mod postgres_commit;
mod postgres_flush;
mod postgres_ids;
mod postgres_marks;
mod postgres_run_tx;
mod postgres_runs;
mod postgres_statement;
mod postgres_tx;
mod records;
mod remote_tasks;
mod retention;
#[cfg(test)]
mod run_batches;
mod run_control;
mod run_reads;
mod run_tx;
mod run_writes;
mod sessions;
mod shared_hub;
mod sqlite_commit;
mod sqlite_run_tx;
mod sqlite_tx;
#[cfg(test)]
mod step_writes;
mod streams;
mod tasks;
mod tx;
mod versions;
mod writer_health;
mod writes;

pub use crate::core::lifecycle::Operation;
pub use crate::core::lifecycle::TaskFate;
pub use approvals::{Decided, Decision, PendingCall};
pub use commit_queue::InboxSink;
pub use durable_records::{Applied, ArrivalWritten, Arriving, Image, InboxRow, Loaded, Target};
pub use hub::{TaskHub, DEFAULT_HUB};
pub use instances::{InstanceFilter, InstanceRecord};
pub use open::{Kind, Store};
pub use records::{NewRun, RunRecord, RunStatus, SessionKey, StoredMessage, CANCELED};
pub use run_control::RunFilter;
pub use sessions::{Deletion, RunOutcome};
pub use shared_hub::{Assigned, Membership, Role, Wake};
pub use streams::NewStreamRow;
pub use tasks::TaskRow;
pub use versions::VersionInUse;
pub use writer_health::WriterCheck;

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
    #[error("the store did not answer {what} within {after:?}: the database is unreachable or its connection went silent")]
    Deadline {
        what: &'static str,
        after: std::time::Duration,
    },
    #[error("this host no longer owns session '{session}': another host took it over while this one was paused or cut off, so this host's write was refused and its work on the run dropped")]
    Fenced { session: String },
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

/// Milliseconds since the Unix epoch, the store's clock.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
pub(crate) mod test_fixtures {
    use crate::core::instance::NewInstance;

    /// A store in a fresh temporary directory.
    pub async fn sqlite() -> Result<(tempfile::TempDir, super::Store), super::StoreError> {
        let dir = tempfile::tempdir().map_err(|e| super::StoreError::Corrupt(e.to_string()))?;
        let url = format!("sqlite://{}", dir.path().join("t.db").display());
        let store =
            super::Store::open(&url, &super::TaskHub::default(), Default::default()).await?;
        Ok((dir, store))
    }

    /// The PostgreSQL database `AGENTHOST_TEST_STORE` names, if any
    /// (`make test` names one for its second pass).
    pub fn postgres_url() -> Option<String> {
        std::env::var("AGENTHOST_TEST_STORE")
            .ok()
            .filter(|u| u.starts_with("postgres"))
    }

    /// A store on PostgreSQL in a fresh hub named `prefix` and a uuid.
    pub async fn postgres(url: &str, prefix: &str) -> Result<super::Store, super::StoreError> {
        let hub = super::TaskHub::new(&format!("{prefix}{}", uuid::Uuid::new_v4().simple()))
            .map_err(|e| super::StoreError::Write(e.to_string()))?;
        super::Store::open(url, &hub, Default::default()).await
    }

    /// SQLite, and PostgreSQL when a database is named (a fresh hub named
    /// `prefix` and a uuid): the same test on both stores.
    pub async fn both(
        prefix: &str,
    ) -> Result<Vec<(super::Store, Option<tempfile::TempDir>)>, super::StoreError> {
        let (dir, sqlite) = sqlite().await?;
        let mut stores = vec![(sqlite, Some(dir))];
        if let Some(url) = postgres_url() {
            stores.push((postgres(&url, prefix).await?, None));
        }
        Ok(stores)
    }

    /// A top-level instance of orchestration `o` on version `d`.
    pub fn new(id: &str) -> NewInstance {
        NewInstance {
            id: id.into(),
            name: "o".into(),
            input: "null".into(),
            digest: "d".into(),
            activity_set: None,
            parent: None,
            traceparent: None,
        }
    }
}
