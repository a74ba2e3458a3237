//! One file per transition of an instance's life, and one entry for all of
//! them: [`decide`] takes the instance as it stands and a [`Command`] (what
//! happened) and returns a [`Decision`]: what the caller is told, the
//! [`Effect`]s to write, and the instance as it will stand once they are
//! written ([`evolve`] folded over them). Nothing here reads or writes.
//!
//! Starting an instance is the one transition outside [`decide`]
//! ([`start::plan`]): it has no instance to stand on, and the store allocates
//! the new execution's number as it writes it.

pub mod arrivals;
pub mod continue_as_new;
pub mod episode_end;
pub mod evolve;
pub mod in_hand;
pub mod purge;
pub mod raise;
pub mod resume;
pub mod rewind;
#[cfg(test)]
mod scenarios;
pub mod start;
pub mod suspend;
pub mod task_done;
pub mod terminate;

use super::effects::Effect;
use super::instance::{InstanceState, Size};
use super::limits::{LimitError, Limits};
use crate::core::failure::TaskOutcome;
use episode_end::Episode;
use evolve::{evolve, Evolved};
use task_done::{Attempt, Settled};

/// Everything that can happen to an instance that exists.
#[derive(Debug)]
pub enum Command<'a> {
    /// An external event raised at it; `waiting` is what its inbox holds.
    Raise {
        name: &'a str,
        payload: &'a str,
        waiting: Size,
        limits: &'a Limits,
        /// Unseen until then (ms): an operation signalled for later.
        due_at: Option<i64>,
    },
    /// Suspend, resume, terminate or purge.
    Manage(&'a Operation),
    /// A task's attempt ended; `pending`: the task's row still exists for
    /// the attempt's execution.
    TaskDone {
        pending: bool,
        attempt: &'a Attempt,
        result: TaskOutcome,
        now: i64,
        limits: &'a Limits,
    },
    /// An episode of its code ended.
    EndEpisode {
        /// Boxed: by far the largest command, and one per episode anyway.
        episode: Box<Episode>,
        limits: &'a Limits,
    },
    /// Woken with nothing new for its code: only the rows addressed to an
    /// older execution are dropped, and the code does not run.
    Idle { stale: Vec<i64> },
}

/// What the caller of a [`Command`] is told.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A raise or a management operation: done, or why not.
    Change(Change),
    /// A raise refused by a limit: nothing is written.
    Refused(LimitError),
    /// What became of a task's result.
    Task(TaskFate),
    /// An episode's end: its effects say it all.
    Episode,
}

/// What became of a task's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskFate {
    /// Delivered to the instance's inbox.
    Delivered,
    /// Its task runs again later.
    Retrying,
    /// Stale (the instance moved on, or the task is no longer pending).
    Dropped,
}

/// The one shape of every transition's result.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub reply: Reply,
    pub effects: Vec<Effect>,
    /// The instance once the effects are written; `None` when there is none
    /// (missing, purged) or its execution ended (what follows must be read).
    pub next: Option<InstanceState>,
}

/// What `command` means for the instance as it stands (`None`: no such
/// instance).
pub fn decide(state: Option<&InstanceState>, command: Command) -> Decision {
    let (reply, effects) = match command {
        Command::Raise {
            name,
            payload,
            waiting,
            limits,
            due_at,
        } => match raise::decide(state, name, payload, waiting, limits, due_at) {
            Ok(changed) => (Reply::Change(changed.change), changed.effects),
            Err(refused) => (Reply::Refused(refused), Vec::new()),
        },
        Command::Manage(op) => {
            let changed = manage(state, op);
            (Reply::Change(changed.change), changed.effects)
        }
        Command::TaskDone {
            pending,
            attempt,
            result,
            now,
            limits,
        } => match task_done::decide(state, pending, attempt, result, now, limits) {
            Settled::Delivered(effects) => (Reply::Task(TaskFate::Delivered), effects),
            Settled::Retrying(effects) => (Reply::Task(TaskFate::Retrying), effects),
            Settled::Dropped => (Reply::Task(TaskFate::Dropped), Vec::new()),
        },
        Command::EndEpisode { episode, limits } => match state {
            Some(state) => (Reply::Episode, episode_end::decide(state, *episode, limits)),
            None => (Reply::Episode, Vec::new()),
        },
        Command::Idle { stale } if stale.is_empty() => (Reply::Episode, Vec::new()),
        Command::Idle { stale } => (Reply::Episode, vec![Effect::ConsumeInbox(stale)]),
    };
    let next = state.and_then(|state| after(state, &effects));
    Decision {
        reply,
        effects,
        next,
    }
}

/// The instance once `effects` are written, or `None` once they end it.
fn after(state: &InstanceState, effects: &[Effect]) -> Option<InstanceState> {
    let mut next = state.clone();
    for effect in effects {
        if evolve(&mut next, effect) == Evolved::Over {
            return None;
        }
    }
    Some(next)
}

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

/// A management transition's answer and what to write for it.
#[derive(Debug, Clone, PartialEq)]
pub struct Changed {
    pub change: Change,
    pub effects: Vec<Effect>,
}

impl Changed {
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

/// A management operation on one instance.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    Suspend,
    Resume,
    /// Ends the instance now with `output` as its output: JSON text, or
    /// an SDK's own text (its large-payload store's token), kept as given.
    Terminate {
        output: String,
    },
    Purge,
    /// Run what failed again ([`rewind`]); decided on the instance's
    /// journal, which the store reads for it.
    Rewind {
        reason: Option<String>,
    },
}

impl Operation {
    /// A terminate whose output is the text `reason` (a JSON string).
    pub fn terminate_for(reason: &str) -> Self {
        Self::Terminate {
            output: serde_json::Value::String(reason.to_string()).to_string(),
        }
    }
}

/// What a management operation on the instance as it stands means.
fn manage(state: Option<&InstanceState>, op: &Operation) -> Changed {
    match op {
        Operation::Suspend => suspend::decide(state),
        Operation::Resume => resume::decide(state),
        Operation::Terminate { output } => terminate::decide(state, output),
        Operation::Purge => purge::decide(state),
        // Decided by `rewind::decide`, with the journal.
        Operation::Rewind { .. } => Changed::only(Change::NotApplicable),
    }
}

/// The common refusals: no such instance, or one that is over.
fn refuse_missing_or_finished(state: Option<&InstanceState>) -> Result<&InstanceState, Changed> {
    match state {
        None => Err(Changed::only(Change::NotFound)),
        Some(s) if s.status.is_finished() => Err(Changed::only(Change::Finished)),
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
