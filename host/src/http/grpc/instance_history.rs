//! `StreamInstanceHistory`: an instance's history in the protocol's events
//! ([`crate::core::instance_history`]), in chunks, for the SDKs'
//! `get_orchestration_history`.

use std::sync::Arc;

use tonic::codegen::BoxStream;
use tonic::{Response, Status};

use super::convert::{refusal, text_of};
use super::history::event_of;
use super::proto::{HistoryChunk, StreamInstanceHistoryRequest};
use crate::core::failure::FailureDetails;
use crate::core::ids;
use crate::core::instance::RuntimeStatus;
use crate::core::instance_history;
use crate::core::sdk_history::{self, Ended, Started};
use crate::durable::Orchestrator;

/// Most events one chunk carries, and about the most bytes: a chunk stays
/// well under the 4 MiB a client takes in one message.
const CHUNK_EVENTS: usize = 500;
const CHUNK_BYTES: usize = 1 << 20;

pub(super) async fn stream(
    orchestrator: &Arc<Orchestrator>,
    request: StreamInstanceHistoryRequest,
) -> Result<Response<BoxStream<HistoryChunk>>, Status> {
    let view = orchestrator
        .status(&request.instance_id, true)
        .await
        .map_err(refusal)?;
    let instance = view.instance;
    if let Some(asked) = request.execution_id.filter(|e| !e.is_empty()) {
        let current = ids::protocol_execution_id(&instance.id, instance.execution);
        if asked != current {
            return Err(Status::not_found(format!(
                "instance '{}' keeps the history of its current execution ({current}) only, not of execution '{asked}'",
                instance.id
            )));
        }
    }
    let journal = view.history.map(|h| h.journal).unwrap_or_default();
    let started = Started {
        name: instance.name.clone(),
        input: instance.input.clone(),
        instance_id: instance.id.clone(),
        execution: instance.execution,
        parent: None,
        version: sdk_history::version_of(&instance.component_digest).map(str::to_string),
    };
    let ended = match instance.status.is_finished() {
        false => None,
        true => {
            let failed = instance.status == RuntimeStatus::Failed;
            let failure = match failed {
                false => None,
                true => Some(
                    match orchestrator
                        .reported_failure(&instance)
                        .await
                        .map_err(refusal)?
                    {
                        Some(reported) => reported,
                        None => FailureDetails {
                            error_type: "OrchestrationFailed".to_string(),
                            message: instance.output.as_deref().map(text_of).unwrap_or_default(),
                            stack_trace: None,
                            inner: None,
                            non_retriable: false,
                        },
                    },
                ),
            };
            let ended = Ended {
                status: instance.status,
                output: instance.output.clone().filter(|_| !failed),
                failure,
            };
            Some((ended, instance.updated_at))
        }
    };
    let history = instance_history::of(
        &started,
        &instance.component_digest,
        instance.created_at,
        &journal,
        ended,
    );
    let mut chunks = Vec::new();
    let mut chunk = Vec::new();
    let mut bytes = 0;
    for event in history {
        let size = sdk_history::payload_bytes(std::slice::from_ref(&event));
        if !chunk.is_empty() && (chunk.len() >= CHUNK_EVENTS || bytes + size > CHUNK_BYTES) {
            chunks.push(Ok(HistoryChunk {
                events: std::mem::take(&mut chunk),
            }));
            bytes = 0;
        }
        bytes += size;
        chunk.push(event_of(event));
    }
    chunks.push(Ok(HistoryChunk { events: chunk }));
    Ok(Response::new(Box::pin(futures::stream::iter(chunks))))
}
