//! The built-in offline model: deterministic answers when no endpoint is set.
//!
//! It exists so that a fresh `make run` serves every endpoint without a key,
//! and every answer says it is offline so nobody mistakes it for a real model.
//! A message `call TOOL with {json}` (or `call TOOL`) makes it call that tool
//! of the agent, then answer with what the tool returned: tools and approvals
//! work end to end with no model at all.

use serde_json::{json, Map, Value};

use super::{ChatMessage, ChatRequest, ChatResponse, Deltas, Role, Usage};
use crate::core::chat::{FunctionCall, ToolCall};

/// Prefix of every offline answer.
pub const OFFLINE_TAG: &str = "[offline model]";

/// The answer, handed to `deltas` in a few pieces as a streaming model would.
pub fn complete(request: &ChatRequest<'_>, deltas: &Deltas<'_>) -> ChatResponse {
    let asked = request
        .response_format
        .is_none()
        .then(|| asked_tool_call(request))
        .flatten();
    let content = match (asked, request.response_format.and_then(schema_of)) {
        (Some(Ok(call)), _) => {
            return ChatResponse {
                message: ChatMessage {
                    role: Role::Assistant,
                    content: None,
                    tool_calls: vec![call],
                    tool_call_id: None,
                },
                usage: usage_of(request, ""),
            }
        }
        (Some(Err(refusal)), _) => refusal,
        (None, Some(schema)) => example_of(schema).to_string(),
        (None, None) => text_answer(request.messages),
    };
    for piece in pieces(&content, 4) {
        deltas(piece);
    }
    let usage = usage_of(request, &content);
    ChatResponse {
        message: ChatMessage::assistant(content),
        usage,
    }
}

/// Tokens counted as a model would, roughly: four characters a token.
fn usage_of(request: &ChatRequest<'_>, answer: &str) -> Usage {
    let prompt_chars: usize = request
        .messages
        .iter()
        .map(|m| m.content.as_deref().map_or(0, str::len))
        .sum();
    let prompt_tokens = (prompt_chars as u64).div_ceil(4);
    let completion_tokens = (answer.len() as u64).div_ceil(4);
    Usage {
        prompt_tokens,
        completion_tokens,
        total_tokens: prompt_tokens + completion_tokens,
    }
}

/// The tool call a last message `call TOOL with {json}` (or `call TOOL`,
/// with `{}`) asks for; `Err` with the answer when TOOL is not one of the
/// agent's tools. `None` for any other message.
fn asked_tool_call(request: &ChatRequest<'_>) -> Option<Result<ToolCall, String>> {
    let last = request.messages.last().filter(|m| m.role == Role::User)?;
    let rest = last.content.as_deref()?.trim().strip_prefix("call ")?;
    let (name, arguments) = match rest.split_once(" with ") {
        Some((name, arguments)) => (name.trim(), arguments.trim()),
        None => (rest.trim(), "{}"),
    };
    // Ordinary text that starts with "call" ("call me with details") is
    // not a request: one word for the tool, a JSON object for its arguments.
    let is_object = serde_json::from_str::<Value>(arguments).is_ok_and(|v| v.is_object());
    if !is_object || name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    if !request.tools.iter().any(|t| t.name == name) {
        let tools: Vec<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
        return Some(Err(format!(
            "{OFFLINE_TAG} This agent has no tool named '{name}' (its tools: {}). \
             Write `call TOOL with {{\"argument\": …}}` to call one.",
            if tools.is_empty() {
                "none".to_string()
            } else {
                tools.join(", ")
            }
        )));
    }
    Some(Ok(ToolCall {
        id: format!("call_{name}"),
        kind: "function".into(),
        function: FunctionCall {
            name: name.to_string(),
            arguments: arguments.to_string(),
        },
    }))
}

/// `text` cut into `n` pieces or fewer, at character boundaries.
fn pieces(text: &str, n: usize) -> Vec<&str> {
    let size = text.len().div_ceil(n.max(1)).max(1);
    let mut pieces = Vec::with_capacity(n);
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + size).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        pieces.push(&text[start..end]);
        start = end;
    }
    pieces
}

fn text_answer(messages: &[ChatMessage]) -> String {
    let turn = messages.iter().filter(|m| m.role == Role::User).count();
    let last = messages.last();
    if let Some(tool) = last.filter(|m| m.role == Role::Tool) {
        return format!(
            "{OFFLINE_TAG} The tool returned: {}",
            tool.content.as_deref().unwrap_or_default()
        );
    }
    let said = last.and_then(|m| m.content.as_deref()).unwrap_or_default();
    format!(
        "{OFFLINE_TAG} No model endpoint is configured, so this is a canned answer \
         (turn {turn} of this conversation). You said: \"{said}\""
    )
}

/// The JSON Schema inside an OpenAI `response_format` of type `json_schema`.
fn schema_of(format: &Value) -> Option<&Value> {
    match format.get("type")?.as_str()? {
        "json_schema" => format.get("json_schema")?.get("schema"),
        "json_object" => Some(&Value::Null),
        _ => None,
    }
}

/// A minimal value that satisfies common schemas: each required property with
/// its type's zero value (the first enum value when there is one).
fn example_of(schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(|e| e.as_array())
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    let kind = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => "object",
    };
    match kind {
        "string" => json!("offline"),
        "integer" | "number" => json!(0),
        "boolean" => json!(false),
        "array" => json!([]),
        "null" => Value::Null,
        _ => {
            let mut object = Map::new();
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (name, prop) in props {
                    object.insert(name.clone(), example_of(prop));
                }
            }
            Value::Object(object)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_requests_get_a_value_of_the_schema() {
        let format = json!({"type": "json_schema", "json_schema": {"name": "v", "schema": {
            "type": "object",
            "properties": {"is_spam": {"type": "boolean"}, "confidence": {"type": "number"},
                           "reason": {"type": "string"}, "kind": {"enum": ["a", "b"]}}
        }}});
        let request = ChatRequest {
            model: None,
            messages: &[],
            tools: &[],
            response_format: Some(&format),
            temperature: None,
            max_output_tokens: None,
            timeout: None,
            send_by: None,
        };
        let answer: Value = serde_json::from_str(
            complete(&request, &|_| {})
                .message
                .content
                .as_deref()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            answer,
            json!({"is_spam": false, "confidence": 0, "reason": "offline", "kind": "a"})
        );
    }

    #[test]
    fn a_call_message_calls_the_tool_and_the_answer_tells_its_result() {
        let tools = [crate::core::chat::ToolSpec {
            name: "refund".into(),
            description: String::new(),
            parameters: json!({}),
        }];
        let ask = |messages: &[ChatMessage]| {
            complete(
                &ChatRequest {
                    model: None,
                    messages,
                    tools: &tools,
                    response_format: None,
                    temperature: None,
                    max_output_tokens: None,
                    timeout: None,
                    send_by: None,
                },
                &|_| {},
            )
            .message
        };
        let asked = ask(&[ChatMessage::user("call refund with {\"order\": \"A1\"}")]);
        assert_eq!(asked.tool_calls.len(), 1);
        assert_eq!(asked.tool_calls[0].id, "call_refund");
        assert_eq!(asked.tool_calls[0].function.name, "refund");
        assert_eq!(
            asked.tool_calls[0].function.arguments,
            "{\"order\": \"A1\"}"
        );
        let bare = ask(&[ChatMessage::user("call refund")]);
        assert_eq!(bare.tool_calls[0].function.arguments, "{}");
        for ordinary in ["call me with details", "call refund with my order", "call"] {
            let answer = ask(&[ChatMessage::user(ordinary)]);
            assert!(answer.tool_calls.is_empty(), "{ordinary}");
            assert!(
                answer.content.unwrap_or_default().contains("canned answer"),
                "{ordinary}"
            );
        }
        let unknown = ask(&[ChatMessage::user("call nothing with {}")]);
        assert!(unknown.tool_calls.is_empty());
        let text = unknown.content.unwrap_or_default();
        assert!(
            text.contains("no tool named 'nothing'") && text.contains("refund"),
            "{text}"
        );
        let answered = ask(&[
            ChatMessage::user("call refund"),
            asked,
            ChatMessage::tool_result("call_refund", "{\"refunded\":\"A1\"}"),
        ]);
        let text = answered.content.unwrap_or_default();
        assert!(
            text.contains("The tool returned: {\"refunded\":\"A1\"}"),
            "{text}"
        );
    }

    #[test]
    fn text_answers_are_tagged_and_count_turns() {
        let messages = [
            ChatMessage::user("a"),
            ChatMessage::assistant("b"),
            ChatMessage::user("hi"),
        ];
        let request = ChatRequest {
            model: None,
            messages: &messages,
            tools: &[],
            response_format: None,
            temperature: None,
            max_output_tokens: None,
            timeout: None,
            send_by: None,
        };
        let streamed = std::sync::Mutex::new(Vec::new());
        let text = complete(&request, &|piece| {
            streamed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(piece.to_string())
        })
        .message
        .content
        .unwrap();
        assert!(text.starts_with(OFFLINE_TAG), "{text}");
        assert!(text.contains("turn 2") && text.contains("\"hi\""), "{text}");
        let streamed = streamed.into_inner().unwrap_or_else(|p| p.into_inner());
        assert_eq!(streamed.len(), 4, "streamed in a few pieces");
        assert_eq!(streamed.concat(), text);
    }
}
