//! The history of any instance of the hub in the Durable Task protocol's
//! terms, as `StreamInstanceHistory` answers it: an SDK orchestration's as
//! its worker replays it ([`sdk_history::past`]); a component's from its
//! journal, each call's task number plus one its id and an
//! `OrchestratorStarted` for each episode (the entries written at one
//! time); then the execution's end, when it ended. Numbered as the managed
//! scheduler numbers them: `ExecutionStarted` 0, the end after the last
//! action, the rest (arrivals, episode starts) -1. Only the current
//! execution's: the journal keeps no other.

use super::journal::{Call, Entry};
use super::sdk_history::{
    self, completed_id, component_id, event, Ended, HistoryEvent, Kind, Started, Tasks,
    EXECUTION_STARTED_ID,
};

/// The history of `instance` (running on `digest`, created at
/// `created_at`) from its `journal`, and its end (`ended`, at its time).
pub fn of(
    instance: &Started,
    digest: &str,
    created_at: i64,
    journal: &[(Entry, i64)],
    ended: Option<(Ended, i64)>,
) -> Vec<HistoryEvent> {
    let mut history = if sdk_history::is_sdk(digest) {
        sdk_history::past(instance, journal)
    } else {
        of_component(instance, journal)
    };
    // One that has not run yet has begun all the same.
    if history.is_empty() {
        history.push(event(-1, created_at, Kind::OrchestratorStarted));
        history.push(event(
            EXECUTION_STARTED_ID,
            created_at,
            Kind::ExecutionStarted(instance.clone()),
        ));
    }
    if let Some((ended, at)) = ended {
        let id = completed_id(&history);
        history.push(event(id, at, Kind::ExecutionCompleted(ended)));
    }
    history
}

fn of_component(instance: &Started, journal: &[(Entry, i64)]) -> Vec<HistoryEvent> {
    let tasks = Tasks::numbered(journal);
    let mut history = Vec::with_capacity(journal.len() + 2);
    let mut episode = None;
    let mut task: u32 = 0;
    for (entry, at) in journal {
        if episode != Some(*at) {
            history.push(event(-1, *at, Kind::OrchestratorStarted));
            if episode.is_none() {
                history.push(event(
                    EXECUTION_STARTED_ID,
                    *at,
                    Kind::ExecutionStarted(instance.clone()),
                ));
            }
            episode = Some(*at);
        }
        let call = match entry {
            Entry::Event(arrived) => {
                history.extend(tasks.outcome(arrived, *at));
                continue;
            }
            Entry::Call(call) => call,
        };
        // An agent's call is a task of the host's: scheduled under its
        // description, its message the input.
        let kind = match call {
            Call::CallAgent { message, .. } | Call::CallRemoteAgent { message, .. } => {
                Some(Kind::TaskScheduled {
                    name: call.describe(),
                    input: serde_json::Value::String(message.clone()).to_string(),
                })
            }
            call => sdk_history::scheduled(call, instance, task),
        };
        if let Some(kind) = kind {
            history.push(event(component_id(task), *at, kind));
        }
        task = task.saturating_add(1);
    }
    history
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::instance::RuntimeStatus;
    use crate::core::journal::Event;

    fn started() -> Started {
        Started {
            name: "sequence".into(),
            input: "3".into(),
            instance_id: "i".into(),
            execution: 1,
            parent: None,
            version: None,
        }
    }

    #[test]
    fn a_components_journal_reads_as_episodes_with_task_numbers_for_ids() {
        let journal = vec![
            (Entry::Call(Call::Now { value: 5 }), 10),
            (
                Entry::Call(Call::CallActivity {
                    name: "step".into(),
                    input: "1".into(),
                    retry: None,
                }),
                10,
            ),
            (
                Entry::Event(Event::TaskCompleted {
                    task: 1,
                    result: "2".into(),
                }),
                20,
            ),
        ];
        let ended = Ended {
            status: RuntimeStatus::Completed,
            output: Some("2".into()),
            failure: None,
        };
        let history = of(&started(), "sha256:x", 1, &journal, Some((ended, 30)));
        let kinds: Vec<(i32, &Kind)> = history.iter().map(|e| (e.id, &e.kind)).collect();
        assert!(
            matches!(
                kinds.as_slice(),
                [
                    (-1, Kind::OrchestratorStarted),
                    (0, Kind::ExecutionStarted(_)),
                    (2, Kind::TaskScheduled { .. }),
                    (-1, Kind::OrchestratorStarted),
                    (-1, Kind::TaskCompleted { scheduled: 2, .. }),
                    (3, Kind::ExecutionCompleted(_)),
                ]
            ),
            "{kinds:?}"
        );
        assert_eq!(history[3].at, 20);
    }

    #[test]
    fn one_that_never_ran_has_begun() {
        let history = of(&started(), "durabletask-sdk", 7, &[], None);
        assert_eq!(history.len(), 2);
        assert!(history.iter().all(|e| e.at == 7));
    }
}
