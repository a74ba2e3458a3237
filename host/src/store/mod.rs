//! Durable state: sessions and their messages, agent runs, and the durable
//! engine's instances, journals, inboxes and tasks.
//!
//! The store only stores: it imports the core and nothing above it. Writes of
//! the durable engine carry out core decisions ([`crate::core::effects`]);
//! SQLite (WAL) is the embedded default.

mod apply;
mod episodes;
mod group_commit;
mod instances;
mod records;
mod sqlite;
mod tasks;
mod versions;
mod writes;

pub use apply::{Applied, Target};
pub use episodes::{Image, InboxRow};
pub use group_commit::InboxSink;
pub use instances::{InstanceFilter, InstanceRecord, Loaded};
pub use records::{NewRun, RunRecord, RunStatus, SessionKey, StoredMessage};
pub use sqlite::Store;
pub use tasks::TaskRow;
pub use writes::{Operation, TaskOutcome};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("unsupported store URL '{0}': use sqlite://PATH (e.g. sqlite://agenthost.db)")]
    UnsupportedUrl(String),
    #[error("could not open the store at {url}: {source}")]
    Open { url: String, source: sqlx::Error },
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
}

/// Milliseconds since the Unix epoch, the store's clock.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
pub(crate) mod test_fixtures {
    use crate::core::instance::NewInstance;

    /// A top-level instance of orchestration `o` on version `d`.
    pub fn new(id: &str) -> NewInstance {
        NewInstance {
            id: id.into(),
            name: "o".into(),
            input: "null".into(),
            digest: "d".into(),
            parent: None,
        }
    }
}
