//! The PostgreSQL store: several hosts on one task hub.
//!
//! Opening it ([`open`](open())) creates and migrates the hub's schema; each
//! host then joins the hub ([`shared_hub`]: leases, ownership and the
//! `NOTIFY` channel). The statements of [`crate::store::tx::Tx`] and
//! [`crate::store::run_tx::RunTx`] are [`tx`] and [`run_tx`], and the
//! writer loop ([`commit`]) normally writes a batch as one statement
//! instead: [`batch`] decides it in memory, [`statement`] sends it, with
//! the engine's rows from [`flush`], the runs' from [`runs`], ids from
//! [`ids`], and the batch's mark ([`marks`]) that settles a lost answer.
//!
//! The rest of the store uses what this file re-exports; this folder uses
//! the dialect-neutral files below it and never the SQLite one. (`batch` and
//! `runs` are visible to the store for their test counters alone.)

pub(super) mod batch;
mod commit;
mod flush;
mod ids;
mod marks;
mod open;
mod run_tx;
pub(super) mod runs;
mod shared_hub;
mod statement;
mod tx;
mod whole_runs;

pub(super) use commit::start;
pub(super) use open::open;
pub(super) use shared_hub::{notify, SharedHub, PAYLOAD_MAX};
pub use shared_hub::{Assigned, Membership, Role, Wake};
