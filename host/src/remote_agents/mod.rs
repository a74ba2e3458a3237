//! The host as an A2A 1.0 client, for an orchestration's `call-remote-agent`:
//! it reads the remote agent's card, sends the message as a background task
//! (JSON-RPC binding, `returnImmediately`) and follows the task with
//! `GetTask`. Every request goes where the calling component's grants allow
//! (`allowed_hosts`), to an address that passed the same check as a guest's
//! own outbound request: the host makes the call for the guest, so it must
//! reach nothing the guest could not.

mod wire;

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::Url;
use serde_json::{json, Value};

use crate::wasm::Grants;

pub(crate) use wire::{RemoteTask, TaskState};

/// How long connecting to a remote agent may take.
const CONNECT: Duration = Duration::from_secs(10);
/// How long one request may take in all: a card, a background send or a
/// `GetTask` is answered at once by a well-behaved agent.
const REQUEST: Duration = Duration::from_secs(30);
/// The largest answer read from a remote agent.
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// Why a remote agent could not be called.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RemoteError {
    #[error("'{url}' is not an http or https URL")]
    BadUrl { url: String },
    #[error(
        "the component may not reach {host}:{port}: grant it in the component's allowed_hosts"
    )]
    NotGranted { host: String, port: u16 },
    #[error("{0}")]
    Refused(String),
    #[error("the remote agent at {url} could not be reached: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} answered HTTP {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("the agent card at {url} {reason}")]
    BadCard { url: String, reason: String },
    #[error("the remote agent refused the call: {message} (A2A error {code})")]
    Rpc { code: i64, message: String },
    #[error("the answer of {url} is not A2A 1.0: {reason}")]
    BadAnswer { url: String, reason: String },
}

impl RemoteError {
    /// Worth asking again later: the remote host may be restarting or busy.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            RemoteError::Unreachable { .. } => true,
            RemoteError::Status { status, .. } => *status >= 500 || *status == 429,
            // -32603: the remote's own internal error.
            RemoteError::Rpc { code, .. } => *code == -32603,
            _ => false,
        }
    }

    /// The remote no longer knows the task (purged, or another store).
    pub(crate) fn is_task_not_found(&self) -> bool {
        matches!(self, RemoteError::Rpc { code: -32001, .. })
    }
}

/// What a call of a remote agent gets back from its first request: a task
/// to follow, or (an agent may answer so) a message that is the answer.
#[derive(Debug)]
pub(crate) enum Sent {
    Task(RemoteTask),
    Answered(String),
}

/// Calls of remote agents on behalf of one component, within its grants.
pub(crate) struct RemoteAgents<'a> {
    grants: &'a Grants,
}

impl<'a> RemoteAgents<'a> {
    pub(crate) fn new(grants: &'a Grants) -> Self {
        Self { grants }
    }

    /// The JSON-RPC endpoint of A2A 1.x the card at `card_url` names.
    pub(crate) async fn endpoint(&self, card_url: &str) -> Result<String, RemoteError> {
        let url = parse(card_url)?;
        let client = self.client_for(&url).await?;
        let response = client
            .get(url.clone())
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| unreachable(card_url, &e))?;
        let card: Value = read_json(card_url, response).await?;
        let endpoint = wire::jsonrpc_endpoint(&card).map_err(|reason| RemoteError::BadCard {
            url: card_url.to_string(),
            reason,
        })?;
        // A relative interface URL is taken relative to the card's.
        url.join(&endpoint)
            .map(String::from)
            .map_err(|_| RemoteError::BadCard {
                url: card_url.to_string(),
                reason: format!("names an interface URL that is not a URL: '{endpoint}'"),
            })
    }

    /// Sends `text` as a new background task; `message_id` makes a resend
    /// of the same call find the task the first send started, on an agent
    /// that keys tasks by it (agenthost does).
    pub(crate) async fn send(
        &self,
        endpoint: &str,
        message_id: &str,
        context_id: Option<&str>,
        text: &str,
    ) -> Result<Sent, RemoteError> {
        let mut message = json!({
            "messageId": message_id,
            "role": "ROLE_USER",
            "parts": [{"text": text}],
        });
        if let Some(context) = context_id {
            message["contextId"] = json!(context);
        }
        let result = self
            .rpc(
                endpoint,
                "SendMessage",
                json!({"message": message, "configuration": {"returnImmediately": true}}),
            )
            .await?;
        wire::sent(&result).map_err(|reason| RemoteError::BadAnswer {
            url: endpoint.to_string(),
            reason,
        })
    }

    /// The task `id` as the remote agent has it now.
    pub(crate) async fn task(&self, endpoint: &str, id: &str) -> Result<RemoteTask, RemoteError> {
        let result = self
            .rpc(endpoint, "GetTask", json!({"id": id, "historyLength": 0}))
            .await?;
        wire::task(&result).map_err(|reason| RemoteError::BadAnswer {
            url: endpoint.to_string(),
            reason,
        })
    }

    async fn rpc(&self, endpoint: &str, method: &str, params: Value) -> Result<Value, RemoteError> {
        let url = parse(endpoint)?;
        let client = self.client_for(&url).await?;
        let response = client
            .post(url)
            .header("A2A-Version", "1.0")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
            .send()
            .await
            .map_err(|e| unreachable(endpoint, &e))?;
        let answer: Value = read_json(endpoint, response).await?;
        if let Some(error) = answer.get("error") {
            return Err(RemoteError::Rpc {
                code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("no message")
                    .to_string(),
            });
        }
        answer
            .get("result")
            .cloned()
            .ok_or_else(|| RemoteError::BadAnswer {
                url: endpoint.to_string(),
                reason: format!("a JSON-RPC answer without result or error to {method}"),
            })
    }

    /// A client that reaches `url`'s host only at addresses the grants
    /// allow, checked here (never resolved again by the client), and
    /// follows no redirect (a redirect could lead anywhere).
    async fn client_for(&self, url: &Url) -> Result<reqwest::Client, RemoteError> {
        let (host, port) = destination(url)?;
        let allowed = self
            .grants
            .allows(&host, port)
            .ok_or_else(|| RemoteError::NotGranted {
                host: host.clone(),
                port,
            })?;
        let addresses: Vec<SocketAddr> = self
            .grants
            .network
            .addresses(&host, port, allowed.names_inside, CONNECT)
            .await
            .map_err(|refusal| RemoteError::Refused(refusal.to_string()))?;
        // No proxy: one would resolve the name itself, past the check.
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(CONNECT)
            .timeout(REQUEST);
        if host.parse::<std::net::IpAddr>().is_err() && !host.starts_with('[') {
            builder = builder.resolve_to_addrs(&host, &addresses);
        }
        builder.build().map_err(|e| RemoteError::Unreachable {
            url: url.to_string(),
            reason: e.to_string(),
        })
    }
}

fn parse(url: &str) -> Result<Url, RemoteError> {
    Url::parse(url)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        .ok_or_else(|| RemoteError::BadUrl {
            url: url.to_string(),
        })
}

/// The host (brackets kept for IPv6, as grants write it) and port of `url`.
fn destination(url: &Url) -> Result<(String, u16), RemoteError> {
    // IPv6 hosts come bracketed, as grants write them.
    let host = url
        .host_str()
        .ok_or_else(|| RemoteError::BadUrl {
            url: url.to_string(),
        })?
        .to_string();
    let port = url
        .port_or_known_default()
        .ok_or_else(|| RemoteError::BadUrl {
            url: url.to_string(),
        })?;
    Ok((host, port))
}

fn unreachable(url: &str, error: &reqwest::Error) -> RemoteError {
    // The cause chain says what failed (refused, timed out, TLS).
    let mut reason = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        reason = format!("{reason}: {cause}");
        source = cause.source();
    }
    RemoteError::Unreachable {
        url: url.to_string(),
        reason,
    }
}

/// The body of a 2xx answer as JSON, read up to [`MAX_ANSWER_BYTES`].
async fn read_json(url: &str, mut response: reqwest::Response) -> Result<Value, RemoteError> {
    let status = response.status();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| unreachable(url, &e))? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(RemoteError::BadAnswer {
                url: url.to_string(),
                reason: format!("the answer is larger than {MAX_ANSWER_BYTES} bytes"),
            });
        }
        body.extend_from_slice(&chunk);
    }
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body);
        return Err(RemoteError::Status {
            url: url.to_string(),
            status: status.as_u16(),
            body: text.chars().take(300).collect(),
        });
    }
    serde_json::from_slice(&body).map_err(|e| RemoteError::BadAnswer {
        url: url.to_string(),
        reason: format!("not JSON: {e}"),
    })
}
