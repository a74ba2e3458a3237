//! A batch of a durable entity's operations (see
//! [`crate::core::sdk_entities`]): what its inbox holds goes, in order, to a
//! connected SDK worker that has the entity's code, with the state; the
//! worker's results and new state are committed in one write with the
//! rows they consumed, and each call's result goes back to its caller.

use super::agent_session::AgentSession;
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
) -> Result<Option<Vec<Effect>>, StoreError> {
    let mut rows = sorted.stale;
    let mut operations = Vec::with_capacity(sorted.taken.len().min(BATCH));
    // A batch is bounded: the rest stays queued for the next one, so a
    // backlog never makes one batch too long to answer in time.
    for (row, event) in sorted.taken.into_iter().take(BATCH) {
        rows.push(row);
        match sdk_entities::operation_of(&event) {
            Some(operation) => operations.push(operation),
            // Anything else raised at an entity (the management API's raise)
            // means nothing to it: consumed, with a word.
            None => {
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
    // The state the last batch left (the instance's output).
    let state = orchestrator
        .store
        .instance(id)
        .await?
        .and_then(|record| record.output)
        .filter(|state| state != sdk_entities::NO_STATE);
    // An Agent Framework session of a wasm agent served here runs here.
    if let Some(agent) = wasm_agent(orchestrator, name) {
        let key = sdk_entities::parse_entity_id(id).map_or("", |(_, key)| key);
        let session = AgentSession { agent, key };
        return Ok(session
            .run(orchestrator, state, &operations)
            .await
            .map(|result| sdk_entities::decide(&rows, &operations, result)));
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
    let result = match answer {
        Some(EntityAnswer::Done(result)) => result,
        Some(EntityAnswer::Abandoned) => {
            tracing::info!(instance_id = %id, entity = name, "an SDK worker gave the entity's operations back (or went away); they run again");
            return Ok(None);
        }
        None => {
            tracing::debug!(instance_id = %id, entity = name, "no SDK worker that runs the entity is connected; its operations wait for one");
            return Ok(None);
        }
    };
    Ok(Some(sdk_entities::decide(&rows, &operations, result)))
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
