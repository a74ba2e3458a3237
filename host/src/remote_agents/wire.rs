//! A2A 1.0's JSON as the client reads it: the card's interfaces, a task's
//! state and its answer (artifact parts, else the status message).

use serde_json::Value;

use super::Sent;

/// Where a remote task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskState {
    /// Submitted or working: it goes on by itself.
    Working,
    /// It waits for input (agenthost: a human's decision on a tool call).
    InputRequired,
    Completed,
    /// Failed, canceled, rejected, or waiting for authentication (which
    /// this client cannot give): the call fails with the state's name.
    Ended(&'static str),
}

/// A remote task as `GetTask` or `SendMessage` returns it.
#[derive(Debug, Clone)]
pub(crate) struct RemoteTask {
    pub id: String,
    pub state: TaskState,
    /// The task's `status` object as sent (state, message, timestamp).
    pub status: Value,
    /// The answer: the artifacts' parts (text as is, data as JSON text),
    /// else the status message's.
    pub answer: String,
}

/// The URL of the first JSON-RPC interface of A2A 1.x in the card's
/// `supportedInterfaces` (a 0.3 card, which has none, is refused).
pub(super) fn jsonrpc_endpoint(card: &Value) -> Result<String, String> {
    if !card.is_object() {
        return Err("is not a JSON object".into());
    }
    let speaks = |i: &Value| {
        let binding = i
            .get("protocolBinding")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let version = i
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or("1.0");
        binding.eq_ignore_ascii_case("JSONRPC") && version.split('.').next() == Some("1")
    };
    card.get("supportedInterfaces")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|i| speaks(i))
        .and_then(|i| i.get("url").and_then(Value::as_str))
        .map(str::to_string)
        .ok_or_else(|| "names no JSON-RPC interface of A2A 1.x in supportedInterfaces".into())
}

/// `SendMessage`'s result: `{"task": …}` or `{"message": …}`.
pub(super) fn sent(result: &Value) -> Result<Sent, String> {
    if let Some(task_json) = result.get("task") {
        return task(task_json).map(Sent::Task);
    }
    if let Some(message) = result.get("message") {
        return Ok(Sent::Answered(parts_text(message.get("parts"))));
    }
    Err("SendMessage returned neither a task nor a message".into())
}

pub(super) fn task(value: &Value) -> Result<RemoteTask, String> {
    let id = value
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or("a task without an id")?
        .to_string();
    let status = value.get("status").cloned().unwrap_or(Value::Null);
    let state = match status.get("state").and_then(Value::as_str) {
        Some("TASK_STATE_SUBMITTED" | "TASK_STATE_WORKING") => TaskState::Working,
        Some("TASK_STATE_INPUT_REQUIRED") => TaskState::InputRequired,
        Some("TASK_STATE_COMPLETED") => TaskState::Completed,
        Some("TASK_STATE_FAILED") => TaskState::Ended("failed"),
        Some("TASK_STATE_CANCELED") => TaskState::Ended("canceled"),
        Some("TASK_STATE_REJECTED") => TaskState::Ended("rejected"),
        Some("TASK_STATE_AUTH_REQUIRED") => TaskState::Ended("waiting for authentication"),
        Some(other) => return Err(format!("task '{id}' is in an unknown state '{other}'")),
        None => return Err(format!("task '{id}' has no status.state")),
    };
    let from_artifacts: Vec<String> = value
        .get("artifacts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|a| parts_text(a.get("parts")))
        .filter(|t| !t.is_empty())
        .collect();
    let answer = if from_artifacts.is_empty() {
        parts_text(status.get("message").and_then(|m| m.get("parts")))
    } else {
        from_artifacts.join("\n")
    };
    Ok(RemoteTask {
        id,
        state,
        status,
        answer,
    })
}

/// The parts' text, one per line: text as is, data as its JSON.
fn parts_text(parts: Option<&Value>) -> String {
    parts
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|part| match (part.get("text"), part.get("data")) {
            (Some(Value::String(text)), _) => Some(text.clone()),
            (_, Some(data)) => Some(data.to_string()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_jsonrpc_interface_of_a_1x_card_is_the_endpoint() {
        let card = json!({"supportedInterfaces": [
            {"url": "http://a/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": "http://a/old", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "http://a/rpc", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ]});
        assert_eq!(jsonrpc_endpoint(&card).as_deref(), Ok("http://a/rpc"));
        let rest_only =
            json!({"supportedInterfaces": [{"url": "x", "protocolBinding": "HTTP+JSON"}]});
        assert!(jsonrpc_endpoint(&rest_only).is_err());
        assert!(jsonrpc_endpoint(&json!([])).is_err());
    }

    #[test]
    fn a_tasks_answer_is_its_artifacts_else_its_status_message() {
        let done = task(&json!({
            "id": "t1",
            "status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [{"parts": [{"text": "hello"}, {"data": {"n": 1}}]}],
        }))
        .unwrap();
        assert_eq!(done.state, TaskState::Completed);
        assert_eq!(done.answer, "hello\n{\"n\":1}");
        let failed = task(&json!({
            "id": "t2",
            "status": {"state": "TASK_STATE_FAILED", "message": {"parts": [{"text": "no model"}]}},
        }))
        .unwrap();
        assert_eq!(failed.state, TaskState::Ended("failed"));
        assert_eq!(failed.answer, "no model");
        assert!(task(&json!({"id": "t3", "status": {"state": "TASK_STATE_BOGUS"}})).is_err());
        assert!(task(&json!({"status": {"state": "TASK_STATE_WORKING"}})).is_err());
    }

    #[test]
    fn a_message_answer_needs_no_task() {
        match sent(&json!({"message": {"parts": [{"text": "hi"}]}})) {
            Ok(Sent::Answered(text)) => assert_eq!(text, "hi"),
            other => panic!("{other:?}"),
        }
        assert!(sent(&json!({})).is_err());
    }
}
