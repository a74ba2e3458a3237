//! Rewinding a failed instance, as the Durable Task protocol's
//! `RewindInstance` does: what failed runs again, what succeeded is kept.
//! The failures of its activities and sub-orchestrations leave the journal;
//! each failed activity is scheduled again (its call stays where it was, so
//! the code's replay meets it as a task not done yet), each failed
//! sub-orchestration is rewound in turn (or created again when it is gone),
//! and the instance runs again in the same execution, so that its children
//! still report to it.
//!
//! An instance whose code failed by itself, with no failed task, has
//! nothing to run again: its rewind is refused (a restart runs it anew).

use std::collections::HashMap;

use super::{Change, Changed};
use crate::core::effects::Effect;
use crate::core::ids;
use crate::core::instance::{InstanceState, NewInstance, ParentRef, RuntimeStatus};
use crate::core::journal::{Call, Entry, Event};

/// A failed sub-orchestration of the instance rewound.
#[derive(Debug, Clone, PartialEq)]
pub struct FailedChild {
    pub id: String,
    /// What creates it again when it is gone (or ended otherwise than
    /// failed): its call as journaled, on its parent's version.
    pub again: NewInstance,
}

/// A rewind's effects on the instance, and its failed children.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewinding {
    pub changed: Changed,
    pub children: Vec<FailedChild>,
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
    let calls: HashMap<u32, &Call> = journal
        .iter()
        .filter_map(|(entry, _)| match entry {
            Entry::Call(call) => Some(call),
            Entry::Event(_) => None,
        })
        .enumerate()
        .map(|(task, call)| (u32::try_from(task).unwrap_or(u32::MAX), call))
        .collect();
    let mut kept: Vec<(Entry, i64)> = Vec::with_capacity(journal.len());
    let mut again = Vec::new();
    let mut children = Vec::new();
    for (entry, at) in journal {
        match entry {
            Entry::Event(Event::TaskFailed { task, .. }) => match calls.get(task) {
                Some(
                    call @ (Call::CallActivity { .. }
                    | Call::CallAgent { .. }
                    | Call::CallRemoteAgent { .. }),
                ) => {
                    again.push(Effect::ScheduleTask {
                        task: *task,
                        call: (*call).clone(),
                    });
                    continue;
                }
                Some(Call::CallOrchestration { name, input, id }) => {
                    let id = id
                        .clone()
                        .unwrap_or_else(|| ids::child_instance(&state.id, state.execution, *task));
                    children.push(FailedChild {
                        again: NewInstance {
                            id: id.clone(),
                            name: name.clone(),
                            input: input.clone(),
                            digest: digest.to_string(),
                            activity_set: activity_set.map(str::to_string),
                            parent: Some(ParentRef {
                                id: state.id.clone(),
                                execution: state.execution,
                                task: *task,
                            }),
                            traceparent: None,
                        },
                        id,
                    });
                    continue;
                }
                _ => kept.push((entry.clone(), *at)),
            },
            // The worker's account of the failure goes with it.
            Entry::Call(Call::SdkEpisode { ids, failure: Some(_) }) => kept.push((
                Entry::Call(Call::SdkEpisode {
                    ids: ids.clone(),
                    failure: None,
                }),
                *at,
            )),
            _ => kept.push((entry.clone(), *at)),
        }
    }
    if again.is_empty() && children.is_empty() {
        return refused(Change::NotApplicable);
    }
    let mut effects = vec![Effect::ResetJournal];
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
    effects.push(Effect::SetStatus {
        status: RuntimeStatus::Running,
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
