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

/// How an SDK instance's input or output that is JSON `null` is kept, apart
/// from one it does not have (kept as `null`, and read back as none, as the
/// Python SDK sends it): `null` followed by a space, the same JSON value to
/// whatever reads it as JSON, shown as `null` over the protocol (the
/// JavaScript SDK sends and expects `"null"` for a `null` it returns).
pub const KEPT_NULL: &str = "null ";

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

/// The event id of `ExecutionStarted`, as the managed scheduler numbers
/// it: the SDKs number their actions from 1, and the execution's end comes
/// after the last of them ([`completed_id`]).
pub const EXECUTION_STARTED_ID: i32 = 0;

/// The event id of `ExecutionCompleted` at the end of `history`: the number
/// after the highest one in it, as the SDKs number their completing action
/// (the managed scheduler keeps that action's id).
pub fn completed_id(history: &[HistoryEvent]) -> i32 {
    history
        .iter()
        .map(|e| e.id)
        .max()
        .unwrap_or(EXECUTION_STARTED_ID)
        .max(EXECUTION_STARTED_ID)
        .saturating_add(1)
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
    /// The orchestration that started this one as its sub-orchestration.
    pub parent: Option<Parent>,
    /// The orchestration version it was started with.
    pub version: Option<String>,
}

/// A sub-orchestration's parent, as the protocol's `ParentInstanceInfo`
/// names it (the SDKs show it as `ctx.parent`).
#[derive(Debug, Clone, PartialEq)]
pub struct Parent {
    pub instance_id: String,
    pub execution: i64,
    /// The task of the parent that started this one.
    pub task: u32,
    /// The parent orchestration's name and version.
    pub name: String,
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
    /// An event this orchestration sent another instance.
    EventSent {
        instance_id: String,
        name: String,
        input: String,
    },
    /// The execution's end, as `StreamInstanceHistory` shows it (a worker
    /// is never sent one).
    ExecutionCompleted(Ended),
}

/// How an execution ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    pub status: super::instance::RuntimeStatus,
    /// JSON text.
    pub output: Option<String>,
    /// The failure, as its worker reported it or in the engine's words.
    pub failure: Option<FailureDetails>,
}

/// An operation an orchestration sends an entity, as journaled.
pub use super::journal::EntityCall as EntityMessage;

/// What each task of the journal is, by task number, for its outcome's
/// event: its action id, and what it was.
pub(crate) struct Tasks(HashMap<u32, (i32, Call)>);

impl Tasks {
    pub(crate) fn of(journal: &[(Entry, i64)]) -> Self {
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
                | Call::UnlockEntity { .. }
                | Call::SendEvent { .. } => {
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

    /// The tasks of a journal no worker gave ids (a component's): each
    /// call's id is its task number plus one (the execution's start is 0,
    /// as the SDKs' first action is 1).
    pub(crate) fn numbered(journal: &[(Entry, i64)]) -> Self {
        let calls = journal.iter().filter_map(|(entry, _)| match entry {
            Entry::Call(call) => Some(call),
            Entry::Event(_) => None,
        });
        let tasks = calls
            .enumerate()
            .map(|(task, call)| {
                let task = u32::try_from(task).unwrap_or(u32::MAX);
                (task, (component_id(task), call.clone()))
            })
            .collect();
        Self(tasks)
    }

    /// The protocol's event for an outcome; `None` for one of a task the
    /// worker never scheduled.
    pub(crate) fn outcome(&self, event: &Event, at: i64) -> Option<HistoryEvent> {
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

/// The protocol's event for a call that schedules something (an SDK
/// worker gave it an id); `None` for the rest (values, markers, the
/// custom status).
pub(crate) fn scheduled(call: &Call, instance: &Started, task: u32) -> Option<Kind> {
    Some(match call {
        Call::CallActivity { name, input, .. } => Kind::TaskScheduled {
            name: name.clone(),
            input: input.clone(),
        },
        Call::CallOrchestration {
            name,
            input,
            id: chosen,
        } => Kind::SubOrchestrationCreated {
            instance_id: chosen.clone().unwrap_or_else(|| {
                ids::child_instance(&instance.instance_id, instance.execution, task)
            }),
            name: name.clone(),
            input: input.clone(),
        },
        Call::StartTimer { fire_at } => Kind::TimerCreated {
            fire_at: i64::try_from(*fire_at).unwrap_or(i64::MAX),
        },
        Call::CallEntity(message) => Kind::EntityOperationCalled(message.clone()),
        Call::SignalEntity(message) => Kind::EntityOperationSignaled(message.clone()),
        Call::LockEntities { section, entities } => Kind::EntityLockRequested {
            section: section.clone(),
            lock_set: entities.clone(),
        },
        Call::UnlockEntity { section, entity } => Kind::EntityUnlockSent {
            section: section.clone(),
            entity: entity.clone(),
        },
        Call::SendEvent {
            instance,
            name,
            input,
        } => Kind::EventSent {
            instance_id: instance.clone(),
            name: name.clone(),
            input: input.clone(),
        },
        _ => return None,
    })
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
                    history.push(event(
                        EXECUTION_STARTED_ID,
                        *at,
                        Kind::ExecutionStarted(instance.clone()),
                    ));
                }
                for (arrived, at) in waiting.drain(..) {
                    history.extend(tasks.outcome(arrived, at));
                }
            }
            call => {
                if let Some(kind) = scheduled(call, instance, task) {
                    if let Some(id) = ids.next() {
                        history.push(event(id, *at, kind));
                    }
                }
            }
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
        events.push(event(
            EXECUTION_STARTED_ID,
            now,
            Kind::ExecutionStarted(instance.clone()),
        ));
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
                    Kind::EventSent {
                        instance_id,
                        name,
                        input,
                    } => instance_id.len() + name.len() + input.len(),
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
                    Kind::ExecutionCompleted(ended) => {
                        ended.output.as_ref().map_or(0, String::len)
                            + ended.failure.as_ref().map_or(0, FailureDetails::len)
                    }
                }
        })
        .sum()
}

/// The event id of a component's call of task number `task`.
pub(crate) fn component_id(task: u32) -> i32 {
    i32::try_from(task)
        .unwrap_or(i32::MAX - 1)
        .saturating_add(1)
}

pub(crate) fn event(id: i32, at: i64, kind: Kind) -> HistoryEvent {
    HistoryEvent { id, at, kind }
}

#[cfg(test)]
mod tests;
