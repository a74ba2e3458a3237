//! Model calls, made by the host on behalf of agents.
//!
//! Guests never see endpoints or keys: the agent loop hands this module the
//! conversation and gets the model's next message back. Two backends: a remote
//! OpenAI-compatible or Azure OpenAI endpoint, and a deterministic offline model
//! used when nothing is configured, so that every endpoint still works.

mod credential;
mod offline;
mod openai;
mod send_by;
mod settings;
mod stream;

pub use crate::core::chat::{ChatMessage, Role, ToolCall, ToolSpec, Usage};
pub use settings::ModelSettings;

use std::time::Duration;

use serde_json::Value;

/// One request to the model: the whole conversation so far and what it may do.
pub struct ChatRequest<'a> {
    /// The agent's model/deployment override, if it has one.
    pub model: Option<&'a str>,
    pub messages: &'a [ChatMessage],
    pub tools: &'a [ToolSpec],
    /// An OpenAI `response_format` object, already normalized.
    pub response_format: Option<&'a Value>,
    pub temperature: Option<f32>,
    pub max_output_tokens: Option<u32>,
    /// Longest this call may take (the host's `--model-timeout` otherwise).
    pub timeout: Option<Duration>,
    /// Asked before each attempt (the first and every retry): the moment
    /// (ms since the Unix epoch) by which that attempt must have left whole,
    /// else it is cut short ([`ModelError::Late`]); `None` when it must not
    /// be sent at all ([`ModelError::NotSent`]). Set on a shared hub, from
    /// the lease under which the turn's session is still this host's
    /// (`core::fence::send_by`).
    pub send_by: Option<&'a SendBy>,
}

/// See [`ChatRequest::send_by`].
pub type SendBy = dyn Fn() -> futures::future::BoxFuture<'static, Option<i64>> + Send + Sync;

/// Where the text of an answer goes, piece by piece, as the model produces
/// it. It must not block: it is called on the model call's task.
pub type Deltas<'a> = dyn Fn(&str) + Send + Sync + 'a;

/// The model's next message and what it cost.
#[derive(Debug)]
pub struct ChatResponse {
    pub message: ChatMessage,
    pub usage: Usage,
}

/// Why the model gave no answer. Every variant is reported to the HTTP caller as
/// a 502 with this text.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("the model endpoint {url} is unreachable: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the model endpoint refused the credentials (HTTP {status}): {body}")]
    Unauthorized { status: u16, body: String },
    #[error("the model endpoint answered HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("the model endpoint was still rate limiting (HTTP 429) after {attempts} attempts")]
    RateLimited { attempts: usize },
    #[error("the model's answer could not be read: {0}")]
    BadResponse(String),
    /// The request's send-by moment passed before its last byte left (the
    /// host was paused or starved): it was cut short, so the endpoint never
    /// had it whole, and whether the turn may still be asked is for the
    /// caller to find out again.
    #[error("the model request was not sent: its send-by moment passed {late_ms} ms before it could leave whole")]
    Late { late_ms: i64 },
    /// The request's sender may no longer send it (the session is no longer
    /// this host's, or that could not be checked): nothing was sent.
    #[error("the model request was not sent: its sender may no longer send it")]
    NotSent,
    /// The message callers of Agent Framework hosting know, with the
    /// credential tried and why it failed (never a secret).
    #[error(
        "authentication failed: verify login and access (credential tried: {tried}): {reason}"
    )]
    Authentication { tried: String, reason: String },
}

/// The host's connection to a model: remote endpoint or offline stand-in.
pub struct ModelClient {
    backend: Backend,
}

enum Backend {
    Offline,
    Remote(Box<openai::RemoteModel>),
}

impl ModelClient {
    /// Builds the client the settings describe.
    pub fn new(settings: ModelSettings, timeout: Duration) -> Result<Self, ModelError> {
        let vars = std::env::vars().collect();
        let backend = match settings {
            ModelSettings::Offline => Backend::Offline,
            remote => Backend::Remote(Box::new(openai::RemoteModel::new(remote, timeout, &vars)?)),
        };
        Ok(Self { backend })
    }

    /// Fails fast when the configured credential cannot obtain a token.
    pub async fn check_credential(&self) -> Result<(), ModelError> {
        match &self.backend {
            Backend::Offline => Ok(()),
            Backend::Remote(remote) => remote.check_credential().await,
        }
    }

    /// True when answers come from the built-in offline model.
    pub fn is_offline(&self) -> bool {
        matches!(self.backend, Backend::Offline)
    }

    /// A one-line description for logs; never contains a key.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Offline => "built-in offline model (no model endpoint configured)".into(),
            Backend::Remote(remote) => remote.describe(),
        }
    }

    /// Asks the model for the next message of the conversation; its text
    /// goes to `deltas` as it comes.
    pub async fn complete(
        &self,
        request: &ChatRequest<'_>,
        deltas: &Deltas<'_>,
    ) -> Result<ChatResponse, ModelError> {
        match &self.backend {
            Backend::Offline => Ok(offline::complete(request, deltas)),
            Backend::Remote(remote) => remote.complete(request, deltas).await,
        }
    }
}
