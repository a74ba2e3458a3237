//! Durable orchestrations: the services that carry out what the core decides.
//!
//! An instance runs in episodes. Each time its inbox has something new (a task
//! finished, a timer fired, an event was raised), its code runs again from the
//! start; [`crate::core::replay`] answers every durable call from the journal
//! until the code passes its end, and an await on an unfinished task stops the
//! episode. The core turns the episode into effects, the store commits them
//! (group commit, shared across instances), and only then does the
//! [`Orchestrator`] run the new tasks and wake whoever is affected. Waiting
//! instances therefore cost rows, not memory.

mod agent_session;
mod answers;
mod episode;
mod episode_slot;
mod fan_out;
mod for_a_worker;
mod given_back;
mod hot;
mod in_flight;
mod in_hand_episode;
mod orchestrator;
mod pace;
mod remote_call;
mod replay_check;
mod sdk_entity;
mod sdk_episode;
mod starts;
mod task_outcome;
mod tasks;

/// The records callers of this service read and the operations they ask for.
pub use crate::store::{InstanceFilter, InstanceRecord, Operation, VersionInUse};
pub use answers::InstanceView;
pub use orchestrator::{Orchestrator, OrchestratorConfig};
pub use replay_check::{check_version, CheckLimits, Moved, OnNewVersion};

use crate::core::limits::LimitError;
use crate::store::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum DurableError {
    #[error("orchestration '{name}' is not registered; registered orchestrations: {}", registered.join(", "))]
    UnknownOrchestration {
        name: String,
        registered: Vec<String>,
    },
    #[error("the input of orchestration '{orchestration}' does not match its input schema: {}", problems.join("; "))]
    InputRefused {
        orchestration: String,
        problems: Vec<String>,
    },
    #[error("instance '{0}' already exists and is not finished")]
    AlreadyExists(String),
    #[error(transparent)]
    Limit(#[from] LimitError),
    #[error("an instance id must be 1 to 256 characters without '/' or NUL, and not an entity's @name@key (those are the entities')")]
    BadInstanceId,
    #[error("an orchestration's name must be 1 to 256 characters without NUL")]
    BadName,
    #[error("no instance with id '{0}'")]
    InstanceNotFound(String),
    /// The instance is over: the operation no longer applies.
    #[error("instance '{0}' has already finished")]
    InstanceFinished(String),
    #[error("instance '{0}' is not in a state this operation applies to")]
    InvalidState(String),
    #[error("instance '{0}' has not finished: terminate it before purging its history")]
    InstanceRunning(String),
    /// An event name the host uses itself (an entity's operations travel in
    /// it): raised from outside it could forge a task's result.
    #[error("event name '{0}' is reserved for entity operations: signal the entity instead")]
    ReservedEvent(String),
    /// A recursive terminate or purge reached more sub-orchestrations than
    /// one call walks.
    #[error("instance '{0}' has more than {1} sub-orchestrations under it: terminate or purge them in parts")]
    TooManyDescendants(String, usize),
    #[error(transparent)]
    Store(#[from] StoreError),
}
