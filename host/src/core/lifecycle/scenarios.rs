//! Scenarios: several transitions in a row through the one entry,
//! [`super::decide`], each on the `next` state the previous one left,
//! asserting on what is written. A transition that is right alone but wrong
//! after another shows up here.

use std::collections::HashMap;

use super::episode_end::{Arrived, Ending, Episode};
use super::fixtures::instance;
use super::task_done::Attempt;
use super::{decide, Change, Command, Decision, Operation, Reply, TaskFate};
use crate::core::effects::Effect;
use crate::core::instance::{InstanceState, RuntimeStatus, Size};
use crate::core::journal::{Call, Entry, Event};
use crate::core::limits::{LimitError, Limits};

fn agent_call() -> Call {
    Call::CallAgent {
        agent: "writer".into(),
        message: "draft".into(),
        session: None,
        response_schema: None,
        retry: None,
    }
}

fn episode(arrived: Vec<Arrived>, calls: Vec<Call>, first_task: u32, ending: Ending) -> Episode {
    Episode {
        stale: Vec::new(),
        arrived,
        calls,
        first_task,
        ending,
        untaken: Vec::new(),
        digest: "d1".into(),
        child_digests: HashMap::new(),
        activity_set: None,
        own_activity_set: None,
        continue_on: None,
        at: 1_000,
    }
}

fn next(decision: &Decision) -> InstanceState {
    decision
        .next
        .clone()
        .expect("the instance goes on after this transition")
}

#[test]
fn an_agent_call_is_scheduled_its_result_delivered_and_the_next_episode_completes() {
    let limits = Limits::default();
    let mut fresh = instance(RuntimeStatus::Pending);
    fresh.has_run = false;
    fresh.history = Size::default();

    // First episode: the code calls an agent and waits for it.
    let first = decide(
        Some(&fresh),
        Command::EndEpisode {
            episode: Box::new(episode(Vec::new(), vec![agent_call()], 0, Ending::Waiting)),
            limits: &limits,
        },
    );
    assert_eq!(first.reply, Reply::Episode);
    assert!(first
        .effects
        .iter()
        .any(|e| matches!(e, Effect::ScheduleTask { task: 0, .. })));
    assert!(first.effects.iter().any(|e| matches!(
        e,
        Effect::SetStatus {
            status: RuntimeStatus::Running,
            ..
        }
    )));
    let waiting = next(&first);
    assert_eq!(waiting.status, RuntimeStatus::Running);
    assert!(waiting.has_run);
    assert_eq!(waiting.history.events, 1, "the call is journaled");

    // The agent answers: delivered to the current execution.
    let attempt = Attempt {
        execution: waiting.execution,
        task: 0,
        attempt: 1,
        retry: None,
    };
    let delivered = decide(
        Some(&waiting),
        Command::TaskDone {
            pending: true,
            attempt: &attempt,
            result: Ok("\"a draft\"".into()),
            now: 2_000,
            limits: &limits,
        },
    );
    assert_eq!(delivered.reply, Reply::Task(TaskFate::Delivered));
    assert!(matches!(
        delivered.effects.as_slice(),
        [
            Effect::FinishTask { task: 0 },
            Effect::Deliver {
                execution: 7,
                event: Event::TaskCompleted { task: 0, .. },
                ..
            }
        ]
    ));
    let delivered_state = next(&delivered);
    assert_eq!(
        delivered_state, waiting,
        "a delivery changes the inbox only"
    );

    // Second episode: the code hears the result and returns.
    let heard = Arrived {
        row: 41,
        event: Event::TaskCompleted {
            task: 0,
            result: "\"a draft\"".into(),
        },
        heard: true,
        parked: false,
    };
    let done = decide(
        Some(&delivered_state),
        Command::EndEpisode {
            episode: Box::new(episode(
                vec![heard],
                Vec::new(),
                1,
                Ending::Returned(Ok("\"published\"".into())),
            )),
            limits: &limits,
        },
    );
    assert!(done.effects.contains(&Effect::ConsumeInbox(vec![41])));
    assert!(done.effects.iter().any(|e| matches!(
        e,
        Effect::Append { entries, .. } if entries.iter().any(|x| matches!(x, Entry::Event(Event::TaskCompleted { task: 0, .. })))
    )));
    assert_eq!(
        Effect::final_status(&done.effects),
        Some(RuntimeStatus::Completed)
    );
    assert_eq!(done.next, None, "a completed execution is over");
}

#[test]
fn an_event_raised_while_suspended_waits_in_the_inbox_until_resume() {
    let limits = Limits::default();
    let running = instance(RuntimeStatus::Running);
    let suspend = Operation::Suspend;
    let suspended = decide(Some(&running), Command::Manage(&suspend));
    assert_eq!(suspended.reply, Reply::Change(Change::Done));
    let suspended = next(&suspended);
    assert_eq!(suspended.status, RuntimeStatus::Suspended);

    let raised = decide(
        Some(&suspended),
        Command::Raise {
            name: "approval",
            payload: "true",
            waiting: Size::default(),
            limits: &limits,
            due_at: None,
        },
    );
    assert_eq!(raised.reply, Reply::Change(Change::Done));
    assert!(matches!(
        raised.effects.as_slice(),
        [Effect::Deliver {
            event: Event::EventRaised { .. },
            ..
        }]
    ));
    assert_eq!(next(&raised).status, RuntimeStatus::Suspended);

    // Suspending twice is refused; resuming runs it again.
    let again = decide(Some(&next(&raised)), Command::Manage(&suspend));
    assert_eq!(again.reply, Reply::Change(Change::NotApplicable));
    assert!(again.effects.is_empty());
    let resumed = decide(Some(&next(&raised)), Command::Manage(&Operation::Resume));
    assert_eq!(next(&resumed).status, RuntimeStatus::Running);
}

#[test]
fn after_a_terminate_late_results_are_dropped_and_operations_refused() {
    let limits = Limits::default();
    let running = instance(RuntimeStatus::Running);
    let terminate = Operation::terminate_for("no longer needed");
    let terminated = decide(Some(&running), Command::Manage(&terminate));
    assert_eq!(terminated.reply, Reply::Change(Change::Done));
    assert_eq!(
        Effect::final_status(&terminated.effects),
        Some(RuntimeStatus::Terminated)
    );
    assert_eq!(terminated.next, None);

    // As the store holds it afterwards.
    let over = InstanceState {
        status: RuntimeStatus::Terminated,
        ..running
    };
    let attempt = Attempt {
        execution: over.execution,
        task: 3,
        attempt: 1,
        retry: None,
    };
    let late = decide(
        Some(&over),
        Command::TaskDone {
            pending: true,
            attempt: &attempt,
            result: Ok("1".into()),
            now: 5_000,
            limits: &limits,
        },
    );
    assert_eq!(late.reply, Reply::Task(TaskFate::Dropped));
    assert!(late.effects.is_empty());
    for command in [
        Command::Manage(&terminate),
        Command::Manage(&Operation::Suspend),
        Command::Raise {
            name: "x",
            payload: "1",
            waiting: Size::default(),
            limits: &limits,
            due_at: None,
        },
    ] {
        let refused = decide(Some(&over), command);
        assert_eq!(refused.reply, Reply::Change(Change::Finished));
        assert!(refused.effects.is_empty());
    }
    // Once purged there is nothing left to refer to.
    let purged = decide(Some(&over), Command::Manage(&Operation::Purge));
    assert_eq!(purged.reply, Reply::Change(Change::Done));
    assert_eq!(purged.effects, vec![Effect::Purge]);
    assert_eq!(purged.next, None);
    let gone = decide(None, Command::Manage(&Operation::Resume));
    assert_eq!(gone.reply, Reply::Change(Change::NotFound));
}

#[test]
fn a_full_inbox_refuses_a_raise_and_writes_nothing() {
    let limits = Limits {
        max_inbox_events: 2,
        ..Limits::default()
    };
    let running = instance(RuntimeStatus::Running);
    let full = Size {
        events: 2,
        bytes: 10,
    };
    let refused = decide(
        Some(&running),
        Command::Raise {
            name: "flood",
            payload: "1",
            waiting: full,
            limits: &limits,
            due_at: None,
        },
    );
    assert!(matches!(
        refused.reply,
        Reply::Refused(LimitError::Inbox { max_events: 2, .. })
    ));
    assert!(refused.effects.is_empty());
    assert_eq!(refused.next, Some(running));
}

#[test]
fn a_failed_attempt_with_a_policy_is_retried_then_its_last_failure_delivered() {
    let limits = Limits::default();
    let waiting = instance(RuntimeStatus::Running);
    let retry = Some(crate::core::retry::RetryPolicy {
        max_attempts: 2,
        first_delay_ms: 100,
        backoff_coefficient: 2.0,
        max_delay_ms: 1_000,
    });
    let fail = |attempt: u32| {
        let attempt = Attempt {
            execution: waiting.execution,
            task: 1,
            attempt,
            retry,
        };
        decide(
            Some(&waiting),
            Command::TaskDone {
                pending: true,
                attempt: &attempt,
                result: Err("model unavailable".into()),
                now: 10_000,
                limits: &limits,
            },
        )
    };
    // Attempts count from 0.
    let first = fail(0);
    assert_eq!(first.reply, Reply::Task(TaskFate::Retrying));
    assert!(matches!(
        first.effects.as_slice(),
        [Effect::RetryTask {
            task: 1,
            attempt: 1,
            due_at: 10_100,
        }]
    ));
    assert_eq!(next(&first), waiting, "a retry changes the task row only");
    let last = fail(1);
    assert_eq!(last.reply, Reply::Task(TaskFate::Delivered));
    assert!(
        last.effects.iter().any(|e| matches!(
            e,
            Effect::Deliver {
                event: Event::TaskFailed { task: 1, error, .. },
                ..
            } if error.contains("gave up after 2 attempts")
        )),
        "{:?}",
        last.effects
    );
}
