//! What a committed effect does to the instance it belongs to: the one
//! interpreter of [`Effect`] for whoever keeps an instance's image between
//! episodes (the hot image of `durable`). The match is exhaustive, so a new
//! effect cannot be ignored by accident: it must be given its meaning here.

use super::super::effects::Effect;
use super::super::instance::{InstanceState, RuntimeStatus};
use super::super::journal::Entry;

/// What an image of the instance must do besides the state [`evolve`]
/// already updated.
#[derive(Debug, PartialEq)]
pub enum Evolved<'a> {
    /// Nothing more: the effect changed only the state, or touches rows an
    /// image does not hold (tasks, other instances, the parent). Inbox rows
    /// an effect writes (timers, deliveries) reach an image once committed,
    /// from the writer, as every other inbox row does.
    Unchanged,
    /// These inbox rows are gone (consumed into the journal, or stale).
    Consumed(&'a [i64]),
    /// These inbox rows stay, but no longer make the instance ready.
    Parked(&'a [i64]),
    /// The journal grew by these entries, stamped `at`.
    Appended { entries: &'a [Entry], at: i64 },
    /// The execution ended or began anew: what comes next must be read.
    Over,
}

/// Applies `effect` to `state` and says what else changed.
pub fn evolve<'a>(state: &mut InstanceState, effect: &'a Effect) -> Evolved<'a> {
    match effect {
        Effect::ConsumeInbox(rows) => Evolved::Consumed(rows),
        Effect::ParkInbox(rows) => Evolved::Parked(rows),
        Effect::Append { entries, at } => {
            let bytes: u64 = entries.iter().map(Entry::size).sum();
            state.history = state.history.plus(entries.len() as u64, bytes);
            state.has_run = true;
            Evolved::Appended { entries, at: *at }
        }
        Effect::SetStatus { status, .. } => {
            if status.is_finished() || *status == RuntimeStatus::ContinuedAsNew {
                Evolved::Over
            } else {
                state.status = *status;
                Evolved::Unchanged
            }
        }
        Effect::Stepped => {
            state.history = state.history.plus(1, 0);
            Evolved::Unchanged
        }
        // Whether an idle purge happens is the store's to say: the image in
        // memory is let go either way, and read again when needed.
        // The image names the version it replays on: read it again.
        Effect::Upgrade { .. } => {
            state.history = state.history.plus(1, 0);
            Evolved::Over
        }
        Effect::NewExecution { .. }
        | Effect::Purge
        | Effect::PurgeIfIdle
        | Effect::ResetJournal
        | Effect::DropPending => Evolved::Over,
        Effect::ScheduleTask { .. }
        | Effect::Create(_)
        | Effect::Start(_)
        | Effect::ArmTimer { .. }
        | Effect::Deliver { .. }
        | Effect::SendEvent { .. }
        | Effect::TagCreated { .. }
        | Effect::NotifyParent { .. }
        | Effect::FinishTask { .. }
        | Effect::RetryTask { .. }
        | Effect::EntityOperation { .. } => Evolved::Unchanged,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::journal::{Call, Event};
    use crate::core::lifecycle::fixtures::instance;

    fn set(status: RuntimeStatus) -> Effect {
        Effect::SetStatus {
            status,
            output: None,
            custom_status: None,
        }
    }

    #[test]
    fn an_episode_that_appends_and_waits_grows_the_journal_and_keeps_the_instance() {
        let mut state = instance(RuntimeStatus::Pending);
        state.has_run = false;
        let entries = vec![
            Entry::Call(Call::Now { value: 1 }),
            Entry::Event(Event::TimerFired { task: 0 }),
        ];
        let effects = [
            Effect::ConsumeInbox(vec![3, 4]),
            Effect::Append {
                entries: entries.clone(),
                at: 9,
            },
            set(RuntimeStatus::Running),
            Effect::ArmTimer {
                task: 1,
                fire_at: 99,
            },
        ];
        let steps: Vec<Evolved> = effects.iter().map(|e| evolve(&mut state, e)).collect();
        assert_eq!(
            steps,
            vec![
                Evolved::Consumed(&[3, 4]),
                Evolved::Appended {
                    entries: &entries,
                    at: 9
                },
                Evolved::Unchanged,
                Evolved::Unchanged,
            ]
        );
        assert_eq!(state.status, RuntimeStatus::Running);
        assert!(state.has_run);
        assert_eq!(state.history.events, 2);
        let bytes: u64 = entries.iter().map(Entry::size).sum();
        assert_eq!(state.history.bytes, bytes);
    }

    #[test]
    fn every_ending_of_the_execution_is_over() {
        for effect in [
            set(RuntimeStatus::Completed),
            set(RuntimeStatus::Failed),
            set(RuntimeStatus::Terminated),
            set(RuntimeStatus::ContinuedAsNew),
            Effect::Purge,
            Effect::DropPending,
            Effect::NewExecution {
                input: "null".into(),
                digest: None,
                activity_set: None,
                carried: Vec::new(),
            },
        ] {
            let mut state = instance(RuntimeStatus::Running);
            assert_eq!(evolve(&mut state, &effect), Evolved::Over, "{effect:?}");
        }
    }

    #[test]
    fn suspending_changes_the_status_only() {
        let mut state = instance(RuntimeStatus::Running);
        let before = state.history;
        assert_eq!(
            evolve(&mut state, &set(RuntimeStatus::Suspended)),
            Evolved::Unchanged
        );
        assert_eq!(state.status, RuntimeStatus::Suspended);
        assert_eq!(state.history, before);
        assert_eq!(
            evolve(&mut state, &Effect::ParkInbox(vec![5])),
            Evolved::Parked(&[5])
        );
    }
}
