//! Durable orchestrations: journal, replay, timers, events, tasks.
//!
//! An instance runs in episodes. Each time its inbox has something new (a task
//! finished, a timer fired, an event was raised), its code runs again from the
//! start; [`replay`] answers every durable call from the journal until the code
//! passes its end, and an await on an unfinished task stops the episode. The
//! episode's decisions are committed in one transaction ([`crate::store`]);
//! then the [`Orchestrator`] runs the new tasks and wakes whoever is affected.
//! Waiting instances therefore cost rows, not memory.

mod episode;
pub mod journal;
mod orchestrator;
pub mod replay;
mod tasks;

pub use orchestrator::{Orchestrator, OrchestratorConfig};

use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    #[error("orchestration '{name}' is not registered; registered orchestrations: {}", registered.join(", "))]
    UnknownOrchestration {
        name: String,
        registered: Vec<String>,
    },
    #[error("instance '{0}' already exists and is not finished")]
    AlreadyExists(String),
    #[error("the {what} is {size} bytes, over the limit of {limit} bytes: store large data elsewhere (a blob store, a database) and pass a reference such as its URL or key")]
    TooLarge {
        what: &'static str,
        size: usize,
        limit: usize,
    },
    #[error("instance id must be 1 to 256 characters without '/'")]
    BadInstanceId,
    #[error(transparent)]
    Store(#[from] StoreError),
}
