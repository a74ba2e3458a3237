//! The Durable Task sidecar protocol over gRPC: `TaskHubSidecarService` of
//! the public durabletask-protobuf contract (`host/proto/`), so the Durable
//! Task SDKs' clients (Python, .NET, Java, JavaScript, Go) start, follow and
//! manage this host's orchestrations without a line changed. Served on its
//! own port (`--grpc`, `--grpc-port`, 8080 like the local emulator): the SDKs
//! speak HTTP/2 with prior knowledge and gRPC's own status codes, which the
//! JSON API's router and error bodies have no business knowing.
//!
//! It serves the management calls (`calls`, `entities`) and SDK workers
//! (`work_items`) that run activities, orchestrations and entities written
//! with an SDK, and an instance's history (`instance_history`); the few
//! calls left answer `UNIMPLEMENTED` with a sentence saying what to use
//! instead.

mod access;
mod calls;
mod convert;
mod entities;
mod history;
mod instance_history;
mod listing;
mod waits;
mod work_items;

/// The generated messages and service of the contract.
#[allow(clippy::all, clippy::pedantic, missing_docs, unreachable_pub)]
pub(crate) mod proto {
    include!(concat!(env!("OUT_DIR"), "/durabletask.rs"));
}

use tonic::service::interceptor::InterceptedService;
use tonic::service::Routes;

use super::AppState;
use proto::task_hub_sidecar_service_server::TaskHubSidecarServiceServer;

/// The largest message taken from a client or a worker, at the least.
const ANSWERS_UP_TO: usize = 32 << 20;

/// The gRPC service of the host's task hub, behind the endpoint keys.
pub(crate) fn routes(state: AppState) -> Routes {
    // A worker's answer is taken in whole up to ANSWERS_UP_TO, whatever it
    // holds (an episode's many calls, a batch's results and state): the
    // engine then refuses what is past a payload's limit, and the task,
    // the instance or the batch fails saying so. An answer refused here
    // would never reach the engine, and its item would run again and again.
    let limit = state
        .config
        .max_body_bytes
        .max(
            state
                .orchestrator
                .max_payload_bytes()
                .saturating_add(64 << 10),
        )
        .max(ANSWERS_UP_TO);
    let check = access::Check::new(state.config.clone());
    let service = TaskHubSidecarServiceServer::new(calls::Sidecar::new(state))
        .max_decoding_message_size(limit)
        .max_encoding_message_size(usize::MAX);
    Routes::new(InterceptedService::new(service, move |request| {
        check.admit(request)
    }))
}
