//! A batch of a durable entity's operations (see
//! [`crate::core::sdk_entities`]): what its inbox holds goes, in order, to a
//! connected SDK worker that has the entity's code, with the state; the
//! worker's results and new state are committed in one write with the
//! rows they consumed, and each call's result goes back to its caller.

use super::Orchestrator;
use crate::core::effects::Effect;
use crate::core::lifecycle::arrivals::Sorted;
use crate::core::sdk_entities;
use crate::sdk_workers::{EntityAnswer, EntityItem};
use crate::store::StoreError;

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
    let mut operations = Vec::with_capacity(sorted.taken.len());
    for (row, event) in sorted.taken {
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
        return Ok(Some(vec![Effect::ConsumeInbox(rows)]));
    }
    // The state the last batch left (the instance's output).
    let state = orchestrator
        .store
        .instance(id)
        .await?
        .and_then(|record| record.output)
        .filter(|state| state != sdk_entities::NO_STATE);
    let item = EntityItem {
        token: String::new(),
        instance_id: id.to_string(),
        state,
        operations: operations.clone(),
    };
    let answer = orchestrator
        .sdk_workers
        .run_entity(name, item, orchestrator.config.episode_timeout)
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
