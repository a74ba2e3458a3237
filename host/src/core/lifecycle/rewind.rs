//! Rewinding a failed instance, as the Durable Task protocol's
//! `RewindInstance` does: what failed runs again, what succeeded is kept.
//! The failures that ended it (those its code made no call after: a
//! failure the code caught and went on from is part of its path, and
//! stays) leave the journal; each such activity is scheduled again (its
//! call stays where it was, so the code's replay meets it as a task not
//! done yet), each such sub-orchestration is rewound in turn (or created
//! again), and what was still under way when it failed (an activity, a
//! timer: dropped as it failed) is scheduled again too. It runs on in the
//! same execution, so that its children still report to it.
//!
//! An instance whose code failed by itself, with no failed task, is
//! rewound as the Durable Task Scheduler rewinds it: its failure leaves,
//! and its code runs again from the journal at once (it is `Pending` until
//! that episode), where it may now go on (code that read something outside,
//! or was fixed and redeployed).
//!
//! Refused: one that failed inside a critical section (its locks were let
//! go as it failed; its replay would go on as if it held them).

use std::collections::HashMap;

use super::{Change, Changed};
use crate::core::effects::Effect;
use crate::core::entity_locks;
use crate::core::ids;
use crate::core::instance::{InstanceState, NewInstance, ParentRef, RuntimeStatus};
use crate::core::journal::{Call, Entry, Event};

/// A sub-orchestration of the instance rewound that it still waits for.
#[derive(Debug, Clone, PartialEq)]
pub struct WaitedChild {
    pub id: String,
    /// What creates it again when it is gone (or cannot be rewound): its
    /// call as journaled, on its parent's version unless it still exists.
    pub again: NewInstance,
}

/// A rewind's effects on the instance, and the children it waits for.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewinding {
    pub changed: Changed,
    pub children: Vec<WaitedChild>,
}

/// A child as stored: its state and the version it runs on.
pub struct Found<'a> {
    pub state: &'a InstanceState,
    pub digest: &'a str,
    pub activity_set: Option<&'a str>,
}

/// What becomes of a child the rewound instance waits for.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildStep {
    /// Rewound with its parent.
    Rewind,
    /// Created again under its parent: gone, ended otherwise than
    /// rewindable (failed in its own code, terminated, past the reach).
    Create(Box<Effect>),
    /// It runs: it reports to its parent in due course.
    Reports,
    /// Its id now names another instance's child: the rewind is refused.
    Conflict,
}

/// What becomes of `child` as `found`; `rewindable`: its own rewind would
/// be done (and is within the tree's reach).
pub fn child_step(child: WaitedChild, found: Option<Found<'_>>, rewindable: bool) -> ChildStep {
    let Some(found) = found else {
        return ChildStep::Create(Box::new(Effect::Create(child.again)));
    };
    if found.state.parent != child.again.parent {
        return ChildStep::Conflict;
    }
    if !found.state.status.is_finished() {
        return ChildStep::Reports;
    }
    if rewindable {
        return ChildStep::Rewind;
    }
    ChildStep::Create(Box::new(Effect::Create(NewInstance {
        digest: found.digest.to_string(),
        activity_set: found.activity_set.map(str::to_string),
        ..child.again
    })))
}

/// The instance `state`, running on `digest` and `activity_set`, with its
/// current execution's `journal`, rewound.
pub fn decide(
    state: Option<&InstanceState>,
    journal: &[(Entry, i64)],
    digest: &str,
    activity_set: Option<&str>,
) -> Rewinding {
    let refused = |change| Rewinding {
        changed: Changed::only(change),
        children: Vec::new(),
    };
    let Some(state) = state else {
        return refused(Change::NotFound);
    };
    if state.status != RuntimeStatus::Failed {
        return refused(Change::NotApplicable);
    }
    let calls: Vec<&Call> = journal
        .iter()
        .filter_map(|(entry, _)| match entry {
            Entry::Call(call) => Some(call),
            Entry::Event(_) => None,
        })
        .collect();
    // The position of the last call the code made (markers and its status
    // are not calls of its path).
    let last_call = journal.iter().rposition(|(entry, _)| {
        matches!(entry, Entry::Call(call) if !matches!(
            call,
            Call::SdkEpisode { .. } | Call::SetCustomStatus { .. } | Call::UnlockEntity { .. }
        ))
    });
    let mut ended: HashMap<u32, bool> = HashMap::new();
    for (at, (entry, _)) in journal.iter().enumerate() {
        let (task, failed) = match entry {
            Entry::Event(Event::TaskFailed { task, .. }) => (*task, true),
            Entry::Event(Event::TaskCompleted { task, .. } | Event::TimerFired { task }) => {
                (*task, false)
            }
            _ => continue,
        };
        // A failure the code went on from stays an outcome of its path.
        let rewound = failed && last_call.is_none_or(|last| at > last);
        ended.insert(task, !rewound);
    }
    let rewound_any = ended.values().any(|kept| !kept);
    // Failed inside a critical section: its releases came with the
    // failure, or the host's at its end.
    let first_rewound = journal.iter().position(|(entry, _)| {
        matches!(entry, Entry::Event(Event::TaskFailed { task, .. }) if ended.get(task) == Some(&false))
    });
    let released_after = first_rewound.is_some_and(|first| {
        journal[first..]
            .iter()
            .any(|(entry, _)| matches!(entry, Entry::Call(Call::UnlockEntity { .. })))
    });
    if released_after || !entity_locks::held(calls.iter().copied()).is_empty() {
        return refused(Change::NotApplicable);
    }
    let mut again = Vec::new();
    let mut children: Vec<WaitedChild> = Vec::new();
    for (task, call) in calls.iter().enumerate() {
        let task = u32::try_from(task).unwrap_or(u32::MAX);
        if ended.get(&task) == Some(&true) {
            continue;
        }
        match call {
            Call::CallActivity { .. } | Call::CallAgent { .. } | Call::CallRemoteAgent { .. } => {
                again.push(Effect::ScheduleTask {
                    task,
                    call: (*call).clone(),
                })
            }
            Call::StartTimer { fire_at } => again.push(Effect::ArmTimer {
                task,
                fire_at: i64::try_from(*fire_at).unwrap_or(i64::MAX),
            }),
            Call::CallOrchestration { name, input, id } => {
                let id = id
                    .clone()
                    .unwrap_or_else(|| ids::child_instance(&state.id, state.execution, task));
                // One id called again (a retry under the same id): the
                // last call is the one waited for.
                children.retain(|child| child.id != id);
                children.push(WaitedChild {
                    again: NewInstance {
                        id: id.clone(),
                        name: name.clone(),
                        input: input.clone(),
                        digest: digest.to_string(),
                        activity_set: activity_set.map(str::to_string),
                        parent: Some(ParentRef {
                            id: state.id.clone(),
                            execution: state.execution,
                            task,
                        }),
                        traceparent: None,
                        start_at: None,
                        caller: None,
                    },
                    id,
                });
            }
            _ => {}
        }
    }
    let mut effects = vec![Effect::ResetJournal];
    let kept: Vec<(Entry, i64)> = journal
        .iter()
        .filter_map(|(entry, at)| match entry {
            Entry::Event(Event::TaskFailed { task, .. }) if ended.get(task) == Some(&false) => None,
            // The worker's account of the failure goes with it.
            Entry::Call(Call::SdkEpisode {
                ids,
                failure: Some(_),
            }) => Some((
                Entry::Call(Call::SdkEpisode {
                    ids: ids.clone(),
                    failure: None,
                }),
                *at,
            )),
            _ => Some((entry.clone(), *at)),
        })
        .collect();
    // One append per time: each entry keeps the time it was recorded at
    // (an SDK episode's is the time its worker's code read).
    let mut rest = kept.as_slice();
    while let Some((_, at)) = rest.first() {
        let run = rest.iter().take_while(|(_, t)| t == at).count();
        let (same, after) = rest.split_at(run);
        effects.push(Effect::Append {
            entries: same.iter().map(|(entry, _)| entry.clone()).collect(),
            at: *at,
        });
        rest = after;
    }
    effects.extend(again);
    // Failed in its own code: no outcome will wake it, so it is offered
    // at once, as a start is (its episode makes it Running).
    let status = match rewound_any {
        true => RuntimeStatus::Running,
        false => RuntimeStatus::Pending,
    };
    effects.push(Effect::SetStatus {
        status,
        output: None,
        custom_status: None,
    });
    Rewinding {
        changed: Changed::done(effects),
        children,
    }
}

#[cfg(test)]
mod tests;
