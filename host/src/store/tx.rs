//! The statements the durable engine's writes are carried out with, inside
//! one transaction. This is where the two databases differ, and the only
//! place: what each write means ([`super::writes`]) and which rows its
//! effects touch ([`super::apply`]) are written once, against this trait.
//!
//! SQLite implements it on the writer thread's own connection (every
//! statement completes at once, see [`super::sqlite`]); PostgreSQL on the
//! writer's sqlx connection, with the instance row locked for the
//! transaction.

use std::future::Future;

use super::durable_records::InboxRow;
use super::durable_records::Loaded;
use super::durable_records::Target;
use super::error::StoreError;
use crate::core::instance::{NewInstance, RuntimeStatus, Size};
use crate::core::journal::Entry;
use crate::core::lifecycle::task_done::Attempt;

/// Changes to an instance's own row, written by one statement.
#[derive(Debug, Default)]
pub(super) struct RowUpdate {
    pub status: Option<RuntimeStatus>,
    pub output: Option<String>,
    pub custom_status: Option<String>,
    pub events: i64,
    pub bytes: i64,
}

/// What a new execution of an instance begins with.
pub(super) struct NextExecution<'a> {
    pub id: &'a str,
    pub old: i64,
    pub next: i64,
    pub input: &'a str,
    /// The component version it moves to, if it moves.
    pub digest: Option<&'a str>,
    /// With `digest`, the activity set it pins from then on.
    pub activity_set: Option<&'a str>,
}

pub(super) trait Tx {
    /// The host this transaction writes for, when it runs episodes on a hub
    /// shared by several hosts: what it creates is its own, and it commits
    /// an episode only on an instance it still owns. `None` on SQLite.
    fn me(&self) -> Option<&str>;
    /// The instance as a decision reads it; PostgreSQL also locks its row
    /// until the transaction ends, so two hosts never decide on one state.
    fn load(&mut self, id: &str) -> impl Future<Output = Result<Option<Loaded>, StoreError>>;
    /// Another instance than the one written, read to address an event to
    /// it (an orchestration's `send_event`), not to create it: a batch
    /// that assumes ids it did not read are new cannot answer it.
    fn look_up(&mut self, id: &str) -> impl Future<Output = Result<Option<Loaded>, StoreError>> {
        self.load(id)
    }
    /// Events and bytes waiting in an instance's inbox.
    fn inbox_size(&mut self, id: &str) -> impl Future<Output = Result<Size, StoreError>>;
    /// Whether the task of this attempt is still waiting for its result.
    fn task_pending(
        &mut self,
        id: &str,
        attempt: &Attempt,
    ) -> impl Future<Output = Result<bool, StoreError>>;
    /// The current execution's journal, in order, with each row's time.
    fn journal(&mut self, id: &str) -> impl Future<Output = Result<Vec<(Entry, i64)>, StoreError>>;
    /// The whole inbox, timers not yet due too, in arrival order.
    fn inbox(&mut self, id: &str) -> impl Future<Output = Result<Vec<InboxRow>, StoreError>>;

    /// Rows of instance `id`'s inbox (the id lets a batch that gathers
    /// its writes know whose inbox shrank).
    fn delete_inbox_rows(
        &mut self,
        id: &str,
        rows: &[i64],
    ) -> impl Future<Output = Result<(), StoreError>>;
    fn park_inbox_rows(
        &mut self,
        id: &str,
        rows: &[i64],
    ) -> impl Future<Output = Result<(), StoreError>>;
    /// Journal rows `(seq, entry as JSON)`.
    fn append_journal(
        &mut self,
        id: &str,
        rows: &[(i64, String)],
        at: i64,
    ) -> impl Future<Output = Result<(), StoreError>>;
    fn update_instance(
        &mut self,
        id: &str,
        update: RowUpdate,
        now: i64,
    ) -> impl Future<Output = Result<(), StoreError>>;
    /// The invoke key that owns instance `id` (`instances.caller`); `None`
    /// for one a caller of full reach started, or none at all. Read only
    /// when a finished id is started again (see [`super::apply::create`]).
    fn caller_of(&mut self, id: &str) -> impl Future<Output = Result<Option<String>, StoreError>>;
    /// A fresh execution number, never handed out before.
    fn new_execution(&mut self, id: &str) -> impl Future<Output = Result<i64, StoreError>>;
    fn insert_instance(
        &mut self,
        new: &NewInstance,
        execution: i64,
        now: i64,
    ) -> impl Future<Output = Result<(), StoreError>>;
    /// Returns the row's id, which orders the inbox.
    fn push_inbox(
        &mut self,
        id: &str,
        execution: i64,
        event: &str,
        visible_at: i64,
    ) -> impl Future<Output = Result<i64, StoreError>>;
    /// Tasks `(task, call as JSON)`, due now.
    fn insert_tasks(
        &mut self,
        target: &Target,
        tasks: &[(u32, String)],
        now: i64,
    ) -> impl Future<Output = Result<(), StoreError>>;
    fn finish_task(
        &mut self,
        target: &Target,
        task: u32,
    ) -> impl Future<Output = Result<(), StoreError>>;
    fn retry_task(
        &mut self,
        target: &Target,
        task: u32,
        attempt: u32,
        due_at: i64,
    ) -> impl Future<Output = Result<(), StoreError>>;
    /// Drops the instance's inbox and tasks.
    fn clear_pending(&mut self, id: &str) -> impl Future<Output = Result<(), StoreError>>;
    /// Empties the journal and tasks, keeps the events raised for the old
    /// execution (moved to the new one), drops everything else addressed to
    /// it, and resets the row.
    fn begin_execution(
        &mut self,
        next: NextExecution<'_>,
    ) -> impl Future<Output = Result<(), StoreError>>;
    /// Deletes the instance and everything of it.
    fn purge(&mut self, id: &str) -> impl Future<Output = Result<(), StoreError>>;
    /// Moves the instance's execution to component version `digest`, with
    /// the activity set it pins from then on (an upgrade a replay check
    /// proved).
    fn move_version(
        &mut self,
        id: &str,
        digest: &str,
        activity_set: Option<&str>,
    ) -> impl Future<Output = Result<(), StoreError>>;
    /// Empties the journal of `id` and counts its history's bytes from
    /// nothing (not its events: the rows written again are numbered after
    /// the old), its output cleared (a rewind writes the journal again).
    fn reset_journal(&mut self, id: &str) -> impl Future<Output = Result<(), StoreError>>;
    /// Gives an instance created in this transaction its tags (a JSON
    /// object of strings): a sub-orchestration's, as its parent's worker
    /// gave them.
    fn set_tags(&mut self, id: &str, tags: &str) -> impl Future<Output = Result<(), StoreError>>;
}
