//! The built-in offline model: deterministic answers when no endpoint is set.
//!
//! It exists so that a fresh `make run` serves every endpoint without a key,
//! and every answer says it is offline so nobody mistakes it for a real model.

use serde_json::{json, Map, Value};

use super::{ChatMessage, ChatRequest, ChatResponse, Deltas, Role, Usage};

/// Prefix of every offline answer.
pub const OFFLINE_TAG: &str = "[offline model]";

/// The answer, handed to `deltas` in a few pieces as a streaming model would.
pub fn complete(request: &ChatRequest<'_>, deltas: &Deltas<'_>) -> ChatResponse {
    let content = match request.response_format.and_then(schema_of) {
        Some(schema) => example_of(schema).to_string(),
        None => text_answer(request.messages),
    };
    for piece in pieces(&content, 4) {
        deltas(piece);
    }
    let prompt_chars: usize = request
        .messages
        .iter()
        .map(|m| m.content.as_deref().map_or(0, str::len))
        .sum();
    let prompt_tokens = (prompt_chars as u64).div_ceil(4);
    let completion_tokens = (content.len() as u64).div_ceil(4);
    ChatResponse {
        message: ChatMessage::assistant(content),
        usage: Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
        },
    }
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
