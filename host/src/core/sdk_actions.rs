//! The actions a Durable Task SDK worker answers an episode with, turned
//! into what the engine journals and does: the calls (an `sdk-episode`
//! marker first, with the worker's ids for the calls after it) and how the
//! episode ends. The history the worker is sent is
//! [`super::sdk_history`]'s.

use super::failure::TaskError;
use super::journal::{Call, Entry, Event};
use super::lifecycle::episode_end::Ending;
use super::sdk_history::EntityMessage;

/// What a worker asked for, one action of its answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    ScheduleTask {
        id: i32,
        name: String,
        input: String,
    },
    CreateTimer {
        id: i32,
        fire_at: i64,
    },
    CreateSubOrchestration {
        id: i32,
        name: String,
        input: String,
        /// The child's id, as the worker named it.
        instance_id: Option<String>,
        /// The orchestration version the child starts with (the SDKs send
        /// the worker's default when the code names none).
        version: Option<String>,
        /// The tags the child is started with, a JSON object of strings.
        tags: Option<String>,
    },
    /// `call_entity`: its result comes back to the orchestration.
    CallEntity {
        id: i32,
        message: EntityMessage,
    },
    SignalEntity {
        id: i32,
        message: EntityMessage,
    },
    /// `lock_entities`: a critical section on the entities, in the order
    /// given; granted as the action's task completes.
    LockEntities {
        id: i32,
        section: String,
        entities: Vec<String>,
    },
    /// The end of a critical section on one of its entities.
    UnlockEntity {
        id: i32,
        section: String,
        entity: String,
    },
    /// `send_event`: an event raised at another orchestration instance.
    SendEvent {
        id: i32,
        instance: String,
        name: String,
        input: String,
    },
    Complete(Completion),
    /// An action the engine does not carry out (sending an event, entity
    /// messages, terminating another instance): the instance fails saying so.
    Unsupported(String),
    /// An action the worker got wrong (a payload that is not JSON): the
    /// instance fails with the reason, whatever else the answer says.
    Invalid(String),
}

/// How the worker ended the execution.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    Completed(String),
    /// With the worker's own failure details when it gave them.
    Failed(TaskError),
    /// With the raised events it had not taken, to deliver to the next one,
    /// and the version the next one runs on if the code named a new one.
    ContinuedAsNew {
        input: String,
        carryover: Vec<(String, String)>,
        version: Option<String>,
    },
}

/// A worker's answer to an episode.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Answer {
    pub actions: Vec<Action>,
    /// JSON text; `None` leaves the custom status as it is.
    pub custom_status: Option<String>,
}

/// What the engine journals and does for an answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// The calls to journal, the episode marker first.
    pub calls: Vec<Call>,
    pub ending: Ending,
    /// Raised events the next execution receives (continue-as-new).
    pub carryover: Vec<Event>,
    /// The version each sub-orchestration it calls starts with, by name.
    pub child_versions: Vec<(String, Option<String>)>,
    /// The tags of each sub-orchestration started with some, by its id.
    pub child_tags: Vec<(String, String)>,
    /// On continue-as-new to a new version: that version (the next
    /// execution is sent it, and workers' version filters match on it).
    pub next_version: Option<String>,
}

/// The custom status the journal last set, to journal a new one only when
/// the worker's differs.
fn custom_status(journal: &[(Entry, i64)]) -> Option<&str> {
    journal.iter().rev().find_map(|(entry, _)| match entry {
        Entry::Call(Call::SetCustomStatus { status }) => Some(status.as_str()),
        _ => None,
    })
}

/// Whether `id` is an entity's (`@name@key`, a valid instance id within
/// the managed scheduler's length limit).
fn is_entity(id: &str) -> bool {
    super::sdk_entities::parse_entity_id(id).is_some() && super::ids::valid_scheduler_id(id)
}

/// The calls and the ending of the worker's answer.
pub fn decide(journal: &[(Entry, i64)], answer: Answer) -> Decided {
    let mut ids = Vec::new();
    let mut calls = Vec::new();
    let mut ending = Ending::Waiting;
    let mut carryover = Vec::new();
    let mut failure = None;
    let mut child_versions = Vec::new();
    let mut child_tags = Vec::new();
    let mut next_version = None;
    for action in answer.actions {
        // An entity call's result comes back to the orchestration.
        let awaited = matches!(action, Action::CallEntity { .. });
        match action {
            Action::ScheduleTask { id, name, input } => {
                ids.push(id);
                calls.push(Call::CallActivity {
                    name,
                    input,
                    retry: None,
                });
            }
            Action::CreateTimer { id, fire_at } => {
                ids.push(id);
                calls.push(Call::StartTimer {
                    fire_at: u64::try_from(fire_at).unwrap_or(0),
                });
            }
            Action::CreateSubOrchestration {
                id,
                name,
                input,
                instance_id,
                version,
                tags,
            } => {
                if let Some(child) = instance_id.as_deref().filter(|child| {
                    !super::ids::valid_scheduler_id(child)
                        || super::sdk_entities::parse_entity_id(child).is_some()
                }) {
                    ending = Ending::Broken(format!(
                        "the sub-orchestration id '{child}' is not a valid instance id (1 to {} characters without '/', the Durable Task Scheduler's length limit; not an entity's @name@key)",
                        super::ids::SCHEDULER_ID_CHARS
                    ));
                    break;
                }
                if !super::ids::valid_name(&name) {
                    ending = Ending::Broken(format!(
                        "the sub-orchestration name '{}' is not a valid name (1 to 256 characters without NUL)",
                        name.escape_debug()
                    ));
                    break;
                }
                ids.push(id);
                child_versions.push((name.clone(), version));
                if let (Some(child), Some(tags)) = (&instance_id, tags) {
                    child_tags.push((child.clone(), tags));
                }
                calls.push(Call::CallOrchestration {
                    name,
                    input,
                    id: instance_id,
                });
            }
            Action::CallEntity { id, message } | Action::SignalEntity { id, message } => {
                if !is_entity(&message.entity) {
                    ending = Ending::Broken(format!(
                        "the Durable Task SDK worker named '{}', which is not an entity id (@name@key)",
                        message.entity
                    ));
                    break;
                }
                ids.push(id);
                calls.push(if awaited {
                    Call::CallEntity(message)
                } else {
                    Call::SignalEntity(message)
                });
            }
            Action::LockEntities {
                id,
                section,
                mut entities,
            } => {
                // Taken in one order by every section, each entity once:
                // two sections never wait on each other, nor one on itself
                // (the SDKs send them so; a worker that does not is not
                // trusted to).
                entities.sort();
                entities.dedup();
                if let Some(bad) = entities.iter().find(|e| !is_entity(e)) {
                    ending = Ending::Broken(format!(
                        "the Durable Task SDK worker asked to lock '{bad}', which is not an entity id (@name@key)"
                    ));
                    break;
                }
                if entities.is_empty() {
                    ending = Ending::Broken(
                        "the Durable Task SDK worker asked to lock no entity".to_string(),
                    );
                    break;
                }
                ids.push(id);
                calls.push(Call::LockEntities { section, entities });
            }
            Action::UnlockEntity {
                id,
                section,
                entity,
            } => {
                if !is_entity(&entity) {
                    ending = Ending::Broken(format!(
                        "the Durable Task SDK worker asked to unlock '{entity}', which is not an entity id (@name@key)"
                    ));
                    break;
                }
                ids.push(id);
                calls.push(Call::UnlockEntity { section, entity });
            }
            Action::SendEvent {
                id,
                instance,
                name,
                input,
            } => {
                // An entity's id takes operations, not events (the SDKs
                // refuse it too).
                if !super::ids::valid_instance_id(&instance)
                    || super::sdk_entities::parse_entity_id(&instance).is_some()
                {
                    ending = Ending::Broken(format!(
                        "the Durable Task SDK worker sent event '{}' to '{instance}', which is not an orchestration instance id",
                        name.escape_debug()
                    ));
                    break;
                }
                ids.push(id);
                calls.push(Call::SendEvent {
                    instance,
                    name,
                    input,
                });
            }
            Action::Complete(Completion::Completed(output)) => {
                ending = Ending::Returned(Ok(output));
            }
            Action::Complete(Completion::Failed(error)) => {
                ending = Ending::Returned(Err(error.text));
                failure = error.details;
            }
            Action::Complete(Completion::ContinuedAsNew {
                input,
                carryover: events,
                version,
            }) => {
                calls.push(Call::ContinueAsNew { input });
                next_version = version;
                carryover = events
                    .into_iter()
                    .map(|(name, payload)| Event::EventRaised { name, payload })
                    .collect();
                ending = Ending::Returned(Ok("null".into()));
            }
            Action::Unsupported(what) => {
                ending = Ending::Broken(format!(
                    "the Durable Task SDK worker asked for {what}, which agenthost does not carry out for SDK orchestrations"
                ));
            }
            Action::Invalid(why) => ending = Ending::Broken(why),
        }
        if matches!(ending, Ending::Broken(_)) {
            break;
        }
    }
    if let Some(status) = answer.custom_status {
        if custom_status(journal) != Some(status.as_str()) {
            calls.push(Call::SetCustomStatus { status });
        }
    }
    calls.insert(0, Call::SdkEpisode { ids, failure });
    Decided {
        calls,
        ending,
        carryover,
        child_versions,
        child_tags,
        next_version,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::failure::FailureDetails;

    #[test]
    fn a_failure_the_worker_reported_ends_the_instance_and_is_journaled_whole() {
        let details = FailureDetails {
            error_type: "durabletask.task.TaskFailedError".into(),
            message: "no tea today".into(),
            stack_trace: Some("at brew()".into()),
            inner: None,
            non_retriable: false,
        };
        let decided = decide(
            &[],
            Answer {
                actions: vec![Action::Complete(Completion::Failed(TaskError::reported(
                    details.clone(),
                )))],
                custom_status: None,
            },
        );
        assert_eq!(
            decided.ending,
            Ending::Returned(Err("durabletask.task.TaskFailedError: no tea today".into()))
        );
        assert_eq!(
            decided.calls,
            vec![Call::SdkEpisode {
                ids: Vec::new(),
                failure: Some(Box::new(details))
            }]
        );
    }

    #[test]
    fn continue_as_new_carries_events_and_what_is_not_served_breaks_the_instance() {
        let decided = decide(
            &[],
            Answer {
                actions: vec![Action::Complete(Completion::ContinuedAsNew {
                    input: "2".into(),
                    carryover: vec![("go".into(), "1".into())],
                    version: Some("2.0".into()),
                })],
                custom_status: None,
            },
        );
        assert!(decided
            .calls
            .contains(&Call::ContinueAsNew { input: "2".into() }));
        assert_eq!(decided.next_version.as_deref(), Some("2.0"));
        assert_eq!(
            decided.carryover,
            vec![Event::EventRaised {
                name: "go".into(),
                payload: "1".into()
            }]
        );
        let refused = decide(
            &[],
            Answer {
                actions: vec![Action::Unsupported(
                    "terminating another orchestration".into(),
                )],
                custom_status: None,
            },
        );
        assert!(
            matches!(refused.ending, Ending::Broken(ref why) if why.contains("terminating another"))
        );
    }

    #[test]
    fn a_sub_orchestration_keeps_the_id_its_worker_named_and_a_bad_one_breaks_the_instance() {
        let child = |instance_id: &str| Answer {
            actions: vec![Action::CreateSubOrchestration {
                id: 0,
                name: "c".into(),
                input: "null".into(),
                instance_id: Some(instance_id.into()),
                version: None,
                tags: None,
            }],
            custom_status: None,
        };
        let named = decide(&[], child("p:0000"));
        assert!(named.calls.contains(&Call::CallOrchestration {
            name: "c".into(),
            input: "null".into(),
            id: Some("p:0000".into()),
        }));
        for bad in ["a/b", "@counter@k", ""] {
            let refused = decide(&[], child(bad));
            assert!(
                matches!(refused.ending, Ending::Broken(ref why) if why.contains("not a valid instance id")),
                "{bad}: {:?}",
                refused.ending
            );
        }
    }

    #[test]
    fn an_event_sent_is_journaled_under_its_action_id_and_an_entity_target_breaks_the_instance() {
        let send = |target: &str| Answer {
            actions: vec![Action::SendEvent {
                id: 4,
                instance: target.into(),
                name: "ping".into(),
                input: "1".into(),
            }],
            custom_status: None,
        };
        let sent = decide(&[], send("other"));
        assert_eq!(sent.ending, Ending::Waiting);
        assert_eq!(
            sent.calls,
            vec![
                Call::SdkEpisode {
                    ids: vec![4],
                    failure: None
                },
                Call::SendEvent {
                    instance: "other".into(),
                    name: "ping".into(),
                    input: "1".into(),
                }
            ]
        );
        for bad in ["@counter@k", "", "a/b"] {
            let refused = decide(&[], send(bad));
            assert!(
                matches!(refused.ending, Ending::Broken(ref why) if why.contains("not an orchestration instance id")),
                "{bad}: {:?}",
                refused.ending
            );
        }
    }

    #[test]
    fn an_unchanged_custom_status_is_not_journaled_again() {
        let journal = vec![(
            Entry::Call(Call::SetCustomStatus {
                status: "\"s\"".into(),
            }),
            1,
        )];
        let same = decide(
            &journal,
            Answer {
                actions: Vec::new(),
                custom_status: Some("\"s\"".into()),
            },
        );
        assert_eq!(
            same.calls,
            vec![Call::SdkEpisode {
                ids: Vec::new(),
                failure: None
            }]
        );
    }
}
