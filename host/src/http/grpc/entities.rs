//! Durable entities over the protocol: `SignalEntity` queues an operation
//! (the entity, an instance of its own, is created by its first), and
//! `GetEntity`, `QueryEntities` and `CleanEntityStorage` read and tidy their
//! state, which is the entity instance's output.

use std::sync::Arc;

use tonic::{Response, Status};

use super::convert::{millis, page_of, refusal, timestamp, token_after};
use super::proto::{
    CleanEntityStorageRequest, CleanEntityStorageResponse, EntityMetadata, GetEntityRequest,
    GetEntityResponse, QueryEntitiesRequest, QueryEntitiesResponse, SignalEntityRequest,
    SignalEntityResponse,
};
use crate::core::entity_locks;
use crate::core::sdk_entities;
use crate::durable::{DurableError, InstanceFilter, InstanceRecord, Orchestrator};

/// Most entities one `QueryEntities` page holds.
const PAGE: usize = 1000;

pub(super) async fn signal(
    orchestrator: &Arc<Orchestrator>,
    request: SignalEntityRequest,
) -> Result<Response<SignalEntityResponse>, Status> {
    if sdk_entities::parse_entity_id(&request.instance_id).is_none() {
        return Err(Status::invalid_argument(format!(
            "'{}' is not an entity id (@name@key)",
            request.instance_id
        )));
    }
    super::convert::scheduler_id(&request.instance_id)?;
    // The SDK's own text: JSON, or its large-payload store's token.
    let input = request.input.filter(|text| !text.is_empty());
    let request_id = if request.request_id.is_empty() {
        uuid::Uuid::new_v4().to_string()
    } else {
        request.request_id
    };
    orchestrator
        .signal_entity(
            &request.instance_id,
            &request.name,
            input,
            &request_id,
            request.scheduled_time.as_ref().map(millis),
        )
        .await
        .map_err(refusal)?;
    Ok(Response::new(SignalEntityResponse {}))
}

/// An entity instance's metadata; `None` for an instance that is no entity
/// or an entity without state.
fn metadata(record: &InstanceRecord, with_state: bool) -> Option<EntityMetadata> {
    if record.component_digest != sdk_entities::DIGEST {
        return None;
    }
    let state = record
        .output
        .clone()
        .filter(|s| s != sdk_entities::NO_STATE)?;
    Some(EntityMetadata {
        instance_id: record.id.clone(),
        last_modified_time: Some(timestamp(record.updated_at)),
        serialized_state: with_state.then_some(state),
        locked_by: entity_locks::lock_of(record.custom_status.as_deref()).map(|lock| lock.owner),
        ..EntityMetadata::default()
    })
}

pub(super) async fn get(
    orchestrator: &Arc<Orchestrator>,
    request: GetEntityRequest,
) -> Result<Response<GetEntityResponse>, Status> {
    let found = match orchestrator.status(&request.instance_id, false).await {
        Ok(view) => metadata(&view.instance, request.include_state),
        Err(DurableError::InstanceNotFound(_)) => None,
        Err(e) => return Err(refusal(e)),
    };
    Ok(Response::new(GetEntityResponse {
        exists: found.is_some(),
        entity: found,
    }))
}

pub(super) async fn query(
    orchestrator: &Arc<Orchestrator>,
    request: QueryEntitiesRequest,
) -> Result<Response<QueryEntitiesResponse>, Status> {
    let query = request.query.unwrap_or_default();
    // Entity ids start with '@': a prefix without one names none.
    let prefix = query
        .instance_id_starts_with
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "@".into());
    if !prefix.starts_with('@') {
        return Ok(Response::new(QueryEntitiesResponse::default()));
    }
    let filter = InstanceFilter {
        id_prefix: Some(prefix),
        ..InstanceFilter::default()
    };
    let from = query.last_modified_from.as_ref().map(millis);
    let to = query.last_modified_to.as_ref().map(millis);
    let (page, more) = page_of(
        orchestrator,
        &filter,
        query.page_size.map_or(0, i64::from),
        PAGE,
        query.continuation_token.as_deref(),
    )
    .await?;
    let continuation_token = more.then(|| page.last()).flatten().map(token_after);
    let entities = page
        .iter()
        .filter(|r| from.is_none_or(|f| r.updated_at >= f) && to.is_none_or(|t| r.updated_at <= t))
        .filter_map(|r| metadata(r, query.include_state))
        .collect();
    Ok(Response::new(QueryEntitiesResponse {
        entities,
        continuation_token,
    }))
}

/// Tidies a page of entities: a lock whose owner no longer runs (ended,
/// purged) is released, and an entity with no state and no lock is asked
/// to remove itself. Both go through the entity's inbox, so that its own
/// batch decides with what arrived since: a release is ignored once the
/// owner let go, a removal is dropped when an operation came. An entity
/// left without state removes itself anyway at the end of its batch: this
/// finds only what was kept before that, or what a release just left empty
/// (removed on a later call).
pub(super) async fn clean(
    orchestrator: &Arc<Orchestrator>,
    request: CleanEntityStorageRequest,
) -> Result<Response<CleanEntityStorageResponse>, Status> {
    let filter = InstanceFilter {
        id_prefix: Some("@".into()),
        ..InstanceFilter::default()
    };
    let (page, more) = page_of(
        orchestrator,
        &filter,
        0,
        PAGE,
        request.continuation_token.as_deref(),
    )
    .await?;
    let mut released = 0;
    let mut removed = 0;
    let live_entities = page
        .iter()
        .filter(|r| r.component_digest == sdk_entities::DIGEST && !r.status.is_finished());
    for record in live_entities {
        let Some(new) = sdk_entities::new_instance(&record.id) else {
            continue;
        };
        let stateless = record
            .output
            .as_deref()
            .is_none_or(|state| state == sdk_entities::NO_STATE);
        let event = match entity_locks::lock_of(record.custom_status.as_deref()) {
            Some(lock) if request.release_orphaned_locks => {
                if owner_runs(orchestrator, &lock).await? {
                    continue;
                }
                released += 1;
                entity_locks::unlock_event(&entity_locks::Unlock {
                    section: lock.section,
                    owner: lock.owner,
                })
            }
            // Operations still queued (waiting for a worker, or for their
            // time) keep it.
            None if request.remove_empty_entities && stateless => {
                if !orchestrator
                    .inbox_empty(&record.id)
                    .await
                    .map_err(refusal)?
                {
                    continue;
                }
                removed += 1;
                entity_locks::wake_event()
            }
            _ => continue,
        };
        orchestrator
            .queue_at_entity(new, event, None)
            .await
            .map_err(refusal)?;
    }
    Ok(Response::new(CleanEntityStorageResponse {
        continuation_token: more.then(|| page.last()).flatten().map(token_after),
        empty_entities_removed: removed,
        orphaned_locks_released: released,
    }))
}

/// Whether the orchestration holding `lock` still runs (a suspended one
/// too) in the execution that took it.
async fn owner_runs(
    orchestrator: &Arc<Orchestrator>,
    lock: &entity_locks::Lock,
) -> Result<bool, Status> {
    match orchestrator.status(&lock.owner, false).await {
        Ok(view) => {
            Ok(!view.instance.status.is_finished() && view.instance.execution == lock.execution)
        }
        Err(DurableError::InstanceNotFound(_)) => Ok(false),
        Err(e) => Err(refusal(e)),
    }
}
