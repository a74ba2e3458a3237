//! The rows of the store, as host types.

use serde::Serialize;
use serde_json::Value;

use crate::core::chat::{ChatMessage, Usage};

/// A conversation is identified by its agent and its thread id: the same
/// thread id sent to two agents is two conversations.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionKey {
    pub agent: String,
    pub session_id: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Pending,
    Running,
    /// Shown, never stored: the run waits for decisions on tool calls.
    AwaitingApproval,
    Completed,
    Failed,
    /// Stopped at a caller's request. Stored as `failed` with the error
    /// code [`CANCELED`], so that every reader of ended runs (waiters, the
    /// retention sweep, the indexes of unfinished runs) counts it ended
    /// without a new status in their statements or a table rebuild.
    Canceled,
}

/// The error code a canceled run is stored with.
pub const CANCELED: &str = "canceled";

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::AwaitingApproval => "awaiting_approval",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Canceled => "canceled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => Self::Pending,
            "running" => Self::Running,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "canceled" => Self::Canceled,
            _ => return None,
        })
    }

    /// The status of a run as stored: its status column and error code.
    pub fn stored(status: &str, code: Option<&str>) -> Option<Self> {
        match Self::parse(status)? {
            Self::Failed if code == Some(CANCELED) => Some(Self::Canceled),
            Self::Canceled | Self::AwaitingApproval => None,
            other => Some(other),
        }
    }

    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Canceled)
    }
}

/// A run request as it arrives, before it is stored.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub correlation_id: String,
    pub session: SessionKey,
    pub message: String,
    pub response_format: Option<Value>,
    /// The trace the run continues ([`crate::telemetry`]).
    pub traceparent: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunRecord {
    pub correlation_id: String,
    pub agent: String,
    pub thread_id: String,
    pub message: String,
    pub status: RunStatus,
    #[serde(skip)]
    pub response_format: Option<Value>,
    pub response: Option<String>,
    pub error: Option<String>,
    pub error_code: Option<String>,
    pub usage: Option<Usage>,
    pub created_at: i64,
    pub updated_at: i64,
    #[serde(skip)]
    pub traceparent: Option<String>,
    /// A caller asked the run to stop: whoever executes it ends it as
    /// canceled at its next step.
    #[serde(skip)]
    pub cancel_requested: bool,
}

impl RunRecord {
    pub fn session(&self) -> SessionKey {
        SessionKey {
            agent: self.agent.clone(),
            session_id: self.thread_id.clone(),
        }
    }
}

/// A message of a session's history and the run that produced it.
#[derive(Debug, Clone)]
pub struct StoredMessage {
    pub correlation_id: String,
    pub message: ChatMessage,
}
