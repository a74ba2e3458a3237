//! SDK workers: the `GetWorkItems` stream a worker holds open, and the
//! answers it sends back for each item (`CompleteOrchestratorTask`,
//! `CompleteActivityTask`, `CompleteEntityTask`, `AbandonTask*WorkItem`).
//! Workers run the episodes of SDK orchestrations, activities and batches
//! of entity operations.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use tonic::Status;

use super::convert::failure_of;
use super::history::{action_of, event_of};
use super::proto::{
    operation_result, work_item, ActivityRequest, ActivityResponse, EntityBatchRequest,
    EntityBatchResult, GetWorkItemsRequest, HealthPing, OperationRequest, OrchestrationFilter,
    OrchestrationInstance, OrchestratorRequest, OrchestratorResponse, TaskFailureDetails, WorkItem,
};
use crate::core::failure::TaskError;
use crate::core::sdk_actions;
use crate::core::sdk_entities::{BatchResult, StateAfter};
use crate::sdk_workers::{
    ActivityItem, Capacity, Connection, EntityItem, EpisodeItem, Item, Reply, Runs, SdkWorkers,
};

pub(super) type WorkItems = Pin<Box<dyn Stream<Item = Result<WorkItem, Status>> + Send + 'static>>;

/// How long a stream stays silent before it carries a health ping: the
/// Python SDK drops a stream silent for 120 s and connects again.
const PING: Duration = Duration::from_secs(15);

/// What a worker said it runs (the SDK's work item filters; without them,
/// anything) and how many at once (its `maxConcurrent*WorkItems`): a
/// worker is sent only what it runs, where the SDKs would fail an activity
/// or an orchestration they do not know for good, and no more than it runs
/// at once.
pub(super) fn runs_of(request: &GetWorkItemsRequest) -> Runs {
    // What it runs at once, where it says (0 or less: no bound said).
    let most = |n: i32| usize::try_from(n).ok().filter(|&n| n > 0);
    let capacity = Capacity {
        activities: most(request.max_concurrent_activity_work_items),
        episodes: most(request.max_concurrent_orchestration_work_items),
        entities: most(request.max_concurrent_entity_work_items),
    };
    let Some(filters) = request.work_item_filters.as_ref() else {
        return Runs {
            capacity,
            ..Runs::default()
        };
    };
    Runs {
        capacity,
        activities: Some(filters.activities.iter().map(|a| a.name.clone()).collect()),
        orchestrations: Some(versions_by_name(&filters.orchestrations)),
        entities: Some(filters.entities.iter().map(|e| e.name.clone()).collect()),
    }
}

/// The versions each filtered orchestration name runs: filters that name it
/// twice run what either lists, and one that lists none runs any.
fn versions_by_name(filters: &[OrchestrationFilter]) -> HashMap<String, Vec<String>> {
    let mut by_name: HashMap<String, Vec<String>> = HashMap::new();
    for filter in filters {
        match by_name.entry(filter.name.clone()) {
            Entry::Vacant(entry) => {
                entry.insert(filter.versions.clone());
            }
            Entry::Occupied(mut entry) => {
                let versions = entry.get_mut();
                if versions.is_empty() || filter.versions.is_empty() {
                    versions.clear();
                } else {
                    versions.extend(filter.versions.iter().cloned());
                }
            }
        }
    }
    by_name
}

/// The worker's stream: its activities as they are dispatched, a ping when
/// idle. The worker is connected while the stream lives: the call ending
/// (the worker stopped, or its connection broke) drops it, and what the
/// worker had not answered runs again.
pub(super) fn stream(connection: Connection) -> WorkItems {
    let mut ticks = tokio::time::interval(PING);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    Box::pin(futures::stream::unfold(
        (connection, ticks),
        |(mut connection, mut ticks)| async move {
            let item = tokio::select! {
                item = connection.items.recv() => {
                    ticks.reset();
                    work_item(item?)
                }
                _ = ticks.tick() => WorkItem {
                    request: Some(work_item::Request::HealthPing(HealthPing {})),
                    completion_token: String::new(),
                },
            };
            Some((Ok(item), (connection, ticks)))
        },
    ))
}

fn work_item(item: Item) -> WorkItem {
    match item {
        Item::Activity(item) => activity_item(item),
        Item::Episode(item) => episode_item(item),
        Item::Entity(item) => entity_item(item),
    }
}

/// A batch in the contract's first form (`EntityBatchRequest`): results
/// come back in the order of the operations, which the host keeps.
fn entity_item(item: EntityItem) -> WorkItem {
    WorkItem {
        request: Some(work_item::Request::EntityRequest(EntityBatchRequest {
            instance_id: item.instance_id,
            entity_state: item.state,
            operations: item
                .operations
                .into_iter()
                .map(|o| OperationRequest {
                    operation: o.operation,
                    request_id: o.request_id,
                    input: o.input,
                    trace_context: None,
                })
                .collect(),
            ..EntityBatchRequest::default()
        })),
        completion_token: item.token,
    }
}

fn episode_item(item: EpisodeItem) -> WorkItem {
    WorkItem {
        request: Some(work_item::Request::OrchestratorRequest(
            OrchestratorRequest {
                execution_id: Some(crate::core::ids::protocol_execution_id(
                    &item.instance_id,
                    item.execution,
                )),
                instance_id: item.instance_id,
                past_events: item.past.into_iter().map(event_of).collect(),
                new_events: item.new.into_iter().map(event_of).collect(),
                ..OrchestratorRequest::default()
            },
        )),
        completion_token: item.token,
    }
}

fn activity_item(item: ActivityItem) -> WorkItem {
    WorkItem {
        request: Some(work_item::Request::ActivityRequest(ActivityRequest {
            name: item.name,
            input: Some(item.input),
            orchestration_instance: Some(OrchestrationInstance {
                execution_id: Some(crate::core::ids::protocol_execution_id(
                    &item.instance_id,
                    item.execution,
                )),
                instance_id: item.instance_id,
            }),
            task_id: item.task_id,
            ..ActivityRequest::default()
        })),
        completion_token: item.token,
    }
}

/// A worker's answer: its result (as sent) or its failure as the task's
/// outcome. An answer nothing waits for any more is accepted and dropped
/// (the item was given back meanwhile and runs again).
pub(super) fn complete(workers: &SdkWorkers, response: ActivityResponse) {
    let outcome = match (response.failure_details, response.result) {
        (Some(failure), _) => Err(TaskError::reported(failure_of(failure))),
        // The SDK's own text: JSON, or its large-payload store's token.
        (None, result) => Ok(super::history::sent(result)),
    };
    if !workers.answer(&response.completion_token, Reply::Activity(outcome)) {
        tracing::debug!(instance_id = %response.instance_id, task = response.task_id, "an SDK worker answered an item nothing waits for");
    }
}

/// A worker's answer to an episode: its actions, which the engine journals
/// and carries out. An answer nothing waits for is dropped (the episode was
/// given back meanwhile and runs again).
pub(super) fn complete_episode(workers: &SdkWorkers, response: OrchestratorResponse) {
    let answer = sdk_actions::Answer {
        actions: response.actions.into_iter().map(action_of).collect(),
        custom_status: response.custom_status.filter(|s| !s.is_empty()),
    };
    if !workers.answer(&response.completion_token, Reply::Episode(answer)) {
        tracing::debug!(instance_id = %response.instance_id, "an SDK worker answered an episode nothing waits for");
    }
}

/// A worker's results for an entity batch, in the order of its operations,
/// and the state after them.
pub(super) fn complete_entities(workers: &SdkWorkers, result: EntityBatchResult) {
    let failed = |f: Option<TaskFailureDetails>| {
        Err(match f {
            Some(f) if f.error_type.is_empty() => f.error_message,
            Some(f) => format!("{}: {}", f.error_type, f.error_message),
            None => "the entity operation failed".to_string(),
        })
    };
    let whole_failed = result.failure_details.is_some();
    let results = match result.failure_details {
        // The whole batch failed: its operations with it (the first says
        // why; the others are answered as given no result).
        Some(failure) => vec![failed(Some(failure))],
        None => result
            .results
            .into_iter()
            .map(|r| match r.result_type {
                Some(operation_result::ResultType::Success(ok)) => {
                    Ok(super::history::sent(ok.result))
                }
                Some(operation_result::ResultType::Failure(failure)) => {
                    failed(failure.failure_details)
                }
                None => failed(None),
            })
            .collect(),
    };
    let state = match result.entity_state.filter(|s| !s.is_empty()) {
        _ if whole_failed => StateAfter::Unchanged,
        Some(state) => StateAfter::Set(state),
        None => StateAfter::Deleted,
    };
    let actions = match whole_failed {
        true => Vec::new(),
        false => super::history::entity_actions_of(result.actions),
    };
    let batch = BatchResult {
        results,
        state,
        actions,
    };
    if !workers.answer(&result.completion_token, Reply::Entity(batch)) {
        tracing::debug!("an SDK worker answered an entity batch nothing waits for");
    }
}

/// The worker gives an item back: it runs again.
pub(super) fn abandon(workers: &SdkWorkers, token: &str) {
    workers.abandon(token);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(name: &str, versions: &[&str]) -> OrchestrationFilter {
        OrchestrationFilter {
            name: name.into(),
            versions: versions.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn filters_naming_an_orchestration_twice_run_what_either_lists() {
        let merged = versions_by_name(&[
            filter("a", &["1"]),
            filter("a", &["2"]),
            filter("b", &["1"]),
            filter("b", &[]),
        ]);
        assert_eq!(merged["a"], ["1", "2"]);
        assert!(merged["b"].is_empty(), "a filter with no versions runs any");
    }
}
