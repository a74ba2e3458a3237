//! Durable entities as the Durable Task protocol defines them: an entity
//! (`@name@key`) is an instance of the hub whose inbox holds the operations
//! signalled or called on it, run in order, a batch at a time, by a worker
//! that has its code; its state is the instance's output (`null`: none,
//! the entity does not exist). A call's result goes back to the calling
//! orchestration as its task's outcome, as a child's does.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::effects::Effect;
use super::ids;
use super::instance::{NewInstance, ParentRef, RuntimeStatus};
use super::journal::{EntityCall, Event};
use super::limits::Limits;

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

/// The name and key of an entity instance id; `None` when `id` is none
/// (the SDKs refuse an empty name or key).
pub fn parse_entity_id(id: &str) -> Option<(&str, &str)> {
    let rest = id.strip_prefix('@')?;
    let (name, key) = rest.split_once('@')?;
    (!name.is_empty() && !key.is_empty()).then_some((name, key))
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
        start_at: None,
        caller: None,
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
/// failure, in order, the state after them, and what the operations asked
/// for besides (signals, starts), carried out with the batch's commit.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BatchResult {
    pub results: Vec<Result<String, String>>,
    pub state: StateAfter,
    pub actions: Vec<EntityAction>,
}

/// Something an entity's operation asked for besides its result.
#[derive(Debug, Clone, PartialEq)]
pub enum EntityAction {
    /// An operation signalled on an entity (this one included).
    Signal(EntityCall),
    /// An orchestration started, an instance of its own with no parent.
    Start {
        instance_id: String,
        name: String,
        /// JSON text.
        input: String,
        /// The orchestration version it starts with, when an SDK worker
        /// runs it.
        version: Option<String>,
        /// Started for later (Unix ms): Pending until then.
        start_at: Option<i64>,
    },
    /// An action this host cannot carry out, and why: the batch fails as a
    /// whole rather than half of it taking effect.
    Invalid(String),
}

/// The version an orchestration an entity starts runs on: the component
/// digest and activity set of the one served by that name (an SDK
/// worker's when none is).
#[derive(Debug, Clone, PartialEq)]
pub struct StartsOn {
    pub digest: String,
    pub activity_set: Option<String>,
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

/// The effects of a batch run on the entity `id`: its rows consumed, its
/// state kept, each call's result delivered to its caller, the signals and
/// starts it asked for carried out. A batch whose state or actions cannot
/// be kept (past the payload limit, an id that is none) fails as a whole:
/// its state stays as it was, nothing it asked for happens, and each
/// caller is told why. `starts` holds what each started name runs on; a
/// name it lacks is an SDK worker's.
/// The second value says why the batch failed as a whole, when it did.
pub fn decide(
    id: &str,
    rows: &[i64],
    operations: &[Operation],
    result: BatchResult,
    starts: &HashMap<String, StartsOn>,
    limits: BatchLimits<'_>,
) -> (Vec<Effect>, Option<String>) {
    let refused = refusal(&result, limits);
    let result = match &refused {
        Some(reason) => BatchResult {
            results: vec![Err(format!("entity '{id}': {reason}"))],
            state: StateAfter::Unchanged,
            actions: Vec::new(),
        },
        None => result,
    };
    let whole_failed = result.state == StateAfter::Unchanged;
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
    // A batch that failed as a whole says why once: each of its operations
    // failed for that reason.
    let why_whole = match (whole_failed, result.results.first()) {
        (true, Some(Err(why))) => Some(why.clone()),
        _ => None,
    };
    let mut results = result.results.into_iter();
    for operation in operations {
        let outcome = results.next().unwrap_or_else(|| {
            Err(why_whole.clone().unwrap_or_else(|| {
                format!(
                    "the entity's worker gave no result for operation '{}'",
                    operation.operation
                )
            }))
        });
        let outcome = outcome.and_then(|result| {
            match limits
                .payloads
                .check_payload("entity operation result", &result)
            {
                Ok(()) => Ok(result),
                Err(e) => Err(e.to_string()),
            }
        });
        let Some(caller) = &operation.caller else {
            continue;
        };
        let task = caller.task;
        let event = match outcome {
            Ok(result) => Event::TaskCompleted { task, result },
            Err(error) => Event::TaskFailed {
                task,
                error,
                details: None,
            },
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
    for action in result.actions {
        match action {
            EntityAction::Signal(call) => {
                let event = operation_event(&Operation {
                    request_id: call.request_id,
                    operation: call.operation,
                    input: call.input,
                    caller: None,
                });
                if let Some(entity) = new_instance(&call.entity) {
                    effects.push(Effect::EntityOperation {
                        entity,
                        event,
                        due_at: call.due_at,
                    });
                }
            }
            EntityAction::Start {
                instance_id,
                name,
                input,
                version,
                start_at,
            } => {
                let on = starts.get(&name);
                effects.push(Effect::Start(NewInstance {
                    id: instance_id,
                    digest: on.map_or_else(
                        || super::sdk_history::digest_of(version.as_deref()),
                        |on| on.digest.clone(),
                    ),
                    activity_set: on.and_then(|on| on.activity_set.clone()),
                    name,
                    input,
                    parent: None,
                    traceparent: None,
                    start_at,
                    caller: None,
                }));
            }
            // Refused above.
            EntityAction::Invalid(_) => {}
        }
    }
    // The batch is a step: a batch decided before it, on a host that lost
    // the entity and got it back since, is refused rather than committed
    // over it (the state it read is stale).
    effects.push(Effect::Stepped);
    (effects, refused)
}

/// What a batch's outcome may hold: payloads (results, the inputs of what
/// it signals and starts) as any payload, and a state of at most
/// `state_bytes`, so that it leaves room for operations in the one message
/// a worker is sent.
#[derive(Debug, Clone, Copy)]
pub struct BatchLimits<'a> {
    pub payloads: &'a Limits,
    pub state_bytes: usize,
}

/// The callers of the operations still queued at entity `id` as it ends
/// (`why`), each told its call failed: none waits for a result that will
/// never come. Signals need no word.
pub fn callers_of_queued<'a>(
    id: &str,
    queued: impl IntoIterator<Item = &'a Event>,
    why: &str,
) -> Vec<Effect> {
    queued
        .into_iter()
        .filter_map(operation_of)
        .filter_map(|operation| {
            let caller = operation.caller?;
            let task = caller.task;
            Some(Effect::NotifyParent {
                parent: ParentRef {
                    id: caller.id,
                    execution: caller.execution,
                    task,
                },
                event: Event::TaskFailed {
                    task,
                    error: format!(
                        "entity '{id}' did not run operation '{}': {why}",
                        operation.operation
                    ),
                    details: None,
                },
            })
        })
        .collect()
}

/// Why a batch's outcome cannot be kept, if it cannot.
fn refusal(result: &BatchResult, limits: BatchLimits<'_>) -> Option<String> {
    if let StateAfter::Set(state) = &result.state {
        if state.len() > limits.state_bytes {
            return Some(format!(
                "its new state is {} bytes, over the limit of {} bytes an entity's state may take (room is kept for its operations in a worker's 4 MiB message): keep large data elsewhere and a reference in the state",
                state.len(),
                limits.state_bytes
            ));
        }
    }
    let limits = limits.payloads;
    result.actions.iter().find_map(|action| match action {
        EntityAction::Invalid(reason) => Some(reason.clone()),
        EntityAction::Signal(call) => {
            if new_instance(&call.entity).is_none() || !ids::valid_instance_id(&call.entity) {
                return Some(format!(
                    "its operation signalled '{}', which is not an entity id (@name@key)",
                    call.entity
                ));
            }
            let input = call.input.as_deref().unwrap_or_default();
            limits
                .check_payload("entity operation input", input)
                .err()
                .map(|e| e.to_string())
        }
        EntityAction::Start {
            instance_id,
            name,
            input,
            ..
        } => {
            if !ids::valid_instance_id(instance_id) || parse_entity_id(instance_id).is_some() {
                return Some(format!(
                    "its operation started an orchestration with the id '{instance_id}', which is not a valid instance id"
                ));
            }
            if !ids::valid_name(name) {
                return Some(format!(
                    "its operation started an orchestration named '{}': a name is 1 to 256 characters without NUL",
                    name.escape_debug()
                ));
            }
            limits
                .check_payload("orchestration input", input)
                .err()
                .map(|e| e.to_string())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_ids_are_the_protocols_at_name_at_key() {
        assert_eq!(parse_entity_id("@counter@a@b"), Some(("counter", "a@b")));
        assert_eq!(parse_entity_id("counter"), None);
        assert_eq!(parse_entity_id("@@k"), None);
        assert_eq!(parse_entity_id("@counter@"), None);
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
        let (effects, _) = decide(
            "@counter@a",
            &[10, 11, 12],
            &[signal, call, failing],
            BatchResult {
                results: vec![Ok("null".into()), Ok("1".into())],
                state: StateAfter::Set("1".into()),
                actions: Vec::new(),
            },
            &HashMap::new(),
            limits(&Limits::default()),
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
        let (deleted, refused) = decide(
            "@counter@a",
            &[],
            &[],
            BatchResult::default(),
            &HashMap::new(),
            limits(&Limits::default()),
        );
        assert_eq!(refused, None);
        assert!(matches!(&deleted[0], Effect::SetStatus { output: Some(s), .. } if s == NO_STATE));
    }

    fn limits(payloads: &Limits) -> BatchLimits<'_> {
        BatchLimits {
            payloads,
            state_bytes: 1 << 20,
        }
    }

    fn called(task: u32) -> Operation {
        Operation {
            request_id: format!("r{task}"),
            operation: "go".into(),
            input: None,
            caller: Some(Caller {
                id: "o".into(),
                execution: 1,
                task,
            }),
        }
    }

    fn signal(entity: &str) -> EntityAction {
        EntityAction::Signal(EntityCall {
            entity: entity.into(),
            operation: "add".into(),
            input: Some("1".into()),
            request_id: "s1".into(),
            due_at: None,
        })
    }

    #[test]
    fn the_callers_of_operations_queued_at_an_ending_entity_are_told() {
        let signal = Operation {
            caller: None,
            ..called(1)
        };
        let events = [
            operation_event(&called(3)),
            operation_event(&signal),
            Event::EventRaised {
                name: "other".into(),
                payload: "1".into(),
            },
        ];
        let told = callers_of_queued("@counter@a", &events, "it was terminated");
        assert_eq!(told.len(), 1, "{told:?}");
        assert!(
            matches!(&told[0], Effect::NotifyParent { parent, event: Event::TaskFailed { task: 3, error, .. } }
            if parent.id == "o" && error.contains("terminated") && error.contains("'go'"))
        );
    }

    #[test]
    fn the_signals_and_starts_a_batch_asks_for_are_carried_out_with_it() {
        let starts = HashMap::from([(
            "sequence".to_string(),
            StartsOn {
                digest: "sha256:wasm".into(),
                activity_set: Some("set".into()),
            },
        )]);
        let start = |name: &str| EntityAction::Start {
            instance_id: format!("started-{name}"),
            name: name.into(),
            input: "3".into(),
            version: None,
            // The SDK's start for later: Pending until then.
            start_at: (name == "py_chain").then_some(7_000),
        };
        let (effects, _) = decide(
            "@counter@a",
            &[1],
            &[called(4)],
            BatchResult {
                results: vec![Ok("2".into())],
                state: StateAfter::Set("2".into()),
                actions: vec![signal("@other@b"), start("sequence"), start("py_chain")],
            },
            &starts,
            limits(&Limits::default()),
        );
        let Effect::EntityOperation { entity, event, .. } = &effects[3] else {
            panic!("a signal: {effects:?}")
        };
        assert_eq!(entity.id, "@other@b");
        let queued = operation_of(event).expect("an operation");
        assert_eq!((queued.operation.as_str(), queued.caller), ("add", None));
        // A served orchestration runs on its component; another name is an
        // SDK worker's.
        assert!(matches!(&effects[4], Effect::Start(n)
            if n.digest == "sha256:wasm" && n.activity_set.as_deref() == Some("set") && n.parent.is_none()));
        assert!(matches!(&effects[5], Effect::Start(n)
            if n.digest == crate::core::sdk_history::DIGEST && n.id == "started-py_chain"
                && n.start_at == Some(7_000)));
    }

    #[test]
    fn a_batch_whose_state_or_actions_cannot_be_kept_fails_whole_and_tells_each_caller() {
        let small = Limits {
            max_payload_bytes: 8,
            ..Limits::default()
        };
        let refused = |result: BatchResult| {
            decide(
                "@counter@a",
                &[1, 2],
                &[called(4), called(5)],
                result,
                &HashMap::new(),
                BatchLimits {
                    payloads: &small,
                    state_bytes: 12,
                },
            )
            .0
        };
        for (result, why) in [
            (
                BatchResult {
                    results: vec![Ok("1".into()), Ok("2".into())],
                    state: StateAfter::Set("\"far too large a state\"".into()),
                    actions: vec![signal("@other@b")],
                },
                "new state",
            ),
            (
                BatchResult {
                    results: vec![Ok("1".into()), Ok("2".into())],
                    state: StateAfter::Set("1".into()),
                    actions: vec![signal("not-an-entity")],
                },
                "not an entity id",
            ),
            (
                BatchResult {
                    results: vec![Ok("1".into()), Ok("2".into())],
                    state: StateAfter::Set("1".into()),
                    actions: vec![EntityAction::Invalid(
                        "scheduled signals are not served".into(),
                    )],
                },
                "scheduled signals",
            ),
        ] {
            let effects = refused(result);
            assert_eq!(effects[0], Effect::ConsumeInbox(vec![1, 2]));
            assert!(
                matches!(&effects[1], Effect::SetStatus { output: None, .. }),
                "the state stays: {effects:?}"
            );
            assert_eq!(effects.len(), 5, "no action carried out: {effects:?}");
            assert_eq!(effects[4], Effect::Stepped);
            for told in &effects[2..4] {
                assert!(
                    matches!(told, Effect::NotifyParent { event: Event::TaskFailed { error, .. }, .. }
                        if error.contains(why) && error.contains("@counter@a")),
                    "{told:?}"
                );
            }
        }
        // A result past the limit fails its own caller only.
        let effects = refused(BatchResult {
            results: vec![Ok("\"a result too large\"".into()), Ok("2".into())],
            state: StateAfter::Set("2".into()),
            actions: Vec::new(),
        });
        assert!(matches!(
            &effects[2],
            Effect::NotifyParent {
                event: Event::TaskFailed { .. },
                ..
            }
        ));
        assert!(matches!(
            &effects[3],
            Effect::NotifyParent {
                event: Event::TaskCompleted { .. },
                ..
            }
        ));
    }
}
