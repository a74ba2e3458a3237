//! Runs as A2A 1.0 tasks, in the protocol's JSON (camelCase keys, enum
//! names, RFC 3339 times): a task is a run (its correlation id), its
//! context the run's session. The answer is the `answer` artifact (text,
//! or a `data` part for structured output); a run waiting for a human is
//! `INPUT_REQUIRED`, its status message listing the calls to decide.

use chrono::{SecondsFormat, TimeZone, Utc};
use serde_json::{json, Value};

use crate::runs::{PendingCall, RunRecord, RunStatus};

/// The one artifact of a task: the agent's answer.
pub(super) const ANSWER: &str = "answer";

pub(super) fn timestamp(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms)
        .single()
        .unwrap_or_else(Utc::now)
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The task state of a run (waiting on `pending` calls if any).
pub(super) fn state_of(run: &RunRecord, pending: &[PendingCall]) -> &'static str {
    match run.status {
        RunStatus::Completed => "TASK_STATE_COMPLETED",
        RunStatus::Canceled => "TASK_STATE_CANCELED",
        // The agent's answer never matched the schema asked for: refused.
        RunStatus::Failed if run.error_code.as_deref() == Some("invalid_structured_output") => {
            "TASK_STATE_REJECTED"
        }
        RunStatus::Failed => "TASK_STATE_FAILED",
        RunStatus::AwaitingApproval => "TASK_STATE_INPUT_REQUIRED",
        RunStatus::Pending | RunStatus::Running if !pending.is_empty() => {
            "TASK_STATE_INPUT_REQUIRED"
        }
        RunStatus::Pending | RunStatus::Running => "TASK_STATE_WORKING",
    }
}

fn agent_message(run: &RunRecord, kind: &str, parts: Vec<Value>) -> Value {
    json!({
        "messageId": format!("{}-{kind}", run.correlation_id),
        "role": "ROLE_AGENT",
        "contextId": run.thread_id,
        "taskId": run.correlation_id,
        "parts": parts,
    })
}

/// The answer's parts: a structured answer as data, else text.
fn answer_parts(run: &RunRecord) -> Vec<Value> {
    let text = run.response.clone().unwrap_or_default();
    if run.response_format.is_some() {
        if let Ok(value) = serde_json::from_str::<Value>(&text) {
            return vec![json!({"data": value, "mediaType": "application/json"})];
        }
    }
    vec![json!({ "text": text })]
}

pub(super) fn status(run: &RunRecord, pending: &[PendingCall], state: &str) -> Value {
    let mut status = json!({"state": state, "timestamp": timestamp(run.updated_at)});
    let message = match state {
        "TASK_STATE_INPUT_REQUIRED" => {
            let calls: Vec<String> = pending
                .iter()
                .map(|c| format!("{} ({})", c.tool, c.call_id))
                .collect();
            Some(agent_message(
                run,
                "input",
                vec![
                    json!({"text": format!(
                        "waiting for a decision on {}: send a message on this task with a data part {{\"approvals\": [{{\"callId\", \"approved\", \"reason\"}}]}}",
                        calls.join(", ")
                    )}),
                    json!({"data": {"pendingApprovals": pending}, "mediaType": "application/json"}),
                ],
            ))
        }
        "TASK_STATE_FAILED" | "TASK_STATE_REJECTED" | "TASK_STATE_CANCELED" => {
            let error = run.error.clone().unwrap_or_else(|| "the run failed".into());
            Some(agent_message(run, "status", vec![json!({ "text": error })]))
        }
        _ => None,
    };
    if let Some(message) = message {
        status["message"] = message;
    }
    status
}

/// How much of a task to show.
#[derive(Debug, Clone, Copy)]
pub(super) struct Shown {
    /// The last N messages of its history; all when `None`.
    pub history: Option<usize>,
    pub artifacts: bool,
}

impl Shown {
    pub const ALL: Shown = Shown {
        history: None,
        artifacts: true,
    };
}

/// The task of `run`, waiting on `pending` calls if any.
pub(super) fn task(run: &RunRecord, pending: &[PendingCall], shown: Shown) -> Value {
    task_in(run, pending, state_of(run, pending), shown)
}

/// The task of `run` in `state` (a run just queued is `SUBMITTED`).
pub(super) fn task_in(
    run: &RunRecord,
    pending: &[PendingCall],
    state: &str,
    shown: Shown,
) -> Value {
    let mut task = json!({
        "id": run.correlation_id,
        "contextId": run.thread_id,
        "status": status(run, pending, state),
    });
    let completed = run.status == RunStatus::Completed;
    if completed && shown.artifacts {
        task["artifacts"] =
            json!([{"artifactId": ANSWER, "name": ANSWER, "parts": answer_parts(run)}]);
    }
    let mut history = vec![json!({
        "messageId": format!("{}-user", run.correlation_id),
        "role": "ROLE_USER",
        "contextId": run.thread_id,
        "taskId": run.correlation_id,
        "parts": [{"text": run.message}],
    })];
    if completed {
        history.push(agent_message(run, "answer", answer_parts(run)));
    }
    if let Some(keep) = shown.history {
        let from = history.len().saturating_sub(keep);
        history.drain(..from);
    }
    if !history.is_empty() {
        task["history"] = Value::Array(history);
    }
    task
}

/// An update of a task's state, for a stream.
pub(super) fn status_update(run: &RunRecord, pending: &[PendingCall]) -> Value {
    let state = state_of(run, pending);
    json!({"statusUpdate": {
        "taskId": run.correlation_id,
        "contextId": run.thread_id,
        "status": status(run, pending, state),
    }})
}

/// A piece of the answer, for a stream: `append` after the first piece.
pub(super) fn artifact_update(
    task: &str,
    context: &str,
    text: &str,
    append: bool,
    last: bool,
) -> Value {
    json!({"artifactUpdate": {
        "taskId": task,
        "contextId": context,
        "artifact": {"artifactId": ANSWER, "name": ANSWER, "parts": [{"text": text}]},
        "append": append,
        "lastChunk": last,
    }})
}

/// The run status a task state filter selects.
pub(super) fn status_filter(state: &str) -> Option<RunStatus> {
    Some(match state {
        "TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING" => RunStatus::Pending,
        "TASK_STATE_INPUT_REQUIRED" => RunStatus::AwaitingApproval,
        "TASK_STATE_COMPLETED" => RunStatus::Completed,
        "TASK_STATE_FAILED" | "TASK_STATE_REJECTED" => RunStatus::Failed,
        "TASK_STATE_CANCELED" => RunStatus::Canceled,
        _ => return None,
    })
}
