//! Durable state: sessions and their messages, agent runs, and the durable
//! engine's instances, journals, inboxes and tasks.
//!
//! The store only stores: it imports the core and nothing above it. Writes of
//! the durable engine carry out core decisions ([`crate::core::effects`]).
//! SQLite (WAL) is the embedded default; PostgreSQL lets several hosts share
//! one task hub. The two differ only in [`tx::Tx`] (and [`run_tx::RunTx`]),
//! in their writer loop and in how a store is opened, each in its own folder
//! ([`sqlite`], [`postgres`]).
//!
//! The files stand in layers, grouped bottom up below (`STORE_LAYERS` in
//! `house_rules.rs` checks them): a file imports files of its own layer or
//! below, never above. This file is the store's face to the rest of the
//! crate: it declares the rest and re-exports what the crate uses, and no
//! file of the store below it imports through it (its tests, above it, do).

// The ground: the error, the clock, hubs, the embedded migrations, the rows
// as host types, the writer's health.
mod clock;
mod error;
mod hub;
mod keys;
mod migrations;
mod records;
mod writer_health;

// The write model: what each write means, written once against the
// statements of `Tx` and `RunTx`.
mod apply;
mod decided;
mod durable_records;
mod rewinds;
mod run_tx;
mod run_writes;
mod tx;
mod writes;

// The committer's queue, which each dialect's writer loop drains.
mod commit_queue;

// The dialects.
mod postgres;
mod sqlite;

// The committer, then the store.
mod group_commit;
mod open;

// The store's calls.
mod approvals;
mod claims;
mod due;
mod episodes;
mod held_runs;
mod hosts;
mod instances;
mod remote_tasks;
mod replay_checks;
mod retention;
mod run_control;
mod run_reads;
mod sessions;
mod streams;
mod tasks;
mod versions;

pub use crate::core::lifecycle::Operation;
pub use crate::core::lifecycle::TaskFate;
pub use approvals::{Decided, Decision, PendingCall};
pub use clock::now_ms;
pub use keys::sorted_id;
// Named by the crate's docs (`durable/hot.rs`); its code passes a closure.
#[allow(unused_imports)]
pub use commit_queue::InboxSink;
pub use due::{due_sql, due_work, postgres_now_plus};
pub use durable_records::{
    Applied, ArrivalWritten, Arriving, Image, InboxRow, Loaded, Target, TaskRow,
};
pub use error::StoreError;
pub use hub::{TaskHub, DEFAULT_HUB};
pub use instances::{InstanceFilter, InstanceRecord};
pub use open::{Kind, Store};
pub use postgres::{Assigned, Membership, Role, Wake};
pub use records::{
    NewRun, NewStreamRow, RunRecord, RunStatus, SessionKey, StoredMessage, CANCELED,
};
pub use replay_checks::{CheckReads, Checkable, ReadOnlyHub};
pub use run_control::RunFilter;
pub use sessions::{Deletion, RunOutcome, SessionStamp};
pub use tasks::{DueTask, UnreadableTask};
pub use versions::VersionInUse;
pub use writer_health::WriterCheck;

// Tests of the whole store, on both stores and both roads of a batch.
#[cfg(test)]
mod batch_equivalence;
#[cfg(test)]
mod front_runs;
#[cfg(test)]
mod run_batches;
#[cfg(test)]
mod step_writes;

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
            start_at: None,
            caller: None,
        }
    }
}
