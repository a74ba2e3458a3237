//! An arrival in hand: a task's result, or an event raised at an instance,
//! that the host holds and has not stored yet. The instance's next episode
//! runs on it first; the episode sees it as an inbox row that no stored row
//! can be ([`ROW`]). If the code takes it, the arrival and the episode are
//! written together and the arrival never enters the inbox: one commit
//! where there would be two. If the code leaves it (an event no wait takes
//! yet), or the instance would not take it now, it is stored as any other.

use crate::core::effects::Effect;
use crate::core::failure::TaskOutcome;
use crate::core::instance::{InstanceState, RuntimeStatus, Size};
use crate::core::journal::Event;
use crate::core::lifecycle::raise;
use crate::core::lifecycle::task_done::{self, Attempt, Settled};
use crate::core::lifecycle::Change;
use crate::core::limits::Limits;

/// What arrived for an instance.
#[derive(Debug, Clone, PartialEq)]
pub enum Arriving {
    /// A task's attempt ended.
    Result {
        attempt: Attempt,
        result: TaskOutcome,
    },
    /// An event was raised at the instance. `held`: the inbox rows the
    /// episode's image of the instance held (this event not counted): a
    /// store that holds more has rows the episode did not see (another
    /// host's, or a concurrent raise's), which the event must not overtake
    /// in memory; it is then stored as a raise would store it.
    Event {
        name: String,
        payload: String,
        held: u64,
    },
}

/// The inbox id an episode sees for an arrival in hand.
pub const ROW: i64 = -1;

/// The event `arriving` delivers to the instance now, if it is running and
/// would take it as its stored form would be taken: a result delivered (not
/// retried, not stale), an event accepted (`waiting` is what its inbox
/// holds; the event itself will not wait there, but it is judged as a raise
/// would judge it).
pub fn delivers(
    state: &InstanceState,
    arriving: &Arriving,
    waiting: Size,
    now: i64,
    limits: &Limits,
) -> Option<Event> {
    if state.status != RuntimeStatus::Running {
        return None;
    }
    let effects = match arriving {
        Arriving::Result { attempt, result } => {
            match task_done::decide(Some(state), true, attempt, result.clone(), now, limits) {
                Settled::Delivered(effects) => effects,
                Settled::Retrying(_) | Settled::Dropped => return None,
            }
        }
        Arriving::Event { name, payload, .. } => {
            match raise::decide(Some(state), name, payload, waiting, limits, None) {
                Ok(changed) if changed.change == Change::Done => changed.effects,
                Ok(_) | Err(_) => return None,
            }
        }
    };
    effects.into_iter().find_map(|effect| match effect {
        Effect::Deliver { event, .. } => Some(event),
        _ => None,
    })
}

/// Whether an episode's effects take the arrival in hand.
pub fn taken(effects: &[Effect]) -> bool {
    effects
        .iter()
        .any(|e| matches!(e, Effect::ConsumeInbox(rows) if rows.contains(&ROW)))
}

/// The effects as the store writes them: the arrival's row is in no inbox.
pub fn as_stored(effects: Vec<Effect>) -> Vec<Effect> {
    effects
        .into_iter()
        .filter_map(|effect| match effect {
            Effect::ConsumeInbox(rows) => {
                let rows: Vec<i64> = rows.into_iter().filter(|row| *row != ROW).collect();
                (!rows.is_empty()).then_some(Effect::ConsumeInbox(rows))
            }
            other => Some(other),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::failure::TaskError;
    use crate::core::lifecycle::fixtures::instance;
    use crate::core::retry::RetryPolicy;

    fn result(attempt: u32, result: Result<&str, &str>, retry: Option<RetryPolicy>) -> Arriving {
        Arriving::Result {
            attempt: Attempt {
                execution: 7,
                task: 3,
                attempt,
                retry,
            },
            result: result.map(str::to_string).map_err(TaskError::from),
        }
    }

    #[test]
    fn a_running_instance_takes_a_delivered_result_or_an_accepted_event_only() {
        let running = instance(RuntimeStatus::Running);
        let limits = Limits::default();
        let took = |state: &InstanceState, arriving: &Arriving| {
            delivers(state, arriving, Size::default(), 0, &limits)
        };
        assert_eq!(
            took(&running, &result(0, Ok("1"), None)),
            Some(Event::TaskCompleted {
                task: 3,
                result: "1".into()
            })
        );
        // A failure that is retried is not delivered.
        let policy = RetryPolicy {
            max_attempts: 3,
            first_delay_ms: 10,
            backoff_coefficient: 1.0,
            max_delay_ms: 10,
        };
        let retried = result(0, Err("no"), Some(policy));
        assert!(took(&running, &retried).is_none());
        // A failure with no retry left is.
        assert!(matches!(
            took(&running, &result(0, Err("no"), None)),
            Some(Event::TaskFailed { task: 3, .. })
        ));
        let event = Arriving::Event {
            name: "go".into(),
            payload: "1".into(),
            held: 0,
        };
        assert!(took(&running, &event).is_some());
        // Suspended or over: stored as any other arrival.
        for status in [RuntimeStatus::Suspended, RuntimeStatus::Completed] {
            assert!(took(&instance(status), &event).is_none(), "{status:?}");
        }
        // An inbox already full refuses the event as a raise would.
        let full = Size {
            events: limits.max_inbox_events,
            bytes: 0,
        };
        assert!(delivers(&running, &event, full, 0, &limits).is_none());
    }

    #[test]
    fn the_arrivals_row_is_taken_and_never_written() {
        let effects = vec![
            Effect::ConsumeInbox(vec![4, ROW]),
            Effect::ConsumeInbox(vec![ROW]),
            Effect::FinishTask { task: 1 },
        ];
        assert!(taken(&effects));
        assert_eq!(
            as_stored(effects),
            vec![
                Effect::ConsumeInbox(vec![4]),
                Effect::FinishTask { task: 1 }
            ]
        );
        assert!(!taken(&[Effect::ParkInbox(vec![ROW])]));
    }
}
