//! The bodies of agent-run answers, as types, with the management API's
//! time format.

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::instance_body::Timestamp;
use crate::core::chat::Usage;
use crate::runs::{PendingCall, RunRecord, RunStatus};

/// A finished run, answered to a caller that asked for JSON: camelCase
/// fields, with the snake_case twins older callers read.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct RunCompleted<'a> {
    response: Value,
    agent_response: Value,
    session_id: &'a str,
    correlation_id: &'a str,
    message_count: u64,
    status: &'static str,
    #[schema(value_type = super::schemas::UsageSchema)]
    usage: Usage,
    #[serde(rename = "thread_id")]
    thread_id_legacy: &'a str,
    #[serde(rename = "correlation_id")]
    correlation_id_legacy: &'a str,
    #[serde(rename = "message_count")]
    message_count_legacy: u64,
}

impl<'a> RunCompleted<'a> {
    pub fn new(run: &'a RunRecord, message_count: u64) -> Self {
        let response = response_value(run);
        Self {
            agent_response: response.clone(),
            response,
            session_id: &run.thread_id,
            correlation_id: &run.correlation_id,
            message_count,
            status: "success",
            usage: run.usage.unwrap_or_default(),
            thread_id_legacy: &run.thread_id,
            correlation_id_legacy: &run.correlation_id,
            message_count_legacy: message_count,
        }
    }
}

/// A run accepted to finish later (`202`), with the snake_case twins.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct RunAccepted<'a> {
    status: &'static str,
    /// What the caller should do next, in words.
    response: &'a str,
    message: &'a str,
    session_id: &'a str,
    correlation_id: &'a str,
    /// Where the answer can be followed as it is written (SSE); with the
    /// run's stream token when the host requires keys, so that it opens
    /// this stream without one.
    stream_url: String,
    #[serde(rename = "thread_id")]
    thread_id_legacy: &'a str,
    #[serde(rename = "correlation_id")]
    correlation_id_legacy: &'a str,
    #[serde(rename = "stream_url")]
    stream_url_legacy: String,
}

impl<'a> RunAccepted<'a> {
    pub fn new(run: &'a RunRecord, note: &'a str, stream_token: Option<&str>) -> Self {
        let mut stream_url = format!(
            "/api/agents/{}/runs/{}/stream",
            run.agent, run.correlation_id
        );
        if let Some(token) = stream_token {
            stream_url.push_str("?token=");
            stream_url.push_str(token);
        }
        Self {
            status: "accepted",
            response: note,
            message: &run.message,
            session_id: &run.thread_id,
            correlation_id: &run.correlation_id,
            stream_url_legacy: stream_url.clone(),
            stream_url,
            thread_id_legacy: &run.thread_id,
            correlation_id_legacy: &run.correlation_id,
        }
    }
}

/// A run that waits for a human's decision on tool calls (`202`).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct RunAwaiting<'a> {
    status: &'static str,
    session_id: &'a str,
    correlation_id: &'a str,
    #[schema(value_type = Vec<super::schemas::PendingCallSchema>)]
    pending_approvals: Vec<PendingCall>,
    /// Where to post a decision: `{call_id, approved, reason?}`.
    approvals_url: String,
    run_url: String,
    #[serde(rename = "thread_id")]
    thread_id_legacy: &'a str,
    #[serde(rename = "correlation_id")]
    correlation_id_legacy: &'a str,
}

impl<'a> RunAwaiting<'a> {
    pub fn new(run: &'a RunRecord, pending: Vec<PendingCall>) -> Self {
        let run_url = format!("/api/agents/{}/runs/{}", run.agent, run.correlation_id);
        Self {
            status: "awaiting_approval",
            session_id: &run.thread_id,
            correlation_id: &run.correlation_id,
            pending_approvals: pending,
            approvals_url: format!("{run_url}/approvals"),
            run_url,
            thread_id_legacy: &run.thread_id,
            correlation_id_legacy: &run.correlation_id,
        }
    }
}

/// A run as `GET /api/agents/{name}/runs/{id}` shows it: camelCase, as every
/// other body, with the snake_case names it first had kept beside them.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct RunView<'a> {
    #[serde(rename = "correlationId")]
    correlation_id_camel: &'a str,
    correlation_id: &'a str,
    agent: &'a str,
    #[serde(rename = "sessionId")]
    session_id: &'a str,
    thread_id: &'a str,
    #[schema(value_type = super::schemas::RunStatusSchema)]
    status: RunStatus,
    message: &'a str,
    response: Option<Value>,
    error: Option<&'a str>,
    code: Option<&'a str>,
    #[schema(value_type = Option<super::schemas::UsageSchema>)]
    usage: Option<Usage>,
    #[serde(rename = "createdAt")]
    created_at_camel: Timestamp,
    created_at: Timestamp,
    #[serde(rename = "updatedAt")]
    updated_at_camel: Timestamp,
    updated_at: Timestamp,
    /// Tool calls the run waits for a human to decide on.
    #[serde(rename = "pendingApprovals", skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<super::schemas::PendingCallSchema>)]
    pending_approvals: Vec<PendingCall>,
    /// A caller asked the run to stop; it ends at its next step.
    #[serde(rename = "cancelRequested", skip_serializing_if = "std::ops::Not::not")]
    cancel_requested: bool,
}

impl<'a> RunView<'a> {
    /// The view of a run whose cancel request waits for its next step.
    pub fn cancel_requested(mut self) -> Self {
        self.cancel_requested = true;
        self
    }

    /// The run; waiting for decisions on `pending` calls if any.
    pub fn new(run: &'a RunRecord, pending: Vec<PendingCall>) -> Self {
        let status = if pending.is_empty() || run.status.is_finished() {
            run.status
        } else {
            RunStatus::AwaitingApproval
        };
        Self {
            cancel_requested: run.cancel_requested && !run.status.is_finished(),
            pending_approvals: pending,
            correlation_id_camel: &run.correlation_id,
            correlation_id: &run.correlation_id,
            agent: &run.agent,
            session_id: &run.thread_id,
            thread_id: &run.thread_id,
            status,
            message: &run.message,
            response: run.response.as_ref().map(|_| response_value(run)),
            error: run.error.as_deref(),
            code: run.error.as_ref().map(|_| error_code(run)),
            usage: run.usage,
            created_at_camel: Timestamp(run.created_at),
            created_at: Timestamp(run.created_at),
            updated_at_camel: Timestamp(run.updated_at),
            updated_at: Timestamp(run.updated_at),
        }
    }
}

/// The code of a failed run: what the agent loop recorded, else `run_failed`.
pub(super) fn error_code(run: &RunRecord) -> &str {
    run.error_code.as_deref().unwrap_or("run_failed")
}

/// A structured answer is returned as JSON, a text answer as a string.
fn response_value(run: &RunRecord) -> Value {
    let text = run.response.clone().unwrap_or_default();
    if run.response_format.is_some() {
        if let Ok(value) = serde_json::from_str(&text) {
            return value;
        }
    }
    Value::String(text)
}

/// `GET /api/health`.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct Health {
    #[schema(example = "healthy")]
    pub status: &'static str,
    /// Why the host cannot do its work now, or does it degraded (absent
    /// when healthy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub agents: Vec<AgentHealth>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(super) struct AgentHealth {
    pub name: String,
    pub status: &'static str,
}

/// A run answered 202: accepted to finish later, or waiting for decisions.
#[allow(dead_code)]
#[derive(ToSchema)]
#[serde(untagged)]
pub enum RunLater<'a> {
    Accepted(RunAccepted<'a>),
    Awaiting(RunAwaiting<'a>),
}
