//! Many instances at once: `QueryInstances` in pages, `PurgeInstances` by
//! id, by batch or by filter.

use std::sync::Arc;

use tonic::{Response, Status};

use super::convert::{millis, page_of, refusal, state_of, statuses, token_after};
use super::proto::purge_instances_request::Request as PurgeTarget;
use super::proto::{
    ListInstanceIdsRequest, ListInstanceIdsResponse, PurgeInstancesRequest, PurgeInstancesResponse,
    QueryInstancesRequest, QueryInstancesResponse,
};
use crate::core::instance::RuntimeStatus;
use crate::durable::{DurableError, InstanceFilter, Operation, Orchestrator};

/// Most instances one `QueryInstances` page holds (the SDKs ask for
/// 2^31 − 1 and follow the continuation token).
const PAGE: usize = 1000;

/// Encoded bytes one `QueryInstances` page stops at (with its token): the
/// SDKs' gRPC clients take at most 4 MiB a message.
const PAGE_BYTES: usize = 3 << 20;

/// Most ids one purge by batch takes (the contract's own bound).
const BATCH: usize = 500;

/// A page of the instances the query matches, with a continuation token
/// when more match.
pub(super) async fn query(
    orchestrator: &Arc<Orchestrator>,
    request: QueryInstancesRequest,
) -> Result<Response<QueryInstancesResponse>, Status> {
    let query = request.query.unwrap_or_default();
    let Some(statuses) = statuses(&query.runtime_status)? else {
        return Ok(Response::new(QueryInstancesResponse::default()));
    };
    let mut filter = created_filter(
        query.created_time_from.as_ref(),
        query.created_time_to.as_ref(),
        statuses,
    );
    filter.id_prefix = query.instance_id_prefix.filter(|p| !p.is_empty());
    filter.orchestrations_only = true;
    let (page, mut more) = page_of(
        orchestrator,
        &filter,
        i64::from(query.max_instance_count),
        PAGE,
        query.continuation_token.as_deref(),
    )
    .await?;
    let mut states = Vec::with_capacity(page.len());
    let mut bytes = 0;
    for instance in &page {
        let reported = orchestrator
            .reported_failure(instance)
            .await
            .map_err(refusal)?;
        let state = state_of(instance, query.fetch_inputs_and_outputs, reported.as_ref());
        bytes += prost::Message::encoded_len(&state);
        if bytes > PAGE_BYTES && !states.is_empty() {
            more = true;
            break;
        }
        states.push(state);
    }
    let continuation_token = more
        .then(|| page.get(states.len().checked_sub(1)?))
        .flatten()
        .map(token_after);
    Ok(Response::new(QueryInstancesResponse {
        orchestration_state: states,
        continuation_token,
    }))
}

/// Deletes finished instances: one, a batch, or those a filter matches.
pub(super) async fn purge(
    orchestrator: &Arc<Orchestrator>,
    request: PurgeInstancesRequest,
) -> Result<Response<PurgeInstancesResponse>, Status> {
    let recursive = request.recursive;
    let (deleted, complete) = match request.request {
        Some(PurgeTarget::InstanceId(id)) => (purge_one(orchestrator, &id, recursive).await?, true),
        Some(PurgeTarget::InstanceBatch(batch)) => {
            if batch.instance_ids.len() > BATCH {
                return Err(Status::invalid_argument(format!(
                    "a batch names at most {BATCH} instances; this one names {}",
                    batch.instance_ids.len()
                )));
            }
            let mut deleted = 0;
            for id in &batch.instance_ids {
                deleted += purge_one(orchestrator, id, recursive).await?;
            }
            (deleted, true)
        }
        Some(PurgeTarget::PurgeInstanceFilter(f)) => {
            let Some(statuses) = statuses(&f.runtime_status)? else {
                return Ok(Response::new(PurgeInstancesResponse {
                    deleted_instance_count: 0,
                    is_complete: Some(true),
                }));
            };
            let filter = created_filter(
                f.created_time_from.as_ref(),
                f.created_time_to.as_ref(),
                statuses,
            );
            let purged = orchestrator
                .purge_matching(&filter)
                .await
                .map_err(refusal)?;
            (purged.deleted, !purged.more)
        }
        None => {
            return Err(Status::invalid_argument(
                "name what to purge: an instanceId, an instanceBatch or a purgeInstanceFilter",
            ))
        }
    };
    Ok(Response::new(PurgeInstancesResponse {
        deleted_instance_count: i32::try_from(deleted).unwrap_or(i32::MAX),
        is_complete: Some(complete),
    }))
}

/// Purges one finished instance (with `recursive`, its finished
/// sub-orchestrations too): how many went, 0 when there is none of that id
/// (as the SDKs expect of a purge); a running one is refused.
async fn purge_one(
    orchestrator: &Arc<Orchestrator>,
    id: &str,
    recursive: bool,
) -> Result<u64, Status> {
    let purged = match recursive {
        true => orchestrator.purge_tree(id).await,
        false => orchestrator.manage(id, Operation::Purge).await.map(|()| 1),
    };
    match purged {
        Ok(deleted) => Ok(deleted),
        Err(DurableError::InstanceNotFound(_)) => Ok(0),
        Err(e) => Err(refusal(e)),
    }
}

/// The created-time bounds of a query or purge, as the engine's filter.
/// A page of the ids of ended orchestrations (completed, failed,
/// terminated: those asked for among them), by when they ended, oldest
/// started first, with the key to ask for the next page after when more
/// match.
pub(super) async fn instance_ids(
    orchestrator: &Arc<Orchestrator>,
    request: ListInstanceIdsRequest,
) -> Result<Response<ListInstanceIdsResponse>, Status> {
    let Some(asked) = statuses(&request.runtime_status)? else {
        return Ok(Response::new(ListInstanceIdsResponse::default()));
    };
    let ended = [
        RuntimeStatus::Completed,
        RuntimeStatus::Failed,
        RuntimeStatus::Terminated,
    ];
    let statuses: Vec<RuntimeStatus> = if asked.is_empty() {
        ended.to_vec()
    } else {
        asked.into_iter().filter(|s| ended.contains(s)).collect()
    };
    if statuses.is_empty() {
        return Ok(Response::new(ListInstanceIdsResponse::default()));
    }
    let filter = InstanceFilter {
        statuses,
        updated_from: request.completed_time_from.as_ref().map(millis),
        updated_to: request.completed_time_to.as_ref().map(millis),
        orchestrations_only: true,
        ..InstanceFilter::default()
    };
    let (page, more) = page_of(
        orchestrator,
        &filter,
        i64::from(request.page_size),
        PAGE,
        request.last_instance_key.as_deref(),
    )
    .await?;
    let last_instance_key = more.then(|| page.last()).flatten().map(token_after);
    Ok(Response::new(ListInstanceIdsResponse {
        instance_ids: page.into_iter().map(|i| i.id).collect(),
        last_instance_key,
    }))
}

fn created_filter(
    from: Option<&prost_types::Timestamp>,
    to: Option<&prost_types::Timestamp>,
    statuses: Vec<RuntimeStatus>,
) -> InstanceFilter {
    InstanceFilter {
        statuses,
        created_from: from.map(millis),
        created_to: to.map(millis),
        ..InstanceFilter::default()
    }
}
