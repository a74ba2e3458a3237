//! Who may call the gRPC service, and on which task hub: the metadata the
//! SDKs send (`authorization: Bearer KEY`, `taskhub: NAME`) read as the JSON
//! API reads its headers.

use std::sync::Arc;

use tonic::Status;

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

    /// Admits a call that carries an admin key when endpoint keys are
    /// configured (every call of the protocol manages instances; the key is
    /// checked first, so nothing is told to a caller without one).
    #[allow(clippy::result_large_err)] // a Status is what a call answers.
    pub(super) fn admit(&self, metadata: &http::HeaderMap) -> Result<(), Status> {
        if !self.config.keys.is_empty() {
            let text = |name: &str| {
                metadata
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .map(str::trim)
                    .filter(|v| !v.is_empty())
            };
            // As the JSON API reads its headers: `authorization: Bearer`,
            // else `x-api-key`.
            let presented = text("authorization")
                .and_then(|v| {
                    let (scheme, key) = v.split_once(' ')?;
                    scheme.eq_ignore_ascii_case("bearer").then(|| key.trim())
                })
                .or_else(|| text("x-api-key"));
            match presented.and_then(|key| self.config.keys.scope_of(key)) {
                Some(Scope::Admin) => {}
                Some(Scope::Invoke) => return Err(Status::permission_denied(
                    "this key has the invoke scope: the Durable Task protocol manages instances and needs an admin key",
                )),
                None if presented.is_some() => return Err(Status::unauthenticated(
                    "the key presented is not one of this host's endpoint keys",
                )),
                None => return Err(Status::unauthenticated(
                    "this host requires an endpoint key: send 'authorization: Bearer ADMIN_KEY'",
                )),
            }
        }
        Ok(())
    }
}
