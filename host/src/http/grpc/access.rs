//! Who may call the gRPC service, and on which task hub: the metadata the
//! SDKs send (`authorization: Bearer KEY`, `taskhub: NAME`) read as the JSON
//! API reads its headers.

use std::sync::Arc;

use tonic::{Request, Status};

use super::super::keys::Scope;
use super::super::HttpConfig;

/// The check every call passes before its handler runs.
#[derive(Clone)]
pub(super) struct Check {
    config: Arc<HttpConfig>,
}

impl Check {
    pub(super) fn new(config: Arc<HttpConfig>) -> Self {
        Self { config }
    }

    /// Admits a call that names this host's task hub (or none: the plain
    /// SDKs send no `taskhub`) and, when endpoint keys are configured,
    /// carries an admin key: every call of the protocol manages instances.
    #[allow(clippy::result_large_err)] // tonic's interceptor signature.
    pub(super) fn admit(&self, request: Request<()>) -> Result<Request<()>, Status> {
        let metadata = request.metadata();
        if let Some(hub) = metadata.get("taskhub") {
            let hub = hub.to_str().unwrap_or_default();
            if hub != self.config.hub {
                return Err(Status::not_found(format!(
                    "task hub '{hub}' is not served here: this host serves task hub '{}' (set TaskHub= in the connection string, or --taskhub on the host)",
                    self.config.hub
                )));
            }
        }
        if self.config.keys.is_empty() {
            return Ok(request);
        }
        let presented = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim);
        match presented.and_then(|key| self.config.keys.scope_of(key)) {
            Some(Scope::Admin) => Ok(request),
            Some(Scope::Invoke) => Err(Status::permission_denied(
                "this key has the invoke scope: the Durable Task protocol manages instances and needs an admin key",
            )),
            None if presented.is_some() => Err(Status::unauthenticated(
                "the key in 'authorization: Bearer …' is not one of this host's endpoint keys",
            )),
            None => Err(Status::unauthenticated(
                "this host requires an endpoint key: send 'authorization: Bearer ADMIN_KEY'",
            )),
        }
    }
}
