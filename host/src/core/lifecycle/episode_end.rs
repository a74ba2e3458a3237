//! The end of an episode: what the code did (new calls, how it stopped) turns
//! into journal rows, tasks, children, timers and a status. Task numbers,
//! child ids and timer rows are decided here and nowhere else.

use std::collections::HashMap;

use super::continue_as_new;
use crate::core::effects::Effect;
use crate::core::entity_locks;
use crate::core::ids;
use crate::core::instance::{InstanceState, NewInstance, ParentRef, RuntimeStatus};
use crate::core::journal::{Call, EntityCall, Entry, Event};
use crate::core::limits::Limits;
use crate::core::replay::Replay;
use crate::core::sdk_entities::{self, Caller, Operation};

/// How the guest's code stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// It awaits a task that has not finished.
    Waiting,
    /// `run-orchestration` returned: the output or the code's own error.
    Returned(Result<String, String>),
    /// It broke the contract (non-determinism, a trap, a deadline): the
    /// instance fails with this reason.
    Broken(String),
}

impl Ending {
    /// The ending once checked against the journal: code that returned
    /// before making every call the journal holds took another path than
    /// the one recorded, so the instance breaks rather than completes.
    pub fn checked(self, replay: &Replay) -> Self {
        match (&self, replay.check_complete()) {
            (Ending::Returned(Ok(_)), Err(e)) => Ending::Broken(e.to_string()),
            _ => self,
        }
    }
}

/// An inbox row the episode offered to the code.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrived {
    pub row: i64,
    pub event: Event,
    /// The code used it: a task's outcome, or a raised event a wait took.
    pub heard: bool,
    /// Parked by an earlier episode (see [`Effect::ParkInbox`]).
    pub parked: bool,
}

/// Everything an episode produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    /// Inbox rows addressed to an older execution.
    pub stale: Vec<i64>,
    /// The rows offered to the code, in arrival order.
    pub arrived: Vec<Arrived>,
    pub calls: Vec<Call>,
    /// The task number of the first of `calls`.
    pub first_task: u32,
    pub ending: Ending,
    /// Raised events no wait took (carried by continue-as-new).
    pub untaken: Vec<Event>,
    /// The instance's component version.
    pub digest: String,
    /// The version each sub-orchestration starts on, by name; absent names
    /// run on the instance's own version.
    pub child_digests: HashMap<String, String>,
    /// The activity set served now: continue-as-new pins it.
    pub activity_set: Option<String>,
    /// The activity set the instance pinned: its sub-orchestrations share
    /// it, so a family of instances calls one version of each activity.
    pub own_activity_set: Option<String>,
    /// On continue-as-new, the version the new execution runs on.
    pub continue_on: Option<String>,
    /// The episode's time: what the guest's clock read for its new calls.
    pub at: i64,
}

/// Raised events no wait took are never journaled: anyone who may raise
/// events could otherwise fill an instance's history with names its code
/// never waits for and fail it. While the code waits they stay in the
/// (bounded) inbox, parked; once the execution is over they are consumed
/// (continue-as-new carries them in `untaken`).
pub fn decide(state: &InstanceState, episode: Episode, limits: &Limits) -> Vec<Effect> {
    let Episode {
        stale,
        arrived,
        calls,
        first_task,
        ending,
        untaken,
        digest,
        child_digests,
        activity_set,
        own_activity_set,
        continue_on,
        at,
    } = episode;
    let waiting = ending == Ending::Waiting;
    let mut consumed = stale;
    let mut park = Vec::new();
    let mut events = Vec::new();
    for arrival in arrived {
        if arrival.heard {
            consumed.push(arrival.row);
            events.push(arrival.event);
        } else if !waiting {
            consumed.push(arrival.row);
        } else if !arrival.parked {
            park.push(arrival.row);
        }
    }
    let mut effects = Vec::new();
    if !consumed.is_empty() {
        effects.push(Effect::ConsumeInbox(consumed));
    }
    if let Err(reason) = check(state, &events, &calls, limits) {
        return fail(state, effects, reason);
    }
    if !park.is_empty() {
        effects.push(Effect::ParkInbox(park));
    }
    // An SDK worker's own account of the failure it ended the instance
    // with: the parent is told it as the worker reported it.
    let reported = calls.iter().find_map(|c| match c {
        Call::SdkEpisode { failure, .. } => failure.clone(),
        _ => None,
    });
    let custom_status = calls.iter().rev().find_map(|c| match c {
        Call::SetCustomStatus { status } => Some(status.clone()),
        _ => None,
    });
    let continue_with = calls.iter().find_map(|c| match c {
        Call::ContinueAsNew { input } => Some(input.clone()),
        _ => None,
    });
    let mut entries: Vec<Entry> = events.into_iter().map(Entry::Event).collect();
    entries.extend(calls.iter().cloned().map(Entry::Call));
    if !entries.is_empty() {
        effects.push(Effect::Append { entries, at });
    }
    let mut task = first_task;
    for call in calls {
        // An entity call's result comes back as its task's; a signal's not.
        let awaited = matches!(call, Call::CallEntity { .. });
        match call {
            Call::CallAgent { .. } | Call::CallActivity { .. } | Call::CallRemoteAgent { .. } => {
                effects.push(Effect::ScheduleTask { task, call });
            }
            Call::CallOrchestration { name, input, id } => {
                let digest = child_digests.get(&name).unwrap_or(&digest).clone();
                effects.push(Effect::Create(NewInstance {
                    id: id.unwrap_or_else(|| ids::child_instance(&state.id, state.execution, task)),
                    name,
                    input,
                    digest,
                    activity_set: own_activity_set.clone(),
                    parent: Some(ParentRef {
                        id: state.id.clone(),
                        execution: state.execution,
                        task,
                    }),
                    traceparent: None,
                    start_at: None,
                    caller: None,
                }));
            }
            Call::StartTimer { fire_at } => effects.push(Effect::ArmTimer {
                task,
                fire_at: i64::try_from(fire_at).unwrap_or(i64::MAX),
            }),
            Call::CallEntity(message) | Call::SignalEntity(message) => {
                let caller = awaited.then(|| Caller {
                    id: state.id.clone(),
                    execution: state.execution,
                    task,
                });
                let EntityCall {
                    entity,
                    operation,
                    input,
                    request_id,
                    due_at,
                } = message;
                let operation = Operation {
                    request_id,
                    operation,
                    input,
                    caller,
                };
                match sdk_entities::new_instance(&entity) {
                    Some(new) => effects.push(Effect::EntityOperation {
                        entity: new,
                        event: sdk_entities::operation_event(&operation),
                        due_at,
                    }),
                    None => {
                        return fail(
                            state,
                            effects,
                            format!("'{entity}' is not an entity id (@name@key)"),
                        )
                    }
                }
            }
            Call::LockEntities { section, entities } => {
                let request = entity_locks::LockRequest {
                    section,
                    lock_set: entities,
                    position: 0,
                    owner: Caller {
                        id: state.id.clone(),
                        execution: state.execution,
                        task,
                    },
                };
                let first = request.lock_set.first();
                match first.and_then(|first| sdk_entities::new_instance(first)) {
                    Some(entity) => effects.push(Effect::EntityOperation {
                        entity,
                        event: entity_locks::lock_event(&request),
                        due_at: None,
                    }),
                    None => {
                        return fail(state, effects, "a lock request names no entity".to_string())
                    }
                }
            }
            Call::SendEvent {
                instance,
                name,
                input,
            } => effects.push(Effect::SendEvent {
                instance,
                event: Event::EventRaised {
                    name,
                    payload: input,
                },
            }),
            Call::UnlockEntity { section, entity } => {
                let unlock = entity_locks::Unlock {
                    section,
                    owner: state.id.clone(),
                };
                if let Some(entity) = sdk_entities::new_instance(&entity) {
                    effects.push(Effect::EntityOperation {
                        entity,
                        event: entity_locks::unlock_event(&unlock),
                        due_at: None,
                    });
                }
            }
            _ => {}
        }
        // Task numbers count every call, as the replay numbers them.
        task = task.saturating_add(1);
    }
    match ending {
        Ending::Waiting => {
            effects.push(Effect::SetStatus {
                status: RuntimeStatus::Running,
                output: None,
                custom_status,
            });
            effects
        }
        Ending::Returned(Ok(output)) => match continue_with {
            Some(input) => match limits.check_payload("continue-as-new input", &input) {
                Ok(()) => {
                    effects.extend(continue_as_new::decide(
                        input,
                        continue_on,
                        activity_set,
                        untaken,
                    ));
                    effects
                }
                Err(e) => fail(state, effects, e.to_string()),
            },
            None => match limits.check_payload("output", &output) {
                Ok(()) => finish(
                    state,
                    effects,
                    RuntimeStatus::Completed,
                    output,
                    custom_status,
                ),
                Err(e) => fail(state, effects, e.to_string()),
            },
        },
        Ending::Returned(Err(error)) => {
            let mut effects = fail(state, effects, error);
            if let Some(reported) = reported {
                Effect::with_reported_failure(&mut effects, reported);
            }
            effects
        }
        Ending::Broken(reason) => fail(state, effects, reason),
    }
}

/// The history and payload limits, checked before anything is journaled.
fn check(
    state: &InstanceState,
    events: &[Event],
    calls: &[Call],
    limits: &Limits,
) -> Result<(), String> {
    let added_bytes: u64 = events
        .iter()
        .map(|e| Entry::Event(e.clone()).size())
        .chain(calls.iter().map(|c| Entry::Call(c.clone()).size()))
        .sum();
    let added = (events.len() + calls.len()) as u64;
    limits
        .check_episode_calls(calls.len() as u64)
        .map_err(|e| e.to_string())?;
    limits
        .check_history(state.history.plus(added, added_bytes))
        .map_err(|e| e.to_string())?;
    for call in calls {
        let (what, payload) = match call {
            Call::CallActivity { input, .. } => ("activity input", input),
            Call::CallAgent { message, .. } => ("agent message", message),
            Call::CallRemoteAgent { message, .. } => ("remote agent message", message),
            Call::CallOrchestration { input, .. } => ("sub-orchestration input", input),
            Call::SetCustomStatus { status } => ("custom status", status),
            Call::CallEntity(EntityCall {
                input: Some(input), ..
            })
            | Call::SignalEntity(EntityCall {
                input: Some(input), ..
            }) => ("entity operation input", input),
            Call::SendEvent { input, .. } => ("event payload", input),
            _ => continue,
        };
        limits
            .check_payload(&format!("{what} of {}", call.describe()), payload)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The instance fails with `reason` (its output is the reason as a JSON string).
fn fail(state: &InstanceState, effects: Vec<Effect>, reason: String) -> Vec<Effect> {
    let output = serde_json::Value::String(reason).to_string();
    finish(state, effects, RuntimeStatus::Failed, output, None)
}

/// The instance is over: its pending work is moot and its parent is told.
fn finish(
    state: &InstanceState,
    mut effects: Vec<Effect>,
    status: RuntimeStatus,
    output: String,
    custom_status: Option<String>,
) -> Vec<Effect> {
    effects.push(Effect::SetStatus {
        status,
        output: Some(output.clone()),
        custom_status,
    });
    effects.push(Effect::DropPending);
    if let Some(parent) = &state.parent {
        effects.push(Effect::child_ended(
            parent.clone(),
            &state.id,
            status,
            Some(&output),
        ));
    }
    effects
}

#[cfg(test)]
mod ending_tests {
    use super::*;

    #[test]
    fn code_that_returns_before_using_its_journal_breaks_and_its_own_error_stands() {
        let journaled = || Replay::new(vec![(Call::Now { value: 1 }, 0)], Vec::new(), 0, 0);
        let early = Ending::Returned(Ok("1".into())).checked(&journaled());
        assert!(
            matches!(&early, Ending::Broken(why) if why.contains("journal continues")),
            "{early:?}"
        );
        let failed = Ending::Returned(Err("no".into()));
        assert_eq!(failed.clone().checked(&journaled()), failed);
        let fresh = Replay::new(Vec::new(), Vec::new(), 0, 0);
        let done = Ending::Returned(Ok("1".into()));
        assert_eq!(done.clone().checked(&fresh), done);
        assert_eq!(Ending::Waiting.checked(&journaled()), Ending::Waiting);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::instance::Size;
    use crate::core::lifecycle::fixtures::{child, instance};

    fn episode(calls: Vec<Call>, ending: Ending) -> Episode {
        Episode {
            stale: Vec::new(),
            arrived: vec![Arrived {
                row: 1,
                event: Event::TimerFired { task: 0 },
                heard: true,
                parked: false,
            }],
            calls,
            first_task: 1,
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

    fn activity(input: &str) -> Call {
        Call::CallActivity {
            name: "a".into(),
            input: input.into(),
            retry: None,
        }
    }

    #[test]
    fn new_calls_become_tasks_children_and_timers_numbered_after_the_journal() {
        let calls = vec![
            activity("1"),
            Call::Now { value: 5 },
            Call::CallOrchestration {
                name: "c".into(),
                input: "2".into(),
                id: None,
            },
            Call::StartTimer { fire_at: 99 },
        ];
        let effects = decide(
            &instance(RuntimeStatus::Running),
            episode(calls, Ending::Waiting),
            &Limits::default(),
        );
        assert_eq!(effects[0], Effect::ConsumeInbox(vec![1]));
        assert!(matches!(&effects[1], Effect::Append { entries, at: 1_000 } if entries.len() == 5));
        assert!(matches!(&effects[2], Effect::ScheduleTask { task: 1, .. }));
        let Effect::Create(new) = &effects[3] else {
            panic!("{:?}", effects[3]);
        };
        assert_eq!(new.id, "i:7:3", "child ids carry the execution");
        assert_eq!(
            new.parent,
            Some(ParentRef {
                id: "i".into(),
                execution: 7,
                task: 3
            })
        );
        assert_eq!(
            effects[4],
            Effect::ArmTimer {
                task: 4,
                fire_at: 99
            }
        );
        assert!(matches!(
            effects[5],
            Effect::SetStatus {
                status: RuntimeStatus::Running,
                ..
            }
        ));
    }

    #[test]
    fn a_child_an_sdk_worker_failed_reports_the_workers_own_failure_to_its_parent() {
        let reported = crate::core::failure::FailureDetails {
            error_type: "durabletask.task.TaskFailedError".into(),
            message: "Activity task #1 failed: boom".into(),
            stack_trace: None,
            inner: None,
            non_retriable: false,
        };
        let calls = vec![Call::SdkEpisode {
            ids: Vec::new(),
            failure: Some(Box::new(reported.clone())),
        }];
        let effects = decide(
            &child(RuntimeStatus::Running),
            episode(calls, Ending::Returned(Err(reported.text()))),
            &Limits::default(),
        );
        let told = effects.iter().find_map(|e| match e {
            Effect::NotifyParent {
                event: Event::TaskFailed { details, .. },
                ..
            } => Some(details.clone()),
            _ => None,
        });
        assert_eq!(told, Some(Some(Box::new(reported))), "{effects:?}");
    }

    #[test]
    fn a_returning_child_completes_and_reports_to_its_parent() {
        let effects = decide(
            &child(RuntimeStatus::Running),
            episode(vec![], Ending::Returned(Ok("42".into()))),
            &Limits::default(),
        );
        let n = effects.len();
        assert!(
            matches!(&effects[n - 3], Effect::SetStatus { status: RuntimeStatus::Completed, output: Some(o), .. } if o == "42")
        );
        assert_eq!(effects[n - 2], Effect::DropPending);
        assert!(
            matches!(&effects[n - 1], Effect::NotifyParent { parent, event: Event::TaskCompleted { task: 2, result } } if parent.execution == 3 && result == "42")
        );
    }

    #[test]
    fn continue_as_new_carries_events_and_may_move_to_the_newest_version() {
        let raised = Event::EventRaised {
            name: "go".into(),
            payload: "1".into(),
        };
        let mut e = episode(
            vec![Call::ContinueAsNew {
                input: "{\"n\":2}".into(),
            }],
            Ending::Returned(Ok("null".into())),
        );
        e.untaken = vec![raised.clone()];
        e.continue_on = Some("d2".into());
        e.activity_set = Some("set:now".into());
        let effects = decide(&instance(RuntimeStatus::Running), e, &Limits::default());
        assert_eq!(
            effects.last(),
            Some(&Effect::NewExecution {
                input: "{\"n\":2}".into(),
                digest: Some("d2".into()),
                activity_set: Some("set:now".into()),
                carried: vec![raised]
            })
        );
    }

    #[test]
    fn an_episode_over_the_history_limit_fails_the_instance_and_journals_nothing() {
        let limits = Limits {
            max_history_events: 10,
            ..Limits::default()
        };
        let state = InstanceState {
            history: Size {
                events: 9,
                bytes: 0,
            },
            ..instance(RuntimeStatus::Running)
        };
        let effects = decide(
            &state,
            episode(vec![activity("1")], Ending::Waiting),
            &limits,
        );
        assert!(!effects
            .iter()
            .any(|e| matches!(e, Effect::Append { .. } | Effect::ScheduleTask { .. })));
        let failed = Effect::failure(&effects);
        assert!(failed.is_some_and(|o| o.contains("history would hold 11 events")));
        assert!(
            effects.contains(&Effect::ConsumeInbox(vec![1])),
            "what it read is still consumed"
        );
    }

    #[test]
    fn an_episode_making_more_calls_than_the_limit_fails_the_instance_and_journals_nothing() {
        let limits = Limits {
            max_episode_calls: 2,
            ..Limits::default()
        };
        let state = instance(RuntimeStatus::Running);
        let within = decide(
            &state,
            episode(vec![activity("1"), activity("2")], Ending::Waiting),
            &limits,
        );
        assert!(Effect::failure(&within).is_none());
        let effects = decide(
            &state,
            episode(
                vec![activity("1"), activity("2"), activity("3")],
                Ending::Waiting,
            ),
            &limits,
        );
        assert!(!effects
            .iter()
            .any(|e| matches!(e, Effect::Append { .. } | Effect::ScheduleTask { .. })));
        let failed = Effect::failure(&effects).unwrap_or_default();
        assert!(
            failed.contains("3 calls") && failed.contains("--max-episode-calls"),
            "{failed}"
        );
    }

    #[test]
    fn an_oversized_activity_input_fails_the_instance_naming_the_call() {
        let limits = Limits {
            max_payload_bytes: 3,
            ..Limits::default()
        };
        let effects = decide(
            &instance(RuntimeStatus::Running),
            episode(vec![activity("1234")], Ending::Waiting),
            &limits,
        );
        let failed = Effect::failure(&effects);
        assert!(failed.is_some_and(|o| o.contains("activity input of call-activity(a) is 4 bytes")));
    }

    fn raised(row: i64, heard: bool, parked: bool) -> Arrived {
        Arrived {
            row,
            event: Event::EventRaised {
                name: format!("e{row}"),
                payload: "1".into(),
            },
            heard,
            parked,
        }
    }

    #[test]
    fn events_no_wait_took_are_parked_not_journaled_and_cannot_fill_the_history() {
        let limits = Limits {
            max_history_events: 3,
            ..Limits::default()
        };
        let mut e = episode(vec![], Ending::Waiting);
        e.stale = vec![9];
        e.arrived = vec![raised(2, false, false), raised(3, true, false)];
        e.arrived
            .extend((4..40).map(|row| raised(row, false, row < 20)));
        let effects = decide(&instance(RuntimeStatus::Running), e, &limits);
        assert_eq!(effects[0], Effect::ConsumeInbox(vec![9, 3]));
        let appended: Vec<_> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Append { entries, .. } => Some(entries.len()),
                _ => None,
            })
            .collect();
        assert_eq!(appended, vec![1], "only the event a wait took");
        assert!(
            effects.contains(&Effect::ParkInbox([2].into_iter().chain(20..40).collect())),
            "parked once: rows parked earlier are left as they are"
        );
        assert!(Effect::failure(&effects).is_none());
    }

    #[test]
    fn an_execution_that_ends_consumes_the_events_nobody_heard() {
        let mut e = episode(vec![], Ending::Returned(Ok("1".into())));
        e.arrived = vec![raised(2, false, true), raised(3, false, false)];
        let effects = decide(&instance(RuntimeStatus::Running), e, &Limits::default());
        assert_eq!(effects[0], Effect::ConsumeInbox(vec![2, 3]));
        assert!(!effects
            .iter()
            .any(|e| matches!(e, Effect::Append { .. } | Effect::ParkInbox(_))));
    }

    #[test]
    fn broken_code_fails_with_its_reason() {
        let effects = decide(
            &instance(RuntimeStatus::Running),
            episode(
                vec![],
                Ending::Broken("non-deterministic behavior detected: x".into()),
            ),
            &Limits::default(),
        );
        assert!(effects.iter().any(|e| matches!(e, Effect::SetStatus { status: RuntimeStatus::Failed, output: Some(o), .. } if o.contains("non-deterministic"))));
    }
}
