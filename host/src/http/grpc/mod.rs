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

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::server::NamedService;
use tonic::service::Routes;
use tower::ServiceExt;

use super::hubs::{caller_of, HubDirectory};
use super::AppState;
use proto::task_hub_sidecar_service_server::TaskHubSidecarServiceServer;

/// The largest message taken from a client or a worker, at the least.
const ANSWERS_UP_TO: usize = 32 << 20;

/// The gRPC service of one task hub.
type HubService = TaskHubSidecarServiceServer<calls::Sidecar>;

/// The gRPC service of the host's task hubs, behind the endpoint keys: a
/// call goes to the hub its `taskhub` metadata names (the host's own hub
/// when it names none, as the plain SDKs do).
pub(crate) fn routes(primary: AppState, hubs: Arc<dyn HubDirectory>) -> Routes {
    let check = access::Check::new(primary.config.clone());
    let mut services = HashMap::new();
    services.insert(hubs.primary().to_string(), service_of(primary));
    Routes::new(Hubs {
        check,
        hubs,
        services: Arc::new(Mutex::new(services)),
    })
}

fn service_of(state: AppState) -> HubService {
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
    TaskHubSidecarServiceServer::new(calls::Sidecar::new(state))
        .max_decoding_message_size(limit)
        .max_encoding_message_size(usize::MAX)
}

/// Picks each call's hub; the key is checked first, so nothing about hubs
/// is told to a caller without one.
#[derive(Clone)]
struct Hubs {
    check: access::Check,
    hubs: Arc<dyn HubDirectory>,
    services: Arc<Mutex<HashMap<String, HubService>>>,
}

impl NamedService for Hubs {
    const NAME: &'static str = <HubService as NamedService>::NAME;
}

impl Hubs {
    async fn answer(self, request: http::Request<Body>) -> http::Response<Body> {
        if let Err(refused) = self.check.admit(request.headers()) {
            return refused.into_http();
        }
        let hub = request
            .headers()
            .get("taskhub")
            .map(|v| v.to_str().unwrap_or_default().trim().to_string())
            .filter(|hub| !hub.is_empty())
            .unwrap_or_else(|| self.hubs.primary().to_string());
        let known = self
            .services
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&hub)
            .cloned();
        let service = match known {
            Some(service) => service,
            None => {
                let caller = caller_of(request.extensions());
                match self.hubs.open(&hub, &caller).await {
                    Ok(state) => self
                        .services
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .entry(hub)
                        .or_insert_with(|| service_of(state))
                        .clone(),
                    Err(refused) => return refused.grpc().into_http(),
                }
            }
        };
        match service.oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }
}

impl tower::Service<http::Request<Body>> for Hubs {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.answer(request).await) })
    }
}
