//! A batch of a durable entity's operations (see
//! [`crate::core::sdk_entities`]): what its inbox holds goes, in order, to a
//! connected SDK worker that has the entity's code, with the state; the
//! worker's results and new state are committed in one write with the
//! rows they consumed, and each call's result goes back to its caller.

use std::collections::{HashMap, HashSet};

use super::agent_session::AgentSession;
use super::episode_slot::Slot;
use super::given_back;
use super::sdk_episode::MESSAGE_LIMIT;
use super::Orchestrator;
use crate::core::dafx;
use crate::core::effects::Effect;
use crate::core::entity_locks::{self, Admit};
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
    parked: &HashSet<i64>,
    slot: &Slot,
) -> Result<Option<Vec<Effect>>, StoreError> {
    // The state the last batch left (the instance's output), and who holds
    // the entity (its custom status).
    let record = orchestrator.store.instance(id).await?;
    let state = record
        .as_ref()
        .and_then(|record| record.output.clone())
        .filter(|state| state != sdk_entities::NO_STATE);
    let lock = entity_locks::lock_of(record.as_ref().and_then(|r| r.custom_status.as_deref()));
    // An Agent Framework session of a wasm agent served here runs here, with
    // no message to a worker to fit in.
    let here = wasm_agent(orchestrator, name);
    let fits = match here {
        Some(_) => usize::MAX,
        None => MESSAGE_LIMIT,
    };
    // A batch is bounded, in operations and in bytes (what a worker takes
    // in one message): the rest stays queued for the next one, so a
    // backlog never makes one batch too long to answer in time.
    let mut bytes = state.as_ref().map_or(0, String::len);
    let mut count = 0;
    let mut oversized = None;
    let sorted_under_lock = entity_locks::sort(id, lock, sorted.taken, parked, |operation| {
        let size = operation.input.as_ref().map_or(0, String::len) + operation.operation.len();
        if count >= BATCH {
            return Admit::Stop;
        }
        count += 1;
        if bytes.saturating_add(size) > fits {
            if count > 1 {
                return Admit::Stop;
            }
            // Alone with the state it is past what a worker takes: it
            // fails, rather than break the worker's stream again and again.
            oversized = Some(bytes.saturating_add(size));
            return Admit::TakeLast;
        }
        bytes = bytes.saturating_add(size);
        Admit::Take
    });
    let entity_locks::Sorted {
        operations,
        consumed,
        park,
        lock,
        lock_changed,
        effects: mut lock_effects,
        granted,
        dropped,
    } = sorted_under_lock;
    for request in granted {
        lock_effects.extend(granted_to(orchestrator, request).await?);
    }
    if dropped > 0 {
        // Anything else raised at an entity (the management API's raise)
        // means nothing to it: consumed, with a word.
        tracing::warn!(instance_id = %id, dropped, "events that are no entity operation were raised at an entity; dropped");
    }
    let locking = entity_locks::Locking {
        park,
        status: lock_changed.then(|| entity_locks::status_of(lock.as_ref())),
        effects: lock_effects,
        free: lock.is_none(),
    };
    let had_state = state.is_some();
    let mut rows = sorted.stale;
    rows.extend(consumed);
    if let Some(bytes) = oversized {
        let why = format!(
            "operation '{}' and the entity's state are {bytes} bytes, past what a Durable Task SDK worker takes in one message (4 MiB)",
            operations.first().map_or("", |o| o.operation.as_str()),
        );
        let failed = sdk_entities::BatchResult {
            results: vec![Err(why)],
            state: sdk_entities::StateAfter::Unchanged,
            actions: Vec::new(),
        };
        let effects = decided(orchestrator, id, &rows, &operations, failed, fits);
        return Ok(Some(locking.joined(effects, had_state)));
    }
    if operations.is_empty() {
        // Nothing to run (lock requests and releases only, or an entity
        // created by an operation lost before it was queued): it rests as
        // an entity does, not as a new instance the scheduler looks at
        // every second.
        let mut effects = vec![Effect::SetStatus {
            status: crate::core::instance::RuntimeStatus::Running,
            output: None,
            custom_status: None,
        }];
        if !rows.is_empty() {
            effects.insert(0, Effect::ConsumeInbox(rows));
        }
        if locking.changes_anything() || !had_state {
            effects.push(Effect::Stepped);
        }
        return Ok(Some(locking.joined(effects, had_state)));
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
            .map(|result| {
                let effects = decided(orchestrator, id, &rows, &operations, result, fits);
                locking.joined(effects, had_state)
            }));
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
    let effects = decided(orchestrator, id, &rows, &operations, result, fits);
    Ok(Some(locking.joined(effects, had_state)))
}

/// A section granted at its last entity: its owner's lock task completes,
/// or, when the owner ended or continued as new before (a terminate while
/// it waited for the lock), every entity of the set is released. An owner
/// that ends after this look releases the set itself as it ends.
async fn granted_to(
    orchestrator: &Orchestrator,
    request: entity_locks::LockRequest,
) -> Result<Vec<Effect>, StoreError> {
    let owner = orchestrator.store.instance(&request.owner.id).await?;
    let runs = owner.is_some_and(|owner| {
        !owner.status.is_finished() && owner.execution == request.owner.execution
    });
    Ok(if runs {
        vec![entity_locks::grant(request)]
    } else {
        tracing::info!(owner = %request.owner.id, section = %request.section, "a lock was granted after its orchestration ended; its entities are released");
        entity_locks::abandon(request)
    })
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
