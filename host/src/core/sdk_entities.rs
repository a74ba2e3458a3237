//! Durable entities as the Durable Task protocol defines them: an entity
//! (`@name@key`) is an instance of the hub whose inbox holds the operations
//! signalled or called on it, run in order, a batch at a time, by a worker
//! that has its code; its state is the instance's output (`null`: none,
//! the entity does not exist). A call's result goes back to the calling
//! orchestration as its task's outcome, as a child's does.

use serde::{Deserialize, Serialize};

use super::effects::Effect;
use super::instance::{NewInstance, ParentRef, RuntimeStatus};
use super::journal::Event;

/// The component digest of an entity instance: its code is a worker's.
pub const DIGEST: &str = "durabletask-entity";

/// The inbox event an operation travels in.
pub const OPERATION_EVENT: &str = "entity-operation";

/// What an entity's output holds while it has no state.
pub const NO_STATE: &str = "null";

/// One operation on an entity, as queued in its inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    pub request_id: String,
    pub operation: String,
    /// JSON text, `None` for no input.
    pub input: Option<String>,
    /// The orchestration task waiting for the result (a call); `None` for a
    /// signal.
    pub caller: Option<Caller>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Caller {
    pub id: String,
    pub execution: i64,
    pub task: u32,
}

/// The name and key of an entity instance id; `None` when `id` is none.
pub fn parse_entity_id(id: &str) -> Option<(&str, &str)> {
    let rest = id.strip_prefix('@')?;
    let (name, key) = rest.split_once('@')?;
    (!name.is_empty()).then_some((name, key))
}

/// The instance an entity is, created by its first operation.
pub fn new_instance(id: &str) -> Option<NewInstance> {
    let (name, _) = parse_entity_id(id)?;
    Some(NewInstance {
        id: id.to_string(),
        name: name.to_string(),
        input: NO_STATE.to_string(),
        digest: DIGEST.to_string(),
        activity_set: None,
        parent: None,
        traceparent: None,
    })
}

/// The inbox event carrying `operation`.
pub fn operation_event(operation: &Operation) -> Event {
    Event::EventRaised {
        name: OPERATION_EVENT.to_string(),
        payload: serde_json::to_string(operation).unwrap_or_default(),
    }
}

/// The operation an inbox event carries; `None` for anything else.
pub fn operation_of(event: &Event) -> Option<Operation> {
    match event {
        Event::EventRaised { name, payload } if name == OPERATION_EVENT => {
            serde_json::from_str(payload).ok()
        }
        _ => None,
    }
}

/// What the worker made of a batch: each operation's result (JSON text) or
/// failure, in order, and the state after them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BatchResult {
    pub results: Vec<Result<String, String>>,
    pub state: StateAfter,
}

/// The entity's state after a batch.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum StateAfter {
    Set(String),
    /// It has none (deleted, or never set).
    #[default]
    Deleted,
    /// The batch failed as a whole: the state is as it was.
    Unchanged,
}

/// The effects of a batch run on the entity: its rows consumed, its state
/// kept, each call's result delivered to its caller.
pub fn decide(rows: &[i64], operations: &[Operation], result: BatchResult) -> Vec<Effect> {
    let mut effects = Vec::new();
    if !rows.is_empty() {
        effects.push(Effect::ConsumeInbox(rows.to_vec()));
    }
    effects.push(Effect::SetStatus {
        status: RuntimeStatus::Running,
        output: match result.state {
            StateAfter::Set(state) => Some(state),
            StateAfter::Deleted => Some(NO_STATE.to_string()),
            StateAfter::Unchanged => None,
        },
        custom_status: None,
    });
    let mut results = result.results.into_iter();
    for operation in operations {
        let outcome = results.next().unwrap_or_else(|| {
            Err(format!(
                "the entity's worker gave no result for operation '{}'",
                operation.operation
            ))
        });
        let Some(caller) = &operation.caller else {
            continue;
        };
        let task = caller.task;
        let event = match outcome {
            Ok(result) => Event::TaskCompleted { task, result },
            Err(error) => Event::TaskFailed { task, error },
        };
        effects.push(Effect::NotifyParent {
            parent: ParentRef {
                id: caller.id.clone(),
                execution: caller.execution,
                task,
            },
            event,
        });
    }
    effects
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_ids_are_the_protocols_at_name_at_key() {
        assert_eq!(parse_entity_id("@counter@a@b"), Some(("counter", "a@b")));
        assert_eq!(parse_entity_id("counter"), None);
        assert_eq!(parse_entity_id("@@k"), None);
        assert!(new_instance("plain").is_none());
        let new = new_instance("@dafx-joker@s1").map(|n| (n.name, n.digest));
        assert_eq!(new, Some(("dafx-joker".into(), DIGEST.into())));
    }

    #[test]
    fn a_batch_keeps_the_state_and_answers_each_caller_in_order() {
        let signal = Operation {
            request_id: "r1".into(),
            operation: "add".into(),
            input: Some("1".into()),
            caller: None,
        };
        let call = Operation {
            request_id: "r2".into(),
            operation: "get".into(),
            input: None,
            caller: Some(Caller {
                id: "o".into(),
                execution: 2,
                task: 5,
            }),
        };
        let failing = Operation {
            caller: Some(Caller {
                id: "o".into(),
                execution: 2,
                task: 6,
            }),
            ..call.clone()
        };
        assert_eq!(operation_of(&operation_event(&call)), Some(call.clone()));
        let effects = decide(
            &[10, 11, 12],
            &[signal, call, failing],
            BatchResult {
                results: vec![Ok("null".into()), Ok("1".into())],
                state: StateAfter::Set("1".into()),
            },
        );
        assert_eq!(effects[0], Effect::ConsumeInbox(vec![10, 11, 12]));
        assert!(matches!(&effects[1], Effect::SetStatus { output: Some(s), .. } if s == "1"));
        assert!(matches!(
            &effects[2],
            Effect::NotifyParent { parent, event: Event::TaskCompleted { task: 5, result } }
                if parent.execution == 2 && result == "1"
        ));
        // A result the worker did not give fails its caller, never hangs it.
        assert!(matches!(
            &effects[3],
            Effect::NotifyParent {
                event: Event::TaskFailed { task: 6, .. },
                ..
            }
        ));
        // No state: the entity is deleted.
        let deleted = decide(&[], &[], BatchResult::default());
        assert!(matches!(&deleted[0], Effect::SetStatus { output: Some(s), .. } if s == NO_STATE));
    }
}
