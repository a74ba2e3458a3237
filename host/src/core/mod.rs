//! The durable engine's rules, and nothing else: ids, journal entries, replay,
//! limits, and one `decide` function per lifecycle transition; and the chat
//! shapes with the rule of which part of a long conversation a model sees.
//!
//! Pure by construction: no tokio, sqlx or wasmtime is imported below this
//! line, so every rule is unit-tested without wasm or a database. The layers
//! above carry out what these functions decide: the store writes the
//! [`effects::Effect`]s of a decision in one transaction (making no choices of
//! its own), then the episode runner and the dispatcher act on them.

pub mod chat;
pub mod dafx;
pub mod effects;
pub mod entity_locks;
pub mod failure;
pub mod fence;
pub mod history_window;
pub mod id_reuse;
pub mod ids;
pub mod instance;
pub mod instance_history;
pub mod journal;
pub mod lifecycle;
pub mod limits;
pub mod replay;
pub mod replay_check;
pub mod retry;
pub mod sdk_actions;
pub mod sdk_entities;
pub mod sdk_history;
