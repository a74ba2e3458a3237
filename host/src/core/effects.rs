//! What a decision asks the shell to do, as data. The store writes a
//! decision's effects in one transaction, in order, and makes no choices of
//! its own; the dispatcher then runs the tasks and wakes the instances named.

use super::instance::{NewInstance, ParentRef, RuntimeStatus};
use super::journal::{Call, Entry, Event, FailureDetails};

#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Remove inbox rows: consumed into the journal, or stale.
    ConsumeInbox(Vec<i64>),
    /// Keep inbox rows of raised events no code waits for yet, out of the
    /// journal: they are offered to each later episode but no longer make
    /// the instance ready by themselves.
    ParkInbox(Vec<i64>),
    /// Append rows to the current execution's journal, stamped `at`: the
    /// episode's time, which is what the guest's clock read when it made the
    /// calls, so a replay reads the very same time.
    Append { entries: Vec<Entry>, at: i64 },
    /// Queue an agent call or activity of the current execution.
    ScheduleTask { task: u32, call: Call },
    /// Create an instance (its first execution). For a sub-orchestration,
    /// the store first applies [`crate::core::lifecycle::start`] to the id.
    Create(NewInstance),
    /// A durable timer: an inbox row that becomes visible at `fire_at`.
    ArmTimer { task: u32, fire_at: i64 },
    /// Put an event in an instance's inbox, addressed to one execution;
    /// with `visible_at` (ms), unseen until then (an operation signalled to
    /// an entity for later).
    Deliver {
        instance: String,
        execution: i64,
        event: Event,
        visible_at: Option<i64>,
    },
    /// Raise an event at another orchestration instance's current
    /// execution (an SDK orchestration's `send_event`), read in the
    /// writing transaction: an instance that does not exist or is over
    /// does not get it (the event is dropped, as the managed scheduler
    /// discards it), and the sender goes on either way.
    SendEvent { instance: String, event: Event },
    /// Give the instance this write created (a sub-orchestration) the tags
    /// its parent's worker gave it; nothing when the write created none of
    /// that id (a running instance held it).
    TagCreated { id: String, tags: String },
    /// Set the status; `None` fields keep their value.
    SetStatus {
        status: RuntimeStatus,
        output: Option<String>,
        custom_status: Option<String>,
    },
    /// Begin a new execution (continue-as-new): the journal and tasks start
    /// over; raised events not yet taken are carried into it.
    NewExecution {
        input: String,
        /// The component version it moves to, if it moves.
        digest: Option<String>,
        /// With `digest`: the activity set it pins from then on.
        activity_set: Option<String>,
        carried: Vec<Event>,
    },
    /// Move the current execution to another version of its component,
    /// pinning `activity_set` from then on: a replay check found that
    /// version decides as the old one did on the whole journal. Counts one
    /// step, as [`Effect::Stepped`] does, so an episode the old code decided
    /// meanwhile (on a journal the check never saw) finds its fence broken
    /// and is decided again, by the new code.
    Upgrade {
        digest: String,
        activity_set: Option<String>,
    },
    /// Drop the execution's pending tasks and inbox (it is over).
    DropPending,
    /// Tell a parent how its child ended.
    NotifyParent { parent: ParentRef, event: Event },
    /// Remove a task row (it finished, for good or for a retry).
    FinishTask { task: u32 },
    /// Schedule the next attempt of a failed task.
    RetryTask {
        task: u32,
        attempt: u32,
        due_at: i64,
    },
    /// Delete the instance and everything it holds.
    Purge,
    /// Empty the execution's journal (its bytes counted from nothing, its
    /// output cleared), for a rewind that writes it again after the old
    /// rows' numbers.
    ResetJournal,
    /// Delete the instance if its inbox is empty once this write consumed
    /// what it took: an entity its batch left with no state, no lock and
    /// nothing waiting. An operation that arrived meanwhile keeps it.
    PurgeIfIdle,
    /// Queue an operation on a durable entity, creating the entity (an
    /// instance of its own) if it has none yet; at `due_at` (ms) when it
    /// is scheduled for later (its inbox row is invisible until then, as a
    /// timer's is).
    EntityOperation {
        entity: NewInstance,
        event: Event,
        due_at: Option<i64>,
    },
    /// Count one more step of an instance that journals none (an entity's
    /// batch): its history count grows by one with no row written, so that
    /// an episode decided before this one (on a host paused past its lease
    /// that got the instance back since) finds its fence broken, as it
    /// would find a journal grown.
    Stepped,
    /// Start an instance of its own (an entity's operation started it);
    /// an unfinished instance holding its id keeps it, and the start is
    /// dropped, as a start of a running id is.
    Start(NewInstance),
}

impl Effect {
    /// The reason, when `effects` fail their instance (its output).
    /// The terminal status the effects give the instance, if any.
    pub fn final_status(effects: &[Effect]) -> Option<RuntimeStatus> {
        effects.iter().find_map(|e| match e {
            Effect::SetStatus { status, .. } if status.is_finished() => Some(*status),
            _ => None,
        })
    }

    pub fn failure(effects: &[Effect]) -> Option<&str> {
        effects.iter().find_map(|e| match e {
            Effect::SetStatus {
                status: RuntimeStatus::Failed,
                output,
                ..
            } => output.as_deref(),
            _ => None,
        })
    }

    /// Gives the failure its child reports to its parent the details an SDK
    /// worker reported with it.
    pub fn with_reported_failure(effects: &mut [Effect], reported: Box<FailureDetails>) {
        for effect in effects {
            if let Effect::NotifyParent {
                event: Event::TaskFailed { details, .. },
                ..
            } = effect
            {
                *details = Some(reported.clone());
            }
        }
    }

    /// The event a parent gets when its child ends with `status`.
    pub fn child_ended(
        parent: ParentRef,
        child: &str,
        status: RuntimeStatus,
        output: Option<&str>,
    ) -> Self {
        let task = parent.task;
        let output = output.unwrap_or("null").to_string();
        let event = if status == RuntimeStatus::Completed {
            Event::TaskCompleted {
                task,
                result: output,
            }
        } else {
            Event::TaskFailed {
                task,
                error: format!(
                    "sub-orchestration {child} {}: {output}",
                    status.as_str().to_lowercase()
                ),
                details: None,
            }
        };
        Effect::NotifyParent { parent, event }
    }
}
