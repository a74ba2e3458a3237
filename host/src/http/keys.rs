//! Endpoint keys: who may call which route.
//!
//! Two scopes, as the function host this one stands in for has them (function
//! keys and the master key): **invoke** runs agents (and follows the runs:
//! their record, stream and approvals) and starts orchestrations; **admin**
//! does that and everything else (the
//! management API, conversations, components). Health stays open so that a
//! load balancer needs no secret. Keys are kept as SHA-256 digests and a
//! presented key is compared with every configured one in constant time.
//!
//! URLs handed out in a 202 carry a token of their own (`?token=`, an HMAC
//! of an id under a secret derived from the keys), as the function host puts
//! a key in the URLs it hands out, so that whoever started the work can
//! follow it without holding a key of a wider scope:
//!
//! - a run's `streamUrl` opens that run's stream, nothing else;
//! - an orchestration start's `statusQueryGetUri` and its siblings open that
//!   one instance's status, raise, terminate, suspend, resume and purge (the
//!   Durable Functions client treats these URIs as capabilities: whoever holds
//!   them manages the instance), nothing else: not another instance, not the
//!   list, not a run.
//!
//! The two kinds are signed under different secrets, so a token of one kind
//! never opens the other whatever ids callers choose. Hosts configured with
//! the same keys derive the same secrets, so a token from one front works on
//! another; rotating the keys invalidates the tokens handed out before.

use axum::http::Method;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    Invoke,
    Admin,
}

impl Scope {
    fn parse(text: &str) -> Option<Self> {
        match text.trim().to_ascii_lowercase().as_str() {
            "invoke" => Some(Self::Invoke),
            "admin" => Some(Self::Admin),
            _ => None,
        }
    }

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Invoke => "invoke",
            Self::Admin => "admin",
        }
    }
}

/// Why a key setting was refused (at start: the host does not serve).
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("'{0}' is not a key setting: write SCOPE:KEY, with SCOPE invoke or admin (e.g. admin:{{a long random string}})")]
    Malformed(String),
    #[error(
        "an {scope} key is {length} characters long: use at least 16 (e.g. `openssl rand -hex 32`)"
    )]
    TooShort { scope: &'static str, length: usize },
    #[error("cannot read the key file {path}: {reason}")]
    File { path: String, reason: String },
}

/// What a URL token was minted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// The stream of the run named by the token's id.
    RunStream,
    /// The management URLs of the instance named by the token's id.
    Instance,
}

/// The configured keys; empty when the endpoints are open.
#[derive(Clone, Default)]
pub struct ApiKeys {
    digests: Vec<(Scope, [u8; 32])>,
    /// Signs stream tokens; derived from the keys.
    stream_secret: [u8; 32],
    /// Signs instance tokens; derived from the keys, apart from the stream
    /// secret so that the two kinds of token never open each other's URLs.
    instance_secret: [u8; 32],
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiKeys")
            .field("keys", &self.digests.len())
            .finish_non_exhaustive()
    }
}

/// A key shorter than this is refused: a guessable key is no key.
const SHORTEST_KEY: usize = 16;

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

impl ApiKeys {
    /// From `SCOPE:KEY` settings (several per scope: rotation) and the lines
    /// of key files (the same form; blank lines and `#` comments skipped).
    pub fn from_settings(
        settings: &[String],
        files: &[std::path::PathBuf],
    ) -> Result<Self, KeyError> {
        let mut lines: Vec<String> = settings.to_vec();
        for path in files {
            let text = std::fs::read_to_string(path).map_err(|e| KeyError::File {
                path: path.display().to_string(),
                reason: e.to_string(),
            })?;
            lines.extend(
                text.lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(str::to_string),
            );
        }
        let mut digests = Vec::with_capacity(lines.len());
        let mut secret = Sha256::new();
        secret.update(b"agenthost stream tokens\0");
        let mut instance_secret = Sha256::new();
        instance_secret.update(b"agenthost instance tokens\0");
        let mut sorted = Vec::with_capacity(lines.len());
        for line in &lines {
            let (scope, key) = line
                .split_once(':')
                .and_then(|(scope, key)| Some((Scope::parse(scope)?, key.trim())))
                .ok_or_else(|| KeyError::Malformed(redact(line)))?;
            if key.chars().count() < SHORTEST_KEY {
                return Err(KeyError::TooShort {
                    scope: scope.as_str(),
                    length: key.chars().count(),
                });
            }
            digests.push((scope, digest(key)));
            sorted.push(key.to_string());
        }
        sorted.sort();
        for key in &sorted {
            for secret in [&mut secret, &mut instance_secret] {
                secret.update(key.as_bytes());
                secret.update(b"\0");
            }
        }
        Ok(Self {
            digests,
            stream_secret: secret.finalize().into(),
            instance_secret: instance_secret.finalize().into(),
        })
    }

    /// True when no key is configured: every route is open.
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// The scope of `presented`, if it is a configured key. Every
    /// configured digest is compared, in constant time, whatever matched.
    pub(super) fn scope_of(&self, presented: &str) -> Option<Scope> {
        let presented = digest(presented);
        let mut found: Option<Scope> = None;
        for (scope, known) in &self.digests {
            if bool::from(known.ct_eq(&presented)) {
                found = found.max(Some(*scope));
            }
        }
        found
    }

    /// The token that opens what `grant` names for `id` alone (the stream
    /// of run `id`, or the management URLs of instance `id`); `None` when
    /// the host has no keys (its URLs need no token).
    pub fn token(&self, grant: Grant, id: &str) -> Option<String> {
        if self.is_empty() {
            return None;
        }
        let mac = self.mac(grant, id)?;
        Some(hex::encode(mac.finalize().into_bytes()))
    }

    pub(super) fn opens(&self, grant: Grant, id: &str, token: &str) -> bool {
        let Ok(token) = hex::decode(token) else {
            return false;
        };
        self.mac(grant, id)
            .is_some_and(|mac| mac.verify_slice(&token).is_ok())
    }

    fn mac(&self, grant: Grant, id: &str) -> Option<Hmac<Sha256>> {
        let secret = match grant {
            Grant::RunStream => &self.stream_secret,
            Grant::Instance => &self.instance_secret,
        };
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).ok()?;
        mac.update(id.as_bytes());
        Some(mac)
    }
}

/// What may be shown of a malformed setting: its scope part when it looks
/// like one (short, letters only), never any of the key.
fn redact(line: &str) -> String {
    match line.split_once(':') {
        Some((scope, _)) if scope.len() <= 12 && scope.chars().all(|c| c.is_ascii_alphabetic()) => {
            format!("{scope}:<redacted>")
        }
        _ => "<redacted>".to_string(),
    }
}

/// The one table of who may call what: `None` for routes open to anyone.
/// Every route the router serves is here (a route missing from it is
/// admin-only, the safe side).
pub fn required_scope(method: &Method, route: &str) -> Option<Scope> {
    // HEAD is served by the GET handlers: it needs what GET needs.
    let method = if method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    match (method, route) {
        (_, "/api/health" | "/api/health/live" | "/api/health/ready" | "/api/openapi.json") => None,
        ("POST", "/api/agents/{name}/run")
        | ("GET", "/api/agents/{name}/runs/{correlation_id}")
        | ("GET", "/api/agents/{name}/runs/{correlation_id}/stream")
        | ("POST", "/api/agents/{name}/runs/{correlation_id}/approvals")
        | ("POST", "/api/orchestrators/{name}")
        | ("POST", "/api/orchestrators/{name}/{instance_id}")
        | ("POST", "/api/{*path}") => Some(Scope::Invoke),
        _ => Some(Scope::Admin),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> ApiKeys {
        ApiKeys::from_settings(
            &[
                "admin:0123456789abcdef-admin".into(),
                "invoke:0123456789abcdef-invoke".into(),
                "invoke:0123456789abcdef-rotated".into(),
            ],
            &[],
        )
        .unwrap()
    }

    #[test]
    fn each_key_has_its_scope_and_an_unknown_one_has_none() {
        let keys = keys();
        assert_eq!(keys.scope_of("0123456789abcdef-admin"), Some(Scope::Admin));
        assert_eq!(
            keys.scope_of("0123456789abcdef-invoke"),
            Some(Scope::Invoke)
        );
        assert_eq!(
            keys.scope_of("0123456789abcdef-rotated"),
            Some(Scope::Invoke)
        );
        assert_eq!(keys.scope_of("0123456789abcdef-other"), None);
        assert_eq!(keys.scope_of(""), None);
    }

    #[test]
    fn bad_settings_are_refused_without_printing_the_key() {
        let short = ApiKeys::from_settings(&["admin:short".into()], &[]).unwrap_err();
        assert!(short.to_string().contains("at least 16"), "{short}");
        let bad = ApiKeys::from_settings(&["root:0123456789abcdef-secret".into()], &[])
            .unwrap_err()
            .to_string();
        assert!(!bad.contains("secret") && !bad.contains("012345"), "{bad}");
        let bare = ApiKeys::from_settings(&["0123456789abcdef-bare".into()], &[])
            .unwrap_err()
            .to_string();
        assert!(!bare.contains("0123"), "{bare}");
        assert!(ApiKeys::from_settings(&["nocolon".into()], &[]).is_err());
    }

    #[test]
    fn a_stream_token_opens_its_run_alone_and_follows_the_keys() {
        let keys = keys();
        let token = keys.token(Grant::RunStream, "run-1").unwrap();
        assert!(keys.opens(Grant::RunStream, "run-1", &token));
        assert!(!keys.opens(Grant::RunStream, "run-2", &token));
        assert!(!keys.opens(Grant::RunStream, "run-1", "00"));
        // Another host with the same keys, listed in another order.
        let same = ApiKeys::from_settings(
            &[
                "invoke:0123456789abcdef-rotated".into(),
                "invoke:0123456789abcdef-invoke".into(),
                "admin:0123456789abcdef-admin".into(),
            ],
            &[],
        )
        .unwrap();
        assert!(same.opens(Grant::RunStream, "run-1", &token));
        let other = ApiKeys::from_settings(&["admin:another-key-entirely!".into()], &[]).unwrap();
        assert!(!other.opens(Grant::RunStream, "run-1", &token));
        assert_eq!(ApiKeys::default().token(Grant::RunStream, "run-1"), None);
    }

    #[test]
    fn an_instance_token_opens_its_instance_alone_and_never_a_stream() {
        let keys = keys();
        let token = keys.token(Grant::Instance, "i-1").unwrap();
        assert!(keys.opens(Grant::Instance, "i-1", &token));
        assert!(!keys.opens(Grant::Instance, "i-2", &token));
        // A caller chooses instance ids, and an agent call's run is named
        // after its instance: the kinds must not open each other whatever
        // the ids.
        assert!(!keys.opens(Grant::RunStream, "i-1", &token));
        let stream = keys.token(Grant::RunStream, "i-1").unwrap();
        assert!(!keys.opens(Grant::Instance, "i-1", &stream));
    }

    #[test]
    fn health_is_open_runs_are_invoke_and_management_is_admin() {
        assert_eq!(required_scope(&Method::GET, "/api/health"), None);
        assert_eq!(
            required_scope(&Method::HEAD, "/api/agents/{name}/runs/{correlation_id}"),
            Some(Scope::Invoke)
        );
        assert_eq!(
            required_scope(&Method::POST, "/api/agents/{name}/run"),
            Some(Scope::Invoke)
        );
        assert_eq!(
            required_scope(
                &Method::DELETE,
                "/runtime/webhooks/durabletask/instances/{id}"
            ),
            Some(Scope::Admin)
        );
        assert_eq!(
            required_scope(&Method::GET, "/api/agents/{name}/sessions/{session_id}"),
            Some(Scope::Admin)
        );
    }
}
