//! One file per transition of an instance's life. Each `decide` takes the
//! instance as it stands and what happened, and returns what the caller is
//! told and the [`Effect`]s to write; none of them reads or writes anything.

pub mod arrivals;
pub mod continue_as_new;
pub mod episode_end;
pub mod purge;
pub mod raise;
pub mod resume;
pub mod start;
pub mod suspend;
pub mod task_done;
pub mod terminate;

use super::effects::Effect;
use super::instance::InstanceState;

/// What a management operation tells its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Done,
    NotFound,
    /// The instance is over: the operation no longer applies (HTTP 410).
    Finished,
    /// The instance is not in a state the operation applies to (HTTP 409).
    NotApplicable,
}

/// An answer and what to write for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub change: Change,
    pub effects: Vec<Effect>,
}

impl Decision {
    pub fn done(effects: Vec<Effect>) -> Self {
        Self {
            change: Change::Done,
            effects,
        }
    }

    pub fn only(change: Change) -> Self {
        Self {
            change,
            effects: Vec::new(),
        }
    }
}

/// The common refusals: no such instance, or one that is over.
fn refuse_missing_or_finished(state: Option<&InstanceState>) -> Result<&InstanceState, Decision> {
    match state {
        None => Err(Decision::only(Change::NotFound)),
        Some(s) if s.status.is_finished() => Err(Decision::only(Change::Finished)),
        Some(s) => Ok(s),
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use crate::core::instance::{InstanceState, ParentRef, RuntimeStatus, Size};

    pub fn instance(status: RuntimeStatus) -> InstanceState {
        InstanceState {
            id: "i".into(),
            status,
            execution: 7,
            parent: None,
            history: Size::default(),
            has_run: true,
        }
    }

    pub fn child(status: RuntimeStatus) -> InstanceState {
        InstanceState {
            parent: Some(ParentRef {
                id: "p".into(),
                execution: 3,
                task: 2,
            }),
            ..instance(status)
        }
    }
}
