//! Orchestrations whose code runs in a Durable Task SDK worker, connected
//! over the gRPC edge: their history in the protocol's terms, derived from
//! the instance's journal, and the worker's actions turned into the calls
//! and the ending of an episode, so the engine runs them as any other.
//!
//! The journal stays the one record of an instance: each SDK episode
//! journals a [`Call::SdkEpisode`] first (its time is the protocol's
//! `OrchestratorStarted`; it lists the ids the worker gave the actions it
//! journals after it), then one call per action. Task numbers are the
//! engine's (every call counts); the ids the worker sees are its own. A
//! second table written beside the journal would have to be kept in step
//! with it in every commit, on both stores.

use std::collections::HashMap;

use super::ids;
use super::journal::{Call, Entry, Event, FailureDetails};

/// The component digest of an instance whose code an SDK worker runs:
/// there is no component version to pin. An instance started with an
/// orchestration version (the protocol's `version`) pins that instead:
/// `durabletask-sdk@{version}` ([`digest_of`]).
pub const DIGEST: &str = "durabletask-sdk";

/// The digest of an SDK instance started with `version`.
pub fn digest_of(version: Option<&str>) -> String {
    match version.filter(|v| !v.is_empty()) {
        Some(version) => format!("{DIGEST}@{version}"),
        None => DIGEST.to_string(),
    }
}

/// Whether an instance of `digest` runs in an SDK worker.
pub fn is_sdk(digest: &str) -> bool {
    digest
        .strip_prefix(DIGEST)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('@'))
}

/// The orchestration version an SDK instance of `digest` was started with.
pub fn version_of(digest: &str) -> Option<&str> {
    digest
        .strip_prefix(DIGEST)?
        .strip_prefix('@')
        .filter(|v| !v.is_empty())
}

/// One history event of the protocol, in the protocol's order.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEvent {
    /// The action id for scheduling events, -1 for the rest.
    pub id: i32,
    /// Milliseconds since the epoch.
    pub at: i64,
    pub kind: Kind,
}

/// The instance an execution starts for, as the protocol's
/// `ExecutionStarted` names it.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    pub name: String,
    /// JSON text.
    pub input: String,
    pub instance_id: String,
    pub execution: i64,
    /// The parent's instance id and the task that started this one.
    pub parent: Option<(String, u32)>,
    /// The orchestration version it was started with.
    pub version: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    OrchestratorStarted,
    ExecutionStarted(Started),
    TaskScheduled {
        name: String,
        input: String,
    },
    TaskCompleted {
        scheduled: i32,
        result: String,
    },
    TaskFailed {
        scheduled: i32,
        error: String,
        /// The worker's own account, when an SDK worker ran the activity.
        details: Option<Box<FailureDetails>>,
    },
    SubOrchestrationCreated {
        instance_id: String,
        name: String,
        input: String,
    },
    SubOrchestrationCompleted {
        scheduled: i32,
        result: String,
    },
    SubOrchestrationFailed {
        scheduled: i32,
        error: String,
        /// The child's own account, when an SDK worker ran it.
        details: Option<Box<FailureDetails>>,
    },
    TimerCreated {
        fire_at: i64,
    },
    TimerFired {
        timer: i32,
        fire_at: i64,
    },
    EventRaised {
        name: String,
        input: String,
    },
    EntityOperationCalled(EntityMessage),
    EntityOperationSignaled(EntityMessage),
    EntityOperationCompleted {
        request_id: String,
        output: String,
    },
    EntityOperationFailed {
        request_id: String,
        error: String,
    },
    EntityLockRequested {
        section: String,
        lock_set: Vec<String>,
    },
    EntityUnlockSent {
        section: String,
        entity: String,
    },
    EntityLockGranted {
        section: String,
    },
}

/// An operation an orchestration sends an entity, as journaled.
pub use super::journal::EntityCall as EntityMessage;

/// What each task of the journal is, by task number, for its outcome's
/// event: its action id, and what it was.
struct Tasks(HashMap<u32, (i32, Call)>);

impl Tasks {
    fn of(journal: &[(Entry, i64)]) -> Self {
        let mut tasks = HashMap::new();
        let mut ids: std::vec::IntoIter<i32> = Vec::new().into_iter();
        let mut task: u32 = 0;
        for (entry, _) in journal {
            let Entry::Call(call) = entry else { continue };
            match call {
                Call::SdkEpisode { ids: these, .. } => ids = these.clone().into_iter(),
                Call::CallActivity { .. }
                | Call::CallOrchestration { .. }
                | Call::StartTimer { .. }
                | Call::CallEntity(_)
                | Call::SignalEntity(_)
                | Call::LockEntities { .. }
                | Call::UnlockEntity { .. } => {
                    if let Some(id) = ids.next() {
                        tasks.insert(task, (id, call.clone()));
                    }
                }
                _ => {}
            }
            task = task.saturating_add(1);
        }
        Self(tasks)
    }

    /// The protocol's event for an outcome; `None` for one of a task the
    /// worker never scheduled.
    fn outcome(&self, event: &Event, at: i64) -> Option<HistoryEvent> {
        let kind = match event {
            Event::EventRaised { name, payload } => Kind::EventRaised {
                name: name.clone(),
                input: payload.clone(),
            },
            Event::TaskCompleted { task, result } => match self.0.get(task)? {
                (_, Call::LockEntities { section, .. }) => Kind::EntityLockGranted {
                    section: section.clone(),
                },
                (_, Call::CallEntity(message)) => Kind::EntityOperationCompleted {
                    request_id: message.request_id.clone(),
                    output: result.clone(),
                },
                (id, Call::CallOrchestration { .. }) => Kind::SubOrchestrationCompleted {
                    scheduled: *id,
                    result: result.clone(),
                },
                (id, _) => Kind::TaskCompleted {
                    scheduled: *id,
                    result: result.clone(),
                },
            },
            Event::TaskFailed {
                task,
                error,
                details,
            } => match self.0.get(task)? {
                (_, Call::CallEntity(message)) => Kind::EntityOperationFailed {
                    request_id: message.request_id.clone(),
                    error: error.clone(),
                },
                (id, Call::CallOrchestration { .. }) => Kind::SubOrchestrationFailed {
                    scheduled: *id,
                    error: error.clone(),
                    details: details.clone(),
                },
                (id, _) => Kind::TaskFailed {
                    scheduled: *id,
                    error: error.clone(),
                    details: details.clone(),
                },
            },
            Event::TimerFired { task } => match self.0.get(task)? {
                (id, Call::StartTimer { fire_at }) => Kind::TimerFired {
                    timer: *id,
                    fire_at: i64::try_from(*fire_at).unwrap_or(i64::MAX),
                },
                _ => return None,
            },
        };
        Some(HistoryEvent { id: -1, at, kind })
    }
}

/// The history the worker replays: every episode journaled so far.
pub fn past(instance: &Started, journal: &[(Entry, i64)]) -> Vec<HistoryEvent> {
    let tasks = Tasks::of(journal);
    let mut history = Vec::with_capacity(journal.len() + 2);
    let mut waiting: Vec<(&Event, i64)> = Vec::new();
    let mut ids: std::vec::IntoIter<i32> = Vec::new().into_iter();
    let mut started = false;
    let mut task: u32 = 0;
    for (entry, at) in journal {
        let call = match entry {
            // An episode's arrivals are journaled before its calls; the
            // worker saw them after the episode's start.
            Entry::Event(event) => {
                waiting.push((event, *at));
                continue;
            }
            Entry::Call(call) => call,
        };
        match call {
            Call::SdkEpisode { ids: these, .. } => {
                ids = these.clone().into_iter();
                history.push(event(-1, *at, Kind::OrchestratorStarted));
                if !started {
                    started = true;
                    history.push(event(-1, *at, Kind::ExecutionStarted(instance.clone())));
                }
                for (arrived, at) in waiting.drain(..) {
                    history.extend(tasks.outcome(arrived, at));
                }
            }
            Call::CallActivity { name, input, .. } => {
                if let Some(id) = ids.next() {
                    let kind = Kind::TaskScheduled {
                        name: name.clone(),
                        input: input.clone(),
                    };
                    history.push(event(id, *at, kind));
                }
            }
            Call::CallOrchestration {
                name,
                input,
                id: chosen,
            } => {
                if let Some(id) = ids.next() {
                    let kind = Kind::SubOrchestrationCreated {
                        instance_id: chosen.clone().unwrap_or_else(|| {
                            ids::child_instance(&instance.instance_id, instance.execution, task)
                        }),
                        name: name.clone(),
                        input: input.clone(),
                    };
                    history.push(event(id, *at, kind));
                }
            }
            Call::StartTimer { fire_at } => {
                if let Some(id) = ids.next() {
                    let fire_at = i64::try_from(*fire_at).unwrap_or(i64::MAX);
                    history.push(event(id, *at, Kind::TimerCreated { fire_at }));
                }
            }
            Call::CallEntity(message) | Call::SignalEntity(message) => {
                if let Some(id) = ids.next() {
                    let kind = if matches!(call, Call::CallEntity(_)) {
                        Kind::EntityOperationCalled(message.clone())
                    } else {
                        Kind::EntityOperationSignaled(message.clone())
                    };
                    history.push(event(id, *at, kind));
                }
            }
            Call::LockEntities { section, entities } => {
                if let Some(id) = ids.next() {
                    let kind = Kind::EntityLockRequested {
                        section: section.clone(),
                        lock_set: entities.clone(),
                    };
                    history.push(event(id, *at, kind));
                }
            }
            Call::UnlockEntity { section, entity } => {
                if let Some(id) = ids.next() {
                    let kind = Kind::EntityUnlockSent {
                        section: section.clone(),
                        entity: entity.clone(),
                    };
                    history.push(event(id, *at, kind));
                }
            }
            _ => {}
        }
        task = task.saturating_add(1);
    }
    for (arrived, at) in waiting {
        history.extend(tasks.outcome(arrived, at));
    }
    history
}

/// What is new to the worker in this episode: its start, the execution's
/// start in its first one, and what arrived. Never empty (the SDKs refuse
/// a request with no new event).
pub fn new_events(
    instance: &Started,
    journal: &[(Entry, i64)],
    arrived: &[Event],
    now: i64,
) -> Vec<HistoryEvent> {
    let tasks = Tasks::of(journal);
    let mut events = vec![event(-1, now, Kind::OrchestratorStarted)];
    let first = !journal
        .iter()
        .any(|(entry, _)| matches!(entry, Entry::Call(Call::SdkEpisode { .. })));
    if first {
        events.push(event(-1, now, Kind::ExecutionStarted(instance.clone())));
    }
    events.extend(
        arrived
            .iter()
            .filter_map(|arrival| tasks.outcome(arrival, now)),
    );
    events
}

/// Bytes the events' payloads take: what decides whether a worker can be
/// sent them in one message.
pub fn payload_bytes(events: &[HistoryEvent]) -> usize {
    const EVENT_OVERHEAD: usize = 32;
    events
        .iter()
        .map(|e| {
            EVENT_OVERHEAD
                + match &e.kind {
                    Kind::OrchestratorStarted
                    | Kind::TimerCreated { .. }
                    | Kind::TimerFired { .. } => 0,
                    Kind::ExecutionStarted(s) => s.name.len() + s.input.len() + s.instance_id.len(),
                    Kind::TaskScheduled { name, input } => name.len() + input.len(),
                    Kind::TaskCompleted { result, .. }
                    | Kind::SubOrchestrationCompleted { result, .. } => result.len(),
                    Kind::TaskFailed { error, details, .. } => {
                        error.len() + details.as_ref().map_or(0, |d| d.len())
                    }
                    Kind::SubOrchestrationFailed { error, details, .. } => {
                        error.len() + details.as_ref().map_or(0, |d| d.len())
                    }
                    Kind::EntityOperationFailed { error, .. } => error.len(),
                    Kind::SubOrchestrationCreated {
                        instance_id,
                        name,
                        input,
                    } => instance_id.len() + name.len() + input.len(),
                    Kind::EventRaised { name, input } => name.len() + input.len(),
                    Kind::EntityOperationCalled(m) | Kind::EntityOperationSignaled(m) => {
                        m.entity.len()
                            + m.operation.len()
                            + m.input.as_ref().map_or(0, String::len)
                            + m.request_id.len()
                    }
                    Kind::EntityOperationCompleted { request_id, output } => {
                        request_id.len() + output.len()
                    }
                    Kind::EntityLockRequested { section, lock_set } => {
                        section.len() + lock_set.iter().map(String::len).sum::<usize>()
                    }
                    Kind::EntityUnlockSent { section, entity } => section.len() + entity.len(),
                    Kind::EntityLockGranted { section } => section.len(),
                }
        })
        .sum()
}

fn event(id: i32, at: i64, kind: Kind) -> HistoryEvent {
    HistoryEvent { id, at, kind }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lifecycle::episode_end::Ending;
    use crate::core::sdk_actions::{decide, Action, Answer, Completion, Decided};

    fn started() -> Started {
        Started {
            name: "seq".into(),
            input: "1".into(),
            instance_id: "i".into(),
            execution: 1,
            parent: None,
            version: None,
        }
    }

    #[test]
    fn an_sdk_digest_carries_the_version_it_was_started_with() {
        assert_eq!(digest_of(None), DIGEST);
        assert_eq!(digest_of(Some("")), DIGEST);
        assert_eq!(digest_of(Some("2.5.0")), "durabletask-sdk@2.5.0");
        assert_eq!(version_of(&digest_of(Some("2.5.0"))), Some("2.5.0"));
        assert_eq!(version_of(DIGEST), None);
        assert!(is_sdk(DIGEST) && is_sdk("durabletask-sdk@1"));
        assert!(!is_sdk("durabletask-sdkx") && !is_sdk("sha256:ab"));
    }

    fn journal_of(decided: &Decided, arrived: &[Event], at: i64) -> Vec<(Entry, i64)> {
        arrived
            .iter()
            .cloned()
            .map(Entry::Event)
            .chain(decided.calls.iter().cloned().map(Entry::Call))
            .map(|e| (e, at))
            .collect()
    }

    #[test]
    fn an_episode_marker_and_its_actions_replay_as_the_protocol_history() {
        let first = decide(
            &[],
            Answer {
                actions: vec![
                    Action::ScheduleTask {
                        id: 1,
                        name: "hello".into(),
                        input: "\"a\"".into(),
                    },
                    Action::CreateTimer {
                        id: 2,
                        fire_at: 5_000,
                    },
                ],
                custom_status: None,
            },
        );
        assert_eq!(first.ending, Ending::Waiting);
        let mut journal = journal_of(&first, &[], 1_000);
        // The activity (task 1: the marker is task 0) completes.
        let done = [Event::TaskCompleted {
            task: 1,
            result: "\"hi\"".into(),
        }];
        let new = new_events(&started(), &journal, &done, 2_000);
        assert_eq!(new.len(), 2);
        assert_eq!(
            new[1].kind,
            Kind::TaskCompleted {
                scheduled: 1,
                result: "\"hi\"".into()
            }
        );
        let second = decide(
            &journal,
            Answer {
                actions: vec![
                    Action::CreateSubOrchestration {
                        id: 3,
                        name: "child".into(),
                        input: "null".into(),
                        instance_id: None,
                        version: None,
                    },
                    Action::Complete(Completion::Completed("\"x\"".into())),
                ],
                custom_status: Some("\"s\"".into()),
            },
        );
        assert_eq!(second.ending, Ending::Returned(Ok("\"x\"".into())));
        journal.extend(journal_of(&second, &done, 2_000));
        let history = past(&started(), &journal);
        let kinds: Vec<_> = history
            .iter()
            .map(|e| (e.id, e.at, e.kind.clone()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (-1, 1_000, Kind::OrchestratorStarted),
                (-1, 1_000, Kind::ExecutionStarted(started())),
                (
                    1,
                    1_000,
                    Kind::TaskScheduled {
                        name: "hello".into(),
                        input: "\"a\"".into()
                    }
                ),
                (2, 1_000, Kind::TimerCreated { fire_at: 5_000 }),
                (-1, 2_000, Kind::OrchestratorStarted),
                (
                    -1,
                    2_000,
                    Kind::TaskCompleted {
                        scheduled: 1,
                        result: "\"hi\"".into()
                    }
                ),
                (
                    3,
                    2_000,
                    Kind::SubOrchestrationCreated {
                        // The engine's child id: the fourth call of execution 1.
                        instance_id: "i:1:4".into(),
                        name: "child".into(),
                        input: "null".into()
                    }
                ),
            ]
        );
        // The timer's firing names the worker's id and its time.
        let fired = new_events(
            &started(),
            &journal,
            &[Event::TimerFired { task: 2 }],
            6_000,
        );
        assert_eq!(
            fired[1].kind,
            Kind::TimerFired {
                timer: 2,
                fire_at: 5_000
            }
        );
        assert!(
            !fired
                .iter()
                .any(|e| matches!(e.kind, Kind::ExecutionStarted(_))),
            "only the first episode starts the execution"
        );
    }

    #[test]
    fn the_first_episode_starts_the_execution_and_a_retry_reuses_its_id() {
        let new = new_events(&started(), &[], &[], 7);
        assert_eq!(
            new.iter().map(|e| e.kind.clone()).collect::<Vec<_>>(),
            vec![Kind::OrchestratorStarted, Kind::ExecutionStarted(started())]
        );
        // The SDKs schedule a retried activity again under its first id.
        let schedule = || Action::ScheduleTask {
            id: 1,
            name: "flaky".into(),
            input: "null".into(),
        };
        let first = decide(
            &[],
            Answer {
                actions: vec![schedule()],
                custom_status: None,
            },
        );
        let failed = [Event::TaskFailed {
            task: 1,
            error: "no".into(),
            details: None,
        }];
        let mut journal = journal_of(&first, &[], 1);
        let again = decide(
            &journal,
            Answer {
                actions: vec![schedule()],
                custom_status: None,
            },
        );
        journal.extend(journal_of(&again, &failed, 2));
        let later = new_events(
            &started(),
            &journal,
            &[Event::TaskCompleted {
                task: 3,
                result: "1".into(),
            }],
            3,
        );
        assert_eq!(
            later[1].kind,
            Kind::TaskCompleted {
                scheduled: 1,
                result: "1".into()
            }
        );
    }
}
