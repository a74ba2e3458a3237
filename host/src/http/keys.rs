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
//! of what it opens under a secret derived from an admin key), as the
//! function host puts a key in the URLs it hands out, so that whoever
//! started the work can follow it without holding a key of a wider scope:
//!
//! - a run's `streamUrl` opens that run's stream, nothing else;
//! - an orchestration start's `statusQueryGetUri` and its siblings open that
//!   one instance's status, raise, terminate, suspend, resume and purge (the
//!   Durable Functions client treats these URIs as capabilities: whoever holds
//!   them manages the instance), nothing else: not another instance, not the
//!   list, not a run.
//!
//! A token signs its kind, its id and, for an instance, the moment it was
//! created, so a token of one kind never opens the other whatever ids
//! callers choose, and a token kept from an instance that finished does not
//! open a later instance started under the same id (run ids are never
//! reused: their tokens name moment 0). Only admin keys sign:
//! an invoke key holder cannot mint a token (with no admin key, no URL
//! carries one). The first admin key configured signs, and every admin key
//! configured verifies, so adding a key keeps the URLs handed out working;
//! removing the key that signed them ends them. Hosts with the same admin
//! keys accept each other's tokens.

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

impl Grant {
    fn label(self) -> &'static [u8] {
        match self {
            Self::RunStream => b"run stream\0",
            Self::Instance => b"instance\0",
        }
    }
}

/// The configured keys; empty when the endpoints are open.
#[derive(Clone, Default)]
pub struct ApiKeys {
    digests: Vec<(Scope, [u8; 32])>,
    /// One URL-token secret per admin key, in the order configured: the
    /// first signs, any verifies.
    signers: Vec<[u8; 32]>,
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
        let mut signers = Vec::new();
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
            if scope == Scope::Admin {
                let mut secret = Sha256::new();
                secret.update(b"agenthost url tokens\0");
                secret.update(key.as_bytes());
                signers.push(secret.finalize().into());
            }
        }
        Ok(Self { digests, signers })
    }

    /// How many keys of `scope` are configured.
    pub fn count(&self, scope: Scope) -> usize {
        self.digests.iter().filter(|(s, _)| *s == scope).count()
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

    /// Who presents `presented`: its scope, and for an invoke key the id
    /// the runs it starts record (a digest of the key's digest: stable
    /// while the key is configured, and telling nothing of the key).
    pub(super) fn caller_of(&self, presented: &str) -> Option<super::caller::Caller> {
        use super::caller::Caller;
        match self.scope_of(presented)? {
            Scope::Admin => Some(Caller::Admin),
            Scope::Invoke => {
                let id = Sha256::new()
                    .chain_update(b"agenthost caller\0")
                    .chain_update(digest(presented))
                    .finalize();
                Some(Caller::Invoke(format!("key:{}", hex::encode(&id[..8]))))
            }
        }
    }

    /// Whether URLs handed out carry tokens (an admin key is configured).
    pub fn signs(&self) -> bool {
        !self.signers.is_empty()
    }

    /// The token that opens what `grant` names for `id` alone (the stream
    /// of run `id`, or the management URLs of instance `id`) while `id` is
    /// the run or instance created at `born` (ms): `{born:x}.{hmac}`.
    /// `None` when no admin key is configured (no URL then carries a token).
    pub fn token(&self, grant: Grant, id: &str, born: i64) -> Option<String> {
        let signer = self.signers.first()?;
        let mac = mac(signer, grant, id, born)?;
        Some(format!(
            "{born:x}.{}",
            hex::encode(mac.finalize().into_bytes())
        ))
    }

    /// The creation moment a token names, when it was minted for `grant`
    /// and `id` under any admin key configured now; the caller compares it
    /// with the run's or instance's own.
    pub(super) fn opens(&self, grant: Grant, id: &str, token: &str) -> Option<i64> {
        let (born, signature) = token.split_once('.')?;
        let born = i64::from_str_radix(born, 16).ok()?;
        let signature = hex::decode(signature).ok()?;
        let verified = self.signers.iter().fold(false, |opened, signer| {
            let verified = mac(signer, grant, id, born)
                .is_some_and(|mac| mac.verify_slice(&signature).is_ok());
            opened | verified
        });
        verified.then_some(born)
    }
}

fn mac(secret: &[u8; 32], grant: Grant, id: &str, born: i64) -> Option<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).ok()?;
    mac.update(grant.label());
    mac.update(&born.to_be_bytes());
    mac.update(id.as_bytes());
    Some(mac)
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
        (
            _,
            "/api/health" | "/api/health/live" | "/api/health/ready" | "/api/openapi.json"
            | "/agenthost-wake",
        ) => None,
        // Agent cards are how A2A callers discover an agent (and the keys
        // it wants): open, as the OpenAPI document is.
        ("GET", "/.well-known/agent-card.json" | "/a2a/{agent}/.well-known/agent-card.json") => {
            None
        }
        ("POST", "/api/agents/{name}/run")
        | ("GET", "/api/agents/{name}/runs/{correlation_id}")
        | ("GET", "/api/agents/{name}/runs/{correlation_id}/stream")
        | ("POST", "/api/agents/{name}/runs/{correlation_id}/approvals")
        | ("POST", "/api/agents/{name}/runs/{correlation_id}/cancel")
        | (
            "POST",
            "/a2a/{agent}" | "/a2a/{agent}/" | "/a2a/{agent}/{verb}" | "/a2a/{agent}/tasks/{id}",
        )
        | ("GET", "/a2a/{agent}/tasks" | "/a2a/{agent}/tasks/{id}")
        | (
            "GET" | "POST" | "DELETE",
            "/a2a/{agent}/tasks/{id}/pushNotificationConfigs"
            | "/a2a/{agent}/tasks/{id}/pushNotificationConfigs/{config}",
        )
        | (_, "/runtime/webhooks/mcp")
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
    fn a_stream_token_opens_its_run_alone_and_follows_the_admin_keys() {
        let keys = keys();
        let token = keys.token(Grant::RunStream, "run-1", 7).unwrap();
        assert_eq!(keys.opens(Grant::RunStream, "run-1", &token), Some(7));
        assert_eq!(keys.opens(Grant::RunStream, "run-2", &token), None);
        assert_eq!(keys.opens(Grant::RunStream, "run-1", "00"), None);
        // Another host with the same admin key, and other invoke keys.
        let same = ApiKeys::from_settings(
            &[
                "invoke:0123456789abcdef-elsewhere".into(),
                "admin:0123456789abcdef-admin".into(),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(same.opens(Grant::RunStream, "run-1", &token), Some(7));
        let other = ApiKeys::from_settings(&["admin:another-key-entirely!".into()], &[]).unwrap();
        assert_eq!(other.opens(Grant::RunStream, "run-1", &token), None);
        assert_eq!(ApiKeys::default().token(Grant::RunStream, "run-1", 7), None);
    }

    #[test]
    fn an_instance_token_opens_its_instance_alone_and_never_a_stream() {
        let keys = keys();
        let token = keys.token(Grant::Instance, "i-1", 7).unwrap();
        assert_eq!(keys.opens(Grant::Instance, "i-1", &token), Some(7));
        assert_eq!(keys.opens(Grant::Instance, "i-2", &token), None);
        // A caller chooses instance ids, and an agent call's run is named
        // after its instance: the kinds must not open each other whatever
        // the ids.
        assert_eq!(keys.opens(Grant::RunStream, "i-1", &token), None);
        let stream = keys.token(Grant::RunStream, "i-1", 7).unwrap();
        assert_eq!(keys.opens(Grant::Instance, "i-1", &stream), None);
    }

    #[test]
    fn a_token_names_the_moment_its_instance_was_created_and_that_cannot_be_changed() {
        let keys = keys();
        let old = keys.token(Grant::Instance, "order-42", 1_000).unwrap();
        // The token names the instance it was minted for; the check compares
        // that with the instance of the id now (authorize::admits).
        assert_eq!(keys.opens(Grant::Instance, "order-42", &old), Some(1_000));
        let forged_moment = old.replacen("3e8", "3e9", 1);
        assert_eq!(
            keys.opens(Grant::Instance, "order-42", &forged_moment),
            None
        );
    }

    #[test]
    fn only_admin_keys_sign_so_an_invoke_key_cannot_forge_a_token() {
        let invoke_only =
            ApiKeys::from_settings(&["invoke:0123456789abcdef-invoke".into()], &[]).unwrap();
        assert_eq!(invoke_only.token(Grant::Instance, "i-1", 7), None);
        assert_eq!(invoke_only.opens(Grant::Instance, "i-1", ""), None);
        // Knowing every invoke key of a host tells nothing of its tokens.
        let mut forged = Sha256::new();
        forged.update(b"agenthost url tokens\0");
        forged.update(b"0123456789abcdef-invoke");
        let forged: [u8; 32] = forged.finalize().into();
        let forged = mac(&forged, Grant::Instance, "i-1", 7).unwrap();
        let forged = hex::encode(forged.finalize().into_bytes());
        assert_eq!(
            keys().opens(Grant::Instance, "i-1", &format!("7.{forged}")),
            None
        );
    }

    #[test]
    fn adding_an_admin_key_keeps_the_tokens_handed_out_and_removing_the_signer_ends_them() {
        let before = ApiKeys::from_settings(&["admin:0123456789abcdef-old".into()], &[]).unwrap();
        let token = before.token(Grant::Instance, "i-1", 7).unwrap();
        let rotating = ApiKeys::from_settings(
            &[
                "admin:0123456789abcdef-new".into(),
                "admin:0123456789abcdef-old".into(),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(rotating.opens(Grant::Instance, "i-1", &token), Some(7));
        let after = ApiKeys::from_settings(&["admin:0123456789abcdef-new".into()], &[]).unwrap();
        assert_eq!(after.opens(Grant::Instance, "i-1", &token), None);
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
