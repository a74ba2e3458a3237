//! Several task hubs behind one port, as the managed Durable Task Scheduler
//! serves them: each hub has its own services ([`AppState`]) and its own
//! router; a request names its hub (`?taskHub=NAME`, or a `taskhub` header:
//! the gRPC metadata the SDKs send) and is answered by that hub's router, a
//! request naming none by the host's own hub. Which hubs exist, and when a
//! new one is opened, is the embedding layer's business ([`HubDirectory`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tower::ServiceExt;

use super::error::ApiError;
use super::AppState;

/// A boxed future, as a trait object's async method returns it.
pub(crate) type Opening<'a> =
    Pin<Box<dyn Future<Output = Result<AppState, HubRefused>> + Send + 'a>>;

/// The task hubs a host serves, and the opening of a new one.
pub(crate) trait HubDirectory: Send + Sync {
    /// The host's own hub: what a request naming none is served by.
    fn primary(&self) -> &str;
    /// The services of `hub`, opened now when it is admitted and not open
    /// yet. `caller` says who asked, for the log line of a refusal.
    fn open<'a>(&'a self, hub: &'a str, caller: &'a str) -> Opening<'a>;
}

/// Why a named hub is not served.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HubRefused {
    #[error("task hub '{hub}' is not served here: this host serves {served} (list it with --taskhubs, or start the host with --dynamic-task-hubs to serve any hub named)")]
    NotServed { hub: String, served: String },
    #[error("{0}")]
    InvalidName(String),
    #[error("task hub '{hub}' cannot be opened now: {reason}")]
    Unavailable { hub: String, reason: String },
}

impl HubRefused {
    /// The refusal as the JSON API answers it.
    fn answer(&self) -> Response {
        let message = self.to_string();
        match self {
            Self::NotServed { .. } => ApiError::not_found("taskhub_not_served", message),
            Self::InvalidName(_) => ApiError::bad_request("invalid_taskhub", message),
            Self::Unavailable { .. } => ApiError::unavailable("taskhub_unavailable", message),
        }
        .into_response()
    }

    /// The same refusal in gRPC's terms.
    pub(crate) fn grpc(&self) -> tonic::Status {
        match self {
            Self::NotServed { .. } => tonic::Status::not_found(self.to_string()),
            Self::InvalidName(_) => tonic::Status::invalid_argument(self.to_string()),
            Self::Unavailable { .. } => tonic::Status::unavailable(self.to_string()),
        }
    }
}

/// The hub a request names: `?taskHub=` (as Durable Functions' status URLs
/// carry it; any case of the key), else a `taskhub` header.
pub(crate) fn named_hub(request: &axum::http::request::Parts) -> Option<String> {
    let from_query = request.uri.query().and_then(|query| {
        url::form_urlencoded::parse(query.as_bytes())
            .find(|(key, _)| key.eq_ignore_ascii_case("taskhub"))
            .map(|(_, value)| value.into_owned())
    });
    from_query
        .or_else(|| {
            request
                .headers
                .get("taskhub")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        })
        .map(|hub| hub.trim().to_string())
        .filter(|hub| !hub.is_empty())
}

/// Who sent a request, for a refusal's log line.
pub(crate) fn caller_of(extensions: &axum::http::Extensions) -> String {
    extensions
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|info| info.0.to_string())
        .or_else(|| {
            extensions
                .get::<tonic::transport::server::TcpConnectInfo>()
                .and_then(|info| info.remote_addr())
                .map(|address| address.to_string())
        })
        .unwrap_or_else(|| "a caller".to_string())
}

/// The routes of every hub: the host's own hub's router, and each other
/// hub's, built on its first request.
pub(crate) fn router(primary: AppState, hubs: Arc<dyn HubDirectory>) -> Router {
    let select = Select {
        keys: primary.config.keys.clone(),
        primary: super::router(primary),
        hubs,
        routers: Arc::new(Mutex::new(HashMap::new())),
    };
    Router::new().fallback_service(select)
}

#[derive(Clone)]
struct Select {
    primary: Router,
    /// The host's own keys: what a request naming a hub not open yet
    /// must present before anything is said about that hub.
    keys: super::ApiKeys,
    hubs: Arc<dyn HubDirectory>,
    routers: Arc<Mutex<HashMap<String, Router>>>,
}

impl Select {
    async fn answer(self, request: Request) -> Response {
        let (parts, body) = request.into_parts();
        let hub = match named_hub(&parts) {
            Some(hub) if hub != self.hubs.primary() => hub,
            _ => return serve(self.primary, Request::from_parts(parts, body)).await,
        };
        let request = Request::from_parts(parts, body);
        let known = self
            .routers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&hub)
            .cloned();
        if let Some(router) = known {
            return serve(router, request).await;
        }
        // The hub's own router checks the key of every request it serves;
        // one naming a hub not open yet is answered by the host's own keys
        // first (the host's own router refuses it), so nothing about hubs
        // is told to a caller without one.
        if !self.keys.is_empty() && !super::authorize::holds_a_key(&request, &self.keys) {
            return serve(self.primary, request).await;
        }
        let caller = caller_of(request.extensions());
        match self.hubs.open(&hub, &caller).await {
            Ok(state) => {
                let router = self
                    .routers
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .entry(hub)
                    .or_insert_with(|| super::router(state))
                    .clone();
                serve(router, request).await
            }
            Err(refused) => refused.answer(),
        }
    }
}

async fn serve(router: Router, request: Request) -> Response {
    match router.oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

impl tower::Service<Request<Body>> for Select {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { Ok(this.answer(request).await) })
    }
}
