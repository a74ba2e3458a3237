//! The SQLite store: one file, served by one process.
//!
//! Opening it ([`open`](open())) locks the file for this process
//! ([`file_lock`]) and migrates it. The statements of
//! [`crate::store::tx::Tx`] and [`crate::store::run_tx::RunTx`] are [`tx`]
//! and [`run_tx`], on the connection the writer ([`commit`]) keeps: every statement
//! completes inside its call, so the shared async write code finishes in
//! one poll, on the writer's thread or on a caller's that found it idle.
//!
//! The rest of the store uses what this file re-exports; this folder uses
//! the dialect-neutral files below it and never the PostgreSQL one.

mod checkpoint;
mod commit;
mod file_lock;
mod open;
mod run_tx;
mod tx;
mod whole_runs;

pub(super) use commit::{start, Handle as WriterHandle};
pub(super) use file_lock::StoreLock;
pub(super) use open::open;
#[cfg(test)]
pub(super) use whole_runs::counts as whole_counts;
