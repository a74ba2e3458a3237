//! SDK workers: the `GetWorkItems` stream a worker holds open, and the
//! answers it sends back for each item (`CompleteActivityTask`,
//! `AbandonTaskActivityWorkItem`). Workers run activities here; SDK
//! orchestrations and entities are not dispatched yet.

use std::collections::HashSet;

use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use tonic::Status;

use super::proto::{
    work_item, ActivityRequest, ActivityResponse, GetWorkItemsRequest, HealthPing,
    OrchestrationInstance, WorkItem,
};
use crate::sdk_workers::{ActivityItem, Answer, Connection, SdkWorkers};

pub(super) type WorkItems = Pin<Box<dyn Stream<Item = Result<WorkItem, Status>> + Send + 'static>>;

/// How long a stream stays silent before it carries a health ping: the
/// Python SDK drops a stream silent for 120 s and connects again.
const PING: Duration = Duration::from_secs(15);

/// The activities a worker said it runs (the SDK's work item filters), or
/// `None` for any: a worker is sent only what it runs, where the SDKs would
/// fail an activity they do not know for good.
pub(super) fn activities_of(request: &GetWorkItemsRequest) -> Option<HashSet<String>> {
    let filters = request.work_item_filters.as_ref()?;
    Some(filters.activities.iter().map(|a| a.name.clone()).collect())
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
                    activity_item(item?)
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

fn activity_item(item: ActivityItem) -> WorkItem {
    WorkItem {
        request: Some(work_item::Request::ActivityRequest(ActivityRequest {
            name: item.name,
            input: Some(item.input),
            orchestration_instance: Some(OrchestrationInstance {
                instance_id: item.instance_id,
                execution_id: None,
            }),
            task_id: item.task_id,
            ..ActivityRequest::default()
        })),
        completion_token: item.token,
    }
}

/// A worker's answer: its result (JSON) or its failure as the task's
/// outcome. An answer nothing waits for any more is accepted and dropped
/// (the item was given back meanwhile and runs again).
pub(super) fn complete(workers: &SdkWorkers, response: ActivityResponse) {
    let outcome = match (response.failure_details, response.result) {
        (Some(failure), _) => Err(if failure.error_type.is_empty() {
            failure.error_message
        } else {
            format!("{}: {}", failure.error_type, failure.error_message)
        }),
        (None, None) => Ok("null".to_string()),
        (None, Some(result)) => match serde_json::from_str::<serde::de::IgnoredAny>(&result) {
            Ok(_) => Ok(result),
            Err(e) => Err(format!("the SDK worker's result is not JSON: {e}")),
        },
    };
    if !workers.answer(&response.completion_token, Answer::Done(outcome)) {
        tracing::debug!(instance_id = %response.instance_id, task = response.task_id, "an SDK worker answered an item nothing waits for");
    }
}

/// The worker gives an item back: it runs again.
pub(super) fn abandon(workers: &SdkWorkers, token: &str) {
    workers.answer(token, Answer::Abandoned);
}
