//! Microsoft Agent Framework's agent sessions as durable entities
//! (`@dafx-{agent}@{session}`), for wasm agents this host serves: the shape
//! of the run request its clients send, and of the state they poll (the
//! conversation as request and response entries, schema 1.1.0), so that
//! an Agent Framework client runs a wasm agent by name and the
//! conversation is the agent's session here.

use serde_json::{json, Value};

/// The entity name prefix the Agent Framework gives agent sessions.
pub const PREFIX: &str = "dafx-";

/// What a `run` operation asks.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRequest {
    pub message: String,
    /// What the client polls the state for.
    pub correlation_id: String,
}

impl RunRequest {
    /// The request in a `run` operation's input; `None` when it is none.
    pub fn parse(input: Option<&str>) -> Option<Self> {
        let value: Value = serde_json::from_str(input?).ok()?;
        Some(Self {
            message: value.get("message")?.as_str()?.to_string(),
            correlation_id: value.get("correlationId")?.as_str()?.to_string(),
        })
    }
}

/// The state after one exchange: `state` (the entity's, if any) with the
/// request and its response (or the failure, as the Agent Framework keeps
/// one) appended. `at` is an RFC 3339 time.
pub fn with_exchange(
    state: Option<&str>,
    agent: &str,
    request: &RunRequest,
    answer: &Result<String, String>,
    at: &str,
) -> String {
    let mut state: Value = state
        .and_then(|s| serde_json::from_str(s).ok())
        .filter(|s: &Value| s["data"]["conversationHistory"].is_array())
        .unwrap_or_else(|| json!({"schemaVersion": "1.1.0", "data": {"conversationHistory": []}}));
    let content = match answer {
        Ok(text) => json!({"$type": "text", "text": text}),
        Err(why) => json!({"$type": "error", "message": why}),
    };
    let entries = [
        json!({
            "$type": "request",
            "correlationId": request.correlation_id,
            "createdAt": at,
            "messages": [{
                "role": "user",
                "contents": [{"$type": "text", "text": request.message}],
                "createdAt": at,
            }],
            "responseType": "text",
        }),
        json!({
            "$type": "response",
            "correlationId": request.correlation_id,
            "createdAt": at,
            "messages": [{"role": "assistant", "contents": [content], "authorName": agent}],
        }),
    ];
    if let Some(history) = state["data"]["conversationHistory"].as_array_mut() {
        history.extend(entries);
    }
    state.to_string()
}

/// A `run` operation's result, as the Agent Framework's `AgentResponse`
/// serializes (what an orchestration's `call_entity` receives).
pub fn response(agent: &str, text: &str) -> String {
    json!({
        "type": "agent_response",
        "messages": [{
            "type": "message",
            "role": "assistant",
            "contents": [{"type": "text", "text": text}],
            "author_name": agent,
        }],
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_request_and_the_state_are_the_agent_frameworks() {
        let input = r#"{"message":"hi","correlationId":"c1","role":"user","options":{}}"#;
        let request = RunRequest::parse(Some(input));
        assert_eq!(
            request,
            Some(RunRequest {
                message: "hi".into(),
                correlation_id: "c1".into()
            })
        );
        assert_eq!(RunRequest::parse(Some("{\"message\":1}")), None);
        assert_eq!(RunRequest::parse(None), None);
        let Some(request) = request else { return };
        let once = with_exchange(None, "writer", &request, &Ok("hello".into()), "t");
        let twice = with_exchange(Some(&once), "writer", &request, &Err("no".into()), "t");
        let state: Value = serde_json::from_str(&twice).unwrap_or_default();
        let history = &state["data"]["conversationHistory"];
        assert_eq!(state["schemaVersion"], "1.1.0");
        assert_eq!(history.as_array().map(Vec::len), Some(4));
        assert_eq!(history[1]["$type"], "response");
        assert_eq!(history[1]["correlationId"], "c1");
        assert_eq!(history[1]["messages"][0]["contents"][0]["text"], "hello");
        assert_eq!(history[3]["messages"][0]["contents"][0]["$type"], "error");
        let answered: Value =
            serde_json::from_str(&response("writer", "hello")).unwrap_or_default();
        assert_eq!(answered["messages"][0]["contents"][0]["text"], "hello");
    }
}
