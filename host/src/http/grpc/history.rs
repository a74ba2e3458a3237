//! The history an SDK worker replays and the actions it answers with, between
//! the engine's terms ([`crate::core::sdk_history`]) and the contract's
//! messages.

use super::convert::{millis, timestamp};
use super::proto::{
    history_event, operation_action, orchestrator_action, send_entity_message_action,
    CompleteOrchestrationAction, EntityLockGrantedEvent, EntityLockRequestedEvent,
    EntityOperationCalledEvent, EntityOperationCompletedEvent, EntityOperationFailedEvent,
    EntityOperationSignaledEvent, EntityUnlockSentEvent, EventRaisedEvent, EventSentEvent,
    ExecutionCompletedEvent, ExecutionStartedEvent, HistoryEvent, OperationAction,
    OrchestrationInstance, OrchestrationStatus, OrchestratorAction, OrchestratorStartedEvent,
    ParentInstanceInfo, SubOrchestrationInstanceCompletedEvent,
    SubOrchestrationInstanceCreatedEvent, SubOrchestrationInstanceFailedEvent, TaskCompletedEvent,
    TaskFailedEvent, TaskFailureDetails, TaskScheduledEvent, TimerCreatedEvent, TimerFiredEvent,
};
use crate::core::failure::TaskError;
use crate::core::ids;
use crate::core::journal::EntityCall;
use crate::core::sdk_actions::{Action, Completion};
use crate::core::sdk_entities::EntityAction;
use crate::core::sdk_history::{self, EntityMessage, Kind};

/// The failure type an engine failure (a wasm activity's, a child's) carries:
/// its message is the engine's reason.
const FAILURE_TYPE: &str = "TaskFailedError";

pub(super) fn event_of(event: sdk_history::HistoryEvent) -> HistoryEvent {
    use history_event::EventType;
    let failure = |error: String| {
        Some(TaskFailureDetails {
            error_type: FAILURE_TYPE.to_string(),
            error_message: error,
            ..TaskFailureDetails::default()
        })
    };
    let event_type = match event.kind {
        Kind::OrchestratorStarted => EventType::OrchestratorStarted(OrchestratorStartedEvent {}),
        Kind::ExecutionStarted(started) => EventType::ExecutionStarted(ExecutionStartedEvent {
            name: started.name,
            version: started.version,
            input: Some(wire(started.input)),
            orchestration_instance: Some(OrchestrationInstance {
                execution_id: Some(ids::protocol_execution_id(
                    &started.instance_id,
                    started.execution,
                )),
                instance_id: started.instance_id,
            }),
            parent_instance: started.parent.map(|parent| ParentInstanceInfo {
                task_scheduled_id: i32::try_from(parent.task).unwrap_or(i32::MAX),
                name: Some(parent.name),
                version: parent.version,
                orchestration_instance: Some(OrchestrationInstance {
                    execution_id: Some(ids::protocol_execution_id(
                        &parent.instance_id,
                        parent.execution,
                    )),
                    instance_id: parent.instance_id,
                }),
            }),
            ..ExecutionStartedEvent::default()
        }),
        Kind::TaskScheduled { name, input } => EventType::TaskScheduled(TaskScheduledEvent {
            name,
            input: Some(input),
            ..TaskScheduledEvent::default()
        }),
        Kind::TaskCompleted { scheduled, result } => EventType::TaskCompleted(TaskCompletedEvent {
            task_scheduled_id: scheduled,
            result: Some(wire(result)),
        }),
        // An SDK worker's failure as it reported it; any other (a wasm
        // activity's, a limit's, a retry's end) in the engine's words.
        Kind::TaskFailed {
            scheduled,
            error,
            details,
        } => EventType::TaskFailed(TaskFailedEvent {
            task_scheduled_id: scheduled,
            failure_details: match details {
                Some(details) => Some(super::convert::details_of(&details)),
                None => failure(error),
            },
        }),
        Kind::SubOrchestrationCreated {
            instance_id,
            name,
            input,
        } => EventType::SubOrchestrationInstanceCreated(SubOrchestrationInstanceCreatedEvent {
            instance_id,
            name,
            input: Some(wire(input)),
            ..SubOrchestrationInstanceCreatedEvent::default()
        }),
        Kind::SubOrchestrationCompleted { scheduled, result } => {
            EventType::SubOrchestrationInstanceCompleted(SubOrchestrationInstanceCompletedEvent {
                task_scheduled_id: scheduled,
                result: Some(wire(result)),
            })
        }
        Kind::SubOrchestrationFailed {
            scheduled,
            error,
            details,
        } => {
            // A child an SDK worker ran fails as the worker reported it;
            // the engine's reason for any other is its output, a JSON
            // string.
            EventType::SubOrchestrationInstanceFailed(SubOrchestrationInstanceFailedEvent {
                task_scheduled_id: scheduled,
                failure_details: match details {
                    Some(details) => Some(super::convert::details_of(&details)),
                    None => failure(super::convert::text_of(&error)),
                },
            })
        }
        Kind::TimerCreated { fire_at } => EventType::TimerCreated(TimerCreatedEvent {
            fire_at: Some(timestamp(fire_at)),
        }),
        Kind::TimerFired { timer, fire_at } => EventType::TimerFired(TimerFiredEvent {
            fire_at: Some(timestamp(fire_at)),
            timer_id: timer,
        }),
        Kind::EventRaised { name, input } => EventType::EventRaised(EventRaisedEvent {
            name,
            input: Some(input),
        }),
        Kind::EntityOperationCalled(message) => {
            EventType::EntityOperationCalled(EntityOperationCalledEvent {
                request_id: message.request_id,
                operation: message.operation,
                input: message.input,
                target_instance_id: Some(message.entity),
                ..EntityOperationCalledEvent::default()
            })
        }
        Kind::EntityOperationSignaled(message) => {
            EventType::EntityOperationSignaled(EntityOperationSignaledEvent {
                request_id: message.request_id,
                operation: message.operation,
                input: message.input,
                target_instance_id: Some(message.entity),
                ..EntityOperationSignaledEvent::default()
            })
        }
        Kind::EntityOperationCompleted { request_id, output } => {
            EventType::EntityOperationCompleted(EntityOperationCompletedEvent {
                request_id,
                output: Some(output),
            })
        }
        Kind::EntityLockRequested { section, lock_set } => {
            EventType::EntityLockRequested(EntityLockRequestedEvent {
                critical_section_id: section,
                lock_set,
                position: 0,
                parent_instance_id: None,
            })
        }
        Kind::EntityUnlockSent { section, entity } => {
            EventType::EntityUnlockSent(EntityUnlockSentEvent {
                critical_section_id: section,
                parent_instance_id: None,
                target_instance_id: Some(entity),
            })
        }
        Kind::EntityLockGranted { section } => {
            EventType::EntityLockGranted(EntityLockGrantedEvent {
                critical_section_id: section,
            })
        }
        Kind::EventSent {
            instance_id,
            name,
            input,
        } => EventType::EventSent(EventSentEvent {
            instance_id,
            name,
            input: super::convert::present(&input),
        }),
        Kind::ExecutionCompleted(ended) => EventType::ExecutionCompleted(ExecutionCompletedEvent {
            orchestration_status: super::convert::status_of(ended.status) as i32,
            result: ended.output.as_deref().and_then(super::convert::present),
            failure_details: ended.failure.as_ref().map(super::convert::details_of),
        }),
        Kind::EntityOperationFailed { request_id, error } => {
            EventType::EntityOperationFailed(EntityOperationFailedEvent {
                request_id,
                failure_details: failure(error),
            })
        }
    };
    HistoryEvent {
        event_id: event.id,
        timestamp: Some(timestamp(event.at)),
        event_type: Some(event_type),
    }
}

/// A payload the worker sent, as the engine keeps it: its text as sent,
/// `null` when absent. It is the SDK's own: JSON as a rule, but the token
/// of its large-payload store (`blob:v1:…`) when it kept the payload
/// outside, which the host hands back as it came (a wasm component given
/// one fails to read it, saying so).
pub(super) fn sent(value: Option<String>) -> String {
    value
        .filter(|text| !text.is_empty())
        .unwrap_or_else(|| "null".into())
}

/// An input or output the worker (or client) sent, as the instance keeps
/// it: as [`sent`], but a JSON `null` sent as such is kept apart from none
/// ([`sdk_history::KEPT_NULL`]), so that it reads back as `null`.
pub(super) fn kept(value: Option<String>) -> String {
    match value {
        Some(text) if text == "null" => sdk_history::KEPT_NULL.to_string(),
        other => sent(other),
    }
}

/// A payload the engine keeps, as the protocol carries it to a worker.
fn wire(text: String) -> String {
    match text == sdk_history::KEPT_NULL {
        true => "null".to_string(),
        false => text,
    }
}

/// The orchestration's failure as the worker reported it (kept whole, cut
/// as a task's is), or a text of the host's when it gave no details.
fn failure_reported(failure: Option<TaskFailureDetails>) -> TaskError {
    match failure {
        Some(details) => TaskError::reported(super::convert::failure_of(details)),
        None => "the orchestration failed (the SDK worker gave no details)".into(),
    }
}

/// Tags as the instance keeps them: a JSON object of strings, its keys in
/// order; `None` for none.
pub(super) fn tags_of(tags: &std::collections::HashMap<String, String>) -> Option<String> {
    if tags.is_empty() {
        return None;
    }
    let sorted: std::collections::BTreeMap<_, _> = tags.iter().collect();
    serde_json::to_string(&sorted).ok()
}

pub(super) fn action_of(action: OrchestratorAction) -> Action {
    use orchestrator_action::OrchestratorActionType as Type;
    let id = action.id;
    match action.orchestrator_action_type {
        Some(Type::ScheduleTask(task)) => Action::ScheduleTask {
            id,
            name: task.name,
            input: sent(task.input),
        },
        Some(Type::CreateTimer(timer)) => Action::CreateTimer {
            id,
            fire_at: timer.fire_at.as_ref().map_or(0, millis),
        },
        Some(Type::CreateSubOrchestration(child)) => Action::CreateSubOrchestration {
            id,
            name: child.name,
            input: kept(child.input),
            // The SDKs name each child (`{parent}:{task:04x}` unless the
            // code chose another): that is its id.
            instance_id: Some(child.instance_id).filter(|id| !id.is_empty()),
            version: child.version.filter(|v| !v.is_empty()),
            tags: tags_of(&child.tags),
        },
        Some(Type::CompleteOrchestration(done)) => completion_of(done),
        Some(Type::SendEvent(sent_event)) => Action::SendEvent {
            id,
            instance: sent_event
                .instance
                .map(|instance| instance.instance_id)
                .unwrap_or_default(),
            name: sent_event.name,
            input: sent(sent_event.data),
        },
        Some(Type::TerminateOrchestration(_)) => {
            Action::Unsupported("terminating another orchestration".into())
        }
        Some(Type::SendEntityMessage(message)) => entity_action_of(id, message),
        Some(Type::RewindOrchestration(_)) => Action::Unsupported("a rewind".into()),
        None => Action::Unsupported("an action of a kind this host does not know".into()),
    }
}

fn entity_action_of(id: i32, action: super::proto::SendEntityMessageAction) -> Action {
    use send_entity_message_action::EntityMessageType as Message;
    let input = |input: Option<String>| Some(sent(input)).filter(|text| text != "null");
    match action.entity_message_type {
        Some(Message::EntityOperationCalled(call)) => Action::CallEntity {
            id,
            message: EntityMessage {
                entity: call.target_instance_id.unwrap_or_default(),
                operation: call.operation,
                input: input(call.input),
                request_id: call.request_id,
                due_at: None,
            },
        },
        // A signal scheduled for later is queued at its time (a time
        // already past: at once).
        Some(Message::EntityOperationSignaled(signal)) => Action::SignalEntity {
            id,
            message: EntityMessage {
                entity: signal.target_instance_id.unwrap_or_default(),
                operation: signal.operation,
                input: input(signal.input),
                request_id: signal.request_id,
                due_at: signal.scheduled_time.as_ref().map(millis),
            },
        },
        // The SDKs send a section's request to the first entity of its
        // sorted set; the host passes it along the rest.
        Some(Message::EntityLockRequested(request)) if request.position == 0 => {
            Action::LockEntities {
                id,
                section: request.critical_section_id,
                entities: request.lock_set,
            }
        }
        Some(Message::EntityLockRequested(request)) => Action::Invalid(format!(
            "the SDK worker's lock request starts at position {} of its set, not at its first entity",
            request.position
        )),
        Some(Message::EntityUnlockSent(unlock)) => Action::UnlockEntity {
            id,
            section: unlock.critical_section_id,
            entity: unlock.target_instance_id.unwrap_or_default(),
        },
        None => Action::Unsupported("an entity message of a kind this host does not know".into()),
    }
}

/// What an entity batch's operations asked for besides their results, in
/// the engine's terms (a signal scheduled for later is queued at its time,
/// a start scheduled for later waits Pending until then). An action of a
/// kind this host does not know is kept as invalid: the batch then fails
/// as a whole, its callers told why.
pub(super) fn entity_actions_of(actions: Vec<OperationAction>) -> Vec<EntityAction> {
    use operation_action::OperationActionType as Type;
    actions
        .into_iter()
        .map(|action| match action.operation_action_type {
            Some(Type::SendSignal(signal)) => EntityAction::Signal(EntityCall {
                entity: signal.instance_id,
                operation: signal.name,
                input: Some(sent(signal.input)).filter(|input| input != "null"),
                request_id: uuid::Uuid::new_v4().to_string(),
                due_at: signal.scheduled_time.as_ref().map(millis),
            }),
            Some(Type::StartNewOrchestration(start)) => EntityAction::Start {
                instance_id: match start.instance_id {
                    id if id.is_empty() => uuid::Uuid::new_v4().simple().to_string(),
                    id => id,
                },
                name: start.name,
                input: sent(start.input),
                version: start.version.filter(|v| !v.is_empty()),
                start_at: start.scheduled_time.as_ref().map(millis),
            },
            None => EntityAction::Invalid(
                "its operation asked for an action of a kind this host does not know".into(),
            ),
        })
        .collect()
}

fn completion_of(done: CompleteOrchestrationAction) -> Action {
    let status = OrchestrationStatus::try_from(done.orchestration_status)
        .unwrap_or(OrchestrationStatus::Failed);
    let completion = match status {
        OrchestrationStatus::Completed => Completion::Completed(kept(done.result)),
        OrchestrationStatus::ContinuedAsNew => Completion::ContinuedAsNew {
            input: kept(done.result),
            version: done.new_version.filter(|v| !v.is_empty()),
            carryover: done
                .carryover_events
                .into_iter()
                .filter_map(|event| match event.event_type {
                    Some(history_event::EventType::EventRaised(raised)) => {
                        Some((raised.name, sent(raised.input)))
                    }
                    _ => None,
                })
                .collect(),
        },
        _ => Completion::Failed(failure_reported(done.failure_details)),
    };
    Action::Complete(completion)
}
