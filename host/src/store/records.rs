//! The rows of the store, as host types, and a run's record read from its
//! row or from a notification's JSON ([`run_from_array`]).

use serde::Serialize;
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::Row;

use super::error::StoreError;
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
    /// The invoke key that started it (its id), when one did: that key
    /// alone sees it, with the admin keys (`http::caller`). A new session
    /// is claimed for it, and it may go on only with a session it claimed
    /// (`None` with any): [`super::run_tx::continues`].
    pub caller: Option<String>,
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
    /// The invoke key that started it, when one did.
    #[serde(skip)]
    pub caller: Option<String>,
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

/// An entry to append.
#[derive(Debug, Clone)]
pub struct NewStreamRow {
    pub correlation_id: String,
    /// The run attempt that writes it (when that execution began, ms).
    pub attempt: i64,
    /// `chunk`, `complete` or `failed`.
    pub kind: &'static str,
    pub data: String,
}

pub(super) const RUN_COLUMNS: &str = "correlation_id, agent, session_id, message, response_format, status, \
                           response, error, error_code, usage, created_at, updated_at, traceparent, \
                           cancel_requested_at, caller";

pub(super) fn run_from_row(row: &AnyRow) -> Result<RunRecord, StoreError> {
    let status: String = row.try_get("status")?;
    let error_code: Option<String> = row.try_get("error_code")?;
    let format: Option<String> = row.try_get("response_format")?;
    let usage: Option<String> = row.try_get("usage")?;
    let corrupt =
        |what: &str, e: serde_json::Error| StoreError::Corrupt(format!("run {what}: {e}"));
    Ok(RunRecord {
        correlation_id: row.try_get("correlation_id")?,
        agent: row.try_get("agent")?,
        thread_id: row.try_get("session_id")?,
        message: row.try_get("message")?,
        status: RunStatus::stored(&status, error_code.as_deref())
            .ok_or_else(|| StoreError::Corrupt(format!("run status '{status}'")))?,
        response_format: format
            .map(|f| serde_json::from_str(&f))
            .transpose()
            .map_err(|e| corrupt("format", e))?,
        response: row.try_get("response")?,
        error: row.try_get("error")?,
        error_code,
        usage: usage
            .map(|u| serde_json::from_str(&u))
            .transpose()
            .map_err(|e| corrupt("usage", e))?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        traceparent: row.try_get("traceparent")?,
        cancel_requested: row
            .try_get::<Option<i64>, _>("cancel_requested_at")?
            .is_some(),
        caller: row.try_get("caller")?,
    })
}

/// A run's record from a notification's JSON array of its columns, in
/// [`RUN_COLUMNS`]' order (`response_format` and `usage` as their stored
/// text); `None` when it is not one.
pub(super) fn run_from_array(a: &[serde_json::Value]) -> Option<RunRecord> {
    let text = |i: usize| a.get(i).and_then(|v| v.as_str()).map(str::to_string);
    let json = |i: usize| -> Option<Option<serde_json::Value>> {
        match a.get(i)? {
            serde_json::Value::Null => Some(None),
            v => serde_json::from_str(v.as_str()?).ok().map(Some),
        }
    };
    let usage = match a.get(9)? {
        serde_json::Value::Null => None,
        v => Some(serde_json::from_str(v.as_str()?).ok()?),
    };
    Some(RunRecord {
        correlation_id: text(0)?,
        agent: text(1)?,
        thread_id: text(2)?,
        message: text(3)?,
        response_format: json(4)?,
        status: RunStatus::stored(a.get(5)?.as_str()?, a.get(8)?.as_str())?,
        response: text(6),
        error: text(7),
        error_code: text(8),
        usage,
        created_at: a.get(10)?.as_i64()?,
        updated_at: a.get(11)?.as_i64()?,
        traceparent: text(12),
        // Sent for ended runs only, whose request no longer matters.
        cancel_requested: false,
        // Absent from an earlier build's notification: a key then sees it
        // once it reads the record.
        caller: text(13),
    })
}
