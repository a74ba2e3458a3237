//! A task (agent call or activity) finished an attempt. Success is delivered
//! to the instance; a failure is retried under the call's policy (bounded by
//! the host) or delivered as a failure. A result for an execution that is no
//! longer current, or for a task no longer pending, is dropped.

use crate::core::effects::Effect;
use crate::core::failure::TaskOutcome;
use crate::core::instance::InstanceState;
use crate::core::journal::Event;
use crate::core::limits::Limits;
use crate::core::retry::RetryPolicy;

/// The attempt that finished.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub execution: i64,
    pub task: u32,
    pub attempt: u32,
    pub retry: Option<RetryPolicy>,
}

/// What became of the attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// Its outcome goes to the instance's inbox.
    Delivered(Vec<Effect>),
    /// It runs again at the time given in the effects.
    Retrying(Vec<Effect>),
    /// Stale: the instance moved on, or the task is no longer pending.
    Dropped,
}

/// `pending` says whether the task's row still exists for this attempt's
/// execution.
pub fn decide(
    state: Option<&InstanceState>,
    pending: bool,
    attempt: &Attempt,
    result: TaskOutcome,
    now: i64,
    limits: &Limits,
) -> Settled {
    let Some(state) = state else {
        return Settled::Dropped;
    };
    if !pending || state.execution != attempt.execution || state.status.is_finished() {
        return Settled::Dropped;
    }
    let task = attempt.task;
    let deliver = |event| {
        Settled::Delivered(vec![
            Effect::FinishTask { task },
            Effect::Deliver {
                instance: state.id.clone(),
                execution: state.execution,
                event,
                visible_at: None,
            },
        ])
    };
    let result = result.and_then(
        |output| match limits.check_payload("task result", &output) {
            Ok(()) => Ok(output),
            Err(e) => Err(e.to_string().into()),
        },
    );
    match result {
        Ok(result) => deliver(Event::TaskCompleted { task, result }),
        Err(error) => {
            let policy = attempt
                .retry
                .filter(|_| error.retriable())
                .map(|p| p.bounded(&limits.retry));
            match policy.and_then(|p| p.delay_after(attempt.attempt)) {
                Some(delay) => Settled::Retrying(vec![Effect::RetryTask {
                    task,
                    attempt: attempt.attempt.saturating_add(1),
                    due_at: now.saturating_add(i64::try_from(delay).unwrap_or(i64::MAX)),
                }]),
                None => {
                    let attempts = attempt.attempt.saturating_add(1);
                    let text = if attempts > 1 {
                        format!("{} (gave up after {attempts} attempts)", error.text)
                    } else {
                        error.text
                    };
                    deliver(Event::TaskFailed {
                        task,
                        error: text,
                        details: error.details,
                    })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::instance::RuntimeStatus;
    use crate::core::lifecycle::fixtures::instance;
    use crate::core::retry::RetryLimits;

    fn attempt(execution: i64, attempt: u32, retry: Option<RetryPolicy>) -> Attempt {
        Attempt {
            execution,
            task: 4,
            attempt,
            retry,
        }
    }

    #[test]
    fn a_success_is_delivered_to_the_current_execution() {
        let state = instance(RuntimeStatus::Running);
        let settled = decide(
            Some(&state),
            true,
            &attempt(7, 0, None),
            Ok("1".into()),
            0,
            &Limits::default(),
        );
        let Settled::Delivered(effects) = settled else {
            panic!("{settled:?}");
        };
        assert_eq!(effects[0], Effect::FinishTask { task: 4 });
        assert!(matches!(
            &effects[1],
            Effect::Deliver {
                execution: 7,
                event: Event::TaskCompleted { task: 4, .. },
                ..
            }
        ));
    }

    #[test]
    fn a_result_from_an_older_execution_is_dropped() {
        let state = instance(RuntimeStatus::Running);
        let limits = Limits::default();
        assert_eq!(
            decide(
                Some(&state),
                true,
                &attempt(6, 0, None),
                Ok("1".into()),
                0,
                &limits
            ),
            Settled::Dropped
        );
        assert_eq!(
            decide(
                Some(&state),
                false,
                &attempt(7, 0, None),
                Ok("1".into()),
                0,
                &limits
            ),
            Settled::Dropped
        );
        let over = instance(RuntimeStatus::Terminated);
        assert_eq!(
            decide(
                Some(&over),
                true,
                &attempt(7, 0, None),
                Ok("1".into()),
                0,
                &limits
            ),
            Settled::Dropped
        );
        assert_eq!(
            decide(None, true, &attempt(7, 0, None), Ok("1".into()), 0, &limits),
            Settled::Dropped
        );
    }

    #[test]
    fn a_guest_policy_of_endless_instant_retries_is_capped() {
        let state = instance(RuntimeStatus::Running);
        let limits = Limits {
            retry: RetryLimits {
                max_attempts: 3,
                min_delay_ms: 50,
                max_delay_ms: 1_000,
            },
            ..Limits::default()
        };
        let greedy = Some(RetryPolicy {
            max_attempts: u32::MAX,
            first_delay_ms: 0,
            backoff_coefficient: 1.0,
            max_delay_ms: 0,
        });
        let first = decide(
            Some(&state),
            true,
            &attempt(7, 0, greedy),
            Err("no".into()),
            100,
            &limits,
        );
        assert_eq!(
            first,
            Settled::Retrying(vec![Effect::RetryTask {
                task: 4,
                attempt: 1,
                due_at: 150
            }])
        );
        let last = decide(
            Some(&state),
            true,
            &attempt(7, 2, greedy),
            Err("no".into()),
            100,
            &limits,
        );
        let Settled::Delivered(effects) = last else {
            panic!("{last:?}");
        };
        assert!(
            matches!(&effects[1], Effect::Deliver { event: Event::TaskFailed { error, .. }, .. } if error == "no (gave up after 3 attempts)")
        );
    }
}
