//! A batch of a durable entity's operations (see
//! [`crate::core::sdk_entities`]): what its inbox holds goes, in order, to a
//! connected SDK worker that has the entity's code, with the state; the
//! worker's results and new state are committed in one write with the
//! rows they consumed, and each call's result goes back to its caller.

use std::collections::HashMap;

use super::agent_session::AgentSession;
use super::episode_slot::Slot;
use super::given_back;
use super::sdk_episode::MESSAGE_LIMIT;
use super::Orchestrator;
use crate::core::dafx;
use crate::core::effects::Effect;
use crate::core::lifecycle::arrivals::Sorted;
use crate::core::sdk_entities;
use crate::sdk_workers::{EntityAnswer, EntityItem};
use crate::store::StoreError;

/// Most operations one batch runs.
const BATCH: usize = 100;

/// The batch's effects; `None` when no worker answered (none connected
/// that runs it, or it gave the batch back, went away or took longer than
/// the episode timeout): nothing is written, and the operations wait in
/// the inbox for the next try.
pub(super) async fn decide(
    orchestrator: &Orchestrator,
    id: &str,
    name: &str,
    sorted: Sorted,
    slot: &Slot,
) -> Result<Option<Vec<Effect>>, StoreError> {
    // The state the last batch left (the instance's output).
    let state = orchestrator
        .store
        .instance(id)
        .await?
        .and_then(|record| record.output)
        .filter(|state| state != sdk_entities::NO_STATE);
    // An Agent Framework session of a wasm agent served here runs here, with
    // no message to a worker to fit in.
    let here = wasm_agent(orchestrator, name);
    let fits = match here {
        Some(_) => usize::MAX,
        None => MESSAGE_LIMIT,
    };
    let mut rows = sorted.stale;
    let mut operations = Vec::with_capacity(sorted.taken.len().min(BATCH));
    let mut bytes = state.as_ref().map_or(0, String::len);
    // A batch is bounded, in operations and in bytes (what a worker takes
    // in one message): the rest stays queued for the next one, so a
    // backlog never makes one batch too long to answer in time.
    for (row, event) in sorted.taken.into_iter().take(BATCH) {
        match sdk_entities::operation_of(&event) {
            Some(operation) => {
                let size =
                    operation.input.as_ref().map_or(0, String::len) + operation.operation.len();
                if bytes.saturating_add(size) > fits {
                    if operations.is_empty() {
                        // Alone with the state it is past what a worker
                        // takes: it fails, rather than break the worker's
                        // stream again and again.
                        let why = format!(
                            "operation '{}' and the entity's state are {} bytes, past what a Durable Task SDK worker takes in one message (4 MiB)",
                            operation.operation,
                            bytes.saturating_add(size)
                        );
                        rows.push(row);
                        let failed = sdk_entities::BatchResult {
                            results: vec![Err(why)],
                            state: sdk_entities::StateAfter::Unchanged,
                            actions: Vec::new(),
                        };
                        return Ok(Some(decided(
                            orchestrator,
                            id,
                            &rows,
                            &[operation],
                            failed,
                            fits,
                        )));
                    }
                    break;
                }
                bytes = bytes.saturating_add(size);
                rows.push(row);
                operations.push(operation);
            }
            // Anything else raised at an entity (the management API's raise)
            // means nothing to it: consumed, with a word.
            None => {
                rows.push(row);
                tracing::warn!(instance_id = %id, "an event that is no entity operation was raised at an entity; dropped")
            }
        }
    }
    if operations.is_empty() {
        // Nothing to run (an entity created by an operation lost before it
        // was queued): it rests as an entity does, not as a new instance
        // the scheduler looks at every second.
        let mut effects = vec![Effect::SetStatus {
            status: crate::core::instance::RuntimeStatus::Running,
            output: None,
            custom_status: None,
        }];
        if !rows.is_empty() {
            effects.insert(0, Effect::ConsumeInbox(rows));
        }
        return Ok(Some(effects));
    }
    // What remains is a wait for the batch's answer (a model may be asked)
    // and a commit: other instances' episodes run meanwhile.
    slot.give_up();
    if let Some(agent) = here {
        let key = sdk_entities::parse_entity_id(id).map_or("", |(_, key)| key);
        let session = AgentSession { agent, key };
        return Ok(session
            .run(orchestrator, state, &operations)
            .await
            .map(|result| decided(orchestrator, id, &rows, &operations, result, fits)));
    }
    let item = EntityItem {
        token: String::new(),
        instance_id: id.to_string(),
        state,
        operations: operations.clone(),
    };
    // Entity code may take as long as an activity (an agent asks a model).
    let answer = orchestrator
        .sdk_workers
        .run_entity(name, item, orchestrator.config.sdk_patience.for_an_answer)
        .await;
    let key = format!("entity:{id}");
    let result = match answer {
        Some(EntityAnswer::Done(result)) => {
            orchestrator.given_back.answered(&key);
            result
        }
        Some(EntityAnswer::Abandoned) if orchestrator.given_back.again(&key) => {
            tracing::warn!(instance_id = %id, entity = name, "SDK workers gave the entity's operations back {} times in a row; the batch fails", given_back::LIMIT);
            sdk_entities::BatchResult {
                results: vec![Err(format!(
                    "SDK workers gave the batch back {} times in a row (each gave it back, went away with it, or did not answer in time): its operations fail",
                    given_back::LIMIT
                ))],
                state: sdk_entities::StateAfter::Unchanged,
                actions: Vec::new(),
            }
        }
        Some(EntityAnswer::Abandoned) => {
            tracing::info!(instance_id = %id, entity = name, "an SDK worker gave the entity's operations back (or went away); they run again");
            return Ok(None);
        }
        None => {
            tracing::debug!(instance_id = %id, entity = name, "no SDK worker that runs the entity is connected; its operations wait for one");
            return Ok(None);
        }
    };
    Ok(Some(decided(
        orchestrator,
        id,
        &rows,
        &operations,
        result,
        fits,
    )))
}

/// The effects of the batch's result, the orchestrations it starts on the
/// versions served now (an SDK worker's when no component serves them; a
/// wasm one's input checked against its schema), its state kept only while
/// it leaves room for operations in a worker's message (`fits`).
fn decided(
    orchestrator: &Orchestrator,
    id: &str,
    rows: &[i64],
    operations: &[sdk_entities::Operation],
    mut result: sdk_entities::BatchResult,
    fits: usize,
) -> Vec<Effect> {
    let mut starts = HashMap::new();
    for action in &mut result.actions {
        let sdk_entities::EntityAction::Start { name, input, .. } = action else {
            continue;
        };
        let Some(served) = orchestrator.registry.orchestration(name) else {
            continue;
        };
        let problems = served
            .component
            .manifest
            .orchestration(name)
            .and_then(|o| o.input_schema.as_ref())
            .map(|schema| schema.problems(input))
            .unwrap_or_default();
        if !problems.is_empty() {
            *action = sdk_entities::EntityAction::Invalid(format!(
                "its operation started '{name}' with an input its schema refuses: {}",
                problems.join("; ")
            ));
            continue;
        }
        let on = sdk_entities::StartsOn {
            digest: served.component.digest.clone(),
            activity_set: orchestrator
                .registry
                .current_activity_set(&served.component.name),
        };
        starts.insert(name.clone(), on);
    }
    let limits = sdk_entities::BatchLimits {
        payloads: &orchestrator.config.limits,
        state_bytes: fits / 2,
    };
    let (effects, refused) = sdk_entities::decide(id, rows, operations, result, &starts, limits);
    if let Some(why) = refused {
        tracing::warn!(instance_id = %id, reason = %why, "an entity batch failed as a whole: its state stays, nothing it asked for happens, its callers are told why");
    }
    effects
}

/// The wasm agent whose Agent Framework sessions entity `name`
/// (`dafx-{agent}`, in lower case) holds, when this host serves one.
fn wasm_agent(orchestrator: &Orchestrator, name: &str) -> Option<String> {
    let suffix = name.strip_prefix(dafx::PREFIX)?;
    orchestrator
        .registry
        .agent_names()
        .into_iter()
        .find(|agent| agent.eq_ignore_ascii_case(suffix))
}
