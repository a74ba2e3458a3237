//! What the task kinds (`tasks`, `remote_call`) share: what running a task
//! produced, which the orchestrator stores, and the instance's own component
//! version they run in.

use crate::core::failure::{TaskError, TaskOutcome};
use std::sync::Arc;

use super::Orchestrator;
use crate::store::TaskRow;
use crate::wasm::LoadedComponent;

pub enum Outcome {
    /// Its result, or why it failed, in the host's words.
    Done(Result<String, String>),
    /// It failed as a Durable Task SDK worker reported it (kept whole).
    Reported(TaskError),
    /// The host is stopping, or the task cannot run now: it stays in the
    /// store and runs again later.
    Interrupted,
}

impl Outcome {
    /// What the store records: `None` while the task must run again.
    pub(super) fn recorded(self) -> Option<TaskOutcome> {
        match self {
            Outcome::Done(result) => Some(result.map_err(TaskError::from)),
            Outcome::Reported(error) => Some(Err(error)),
            Outcome::Interrupted => None,
        }
    }
}

/// The component version the task's instance runs on; `Err` holds the
/// task's outcome when it cannot be had (`doing`: what waits, for the log).
pub(super) async fn instance_component(
    orchestrator: &Orchestrator,
    row: &TaskRow,
    doing: &str,
) -> Result<Arc<LoadedComponent>, Outcome> {
    match orchestrator
        .registry
        .pinned(&row.component_digest, &row.orchestration)
        .await
    {
        Ok(component) => Ok(component),
        Err(e) if e.is_transient() => {
            tracing::warn!(instance_id = %row.instance_id, error = %e, "cannot load the instance's component version now; {doing} runs later");
            Err(Outcome::Interrupted)
        }
        Err(e) => Err(Outcome::Done(Err(e.to_string()))),
    }
}
