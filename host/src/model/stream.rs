//! Streamed chat completions: the `chat.completion.chunk` objects of an
//! OpenAI-compatible or Azure endpoint's server-sent events, put back
//! together into the one message the non-streamed call would have given.
//! Text deltas are handed on as they arrive; tool calls arrive in pieces
//! (an id and a name first, then fragments of the arguments, each keyed by
//! the call's index) and are only complete at the end.

use serde::Deserialize;

use super::{ChatMessage, ChatResponse, ModelError, Role, ToolCall, Usage};
use crate::core::chat::FunctionCall;

/// One `data:` object of the stream.
#[derive(Debug, Deserialize)]
pub(super) struct Chunk {
    #[serde(default)]
    choices: Vec<ChunkChoice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Debug, Deserialize)]
struct ChunkChoice {
    #[serde(default)]
    delta: Delta,
}

#[derive(Debug, Default, Deserialize)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCallDelta>,
}

#[derive(Debug, Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: usize,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Debug, Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

/// The message being put together from the chunks received so far.
#[derive(Debug, Default)]
pub(super) struct Assembly {
    content: String,
    calls: Vec<(String, String, String)>,
    usage: Option<Usage>,
}

impl Assembly {
    /// Takes in one chunk; returns its text, if it carried any.
    pub fn take(&mut self, chunk: Chunk) -> Option<String> {
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage);
        }
        let mut text = String::new();
        for choice in chunk.choices {
            if let Some(content) = choice.delta.content {
                text.push_str(&content);
            }
            for call in choice.delta.tool_calls {
                if self.calls.len() <= call.index {
                    self.calls.resize(call.index + 1, Default::default());
                }
                let (id, name, arguments) = &mut self.calls[call.index];
                if let Some(part) = call.id {
                    id.push_str(&part);
                }
                if let Some(function) = call.function {
                    name.push_str(function.name.as_deref().unwrap_or_default());
                    arguments.push_str(function.arguments.as_deref().unwrap_or_default());
                }
            }
        }
        self.content.push_str(&text);
        (!text.is_empty()).then_some(text)
    }

    /// The whole message, once the stream ended.
    pub fn finish(self) -> Result<ChatResponse, ModelError> {
        let tool_calls = self
            .calls
            .into_iter()
            .filter(|(_, name, _)| !name.is_empty())
            .enumerate()
            .map(|(i, (id, name, arguments))| ToolCall {
                id: if id.is_empty() {
                    format!("call_{i}")
                } else {
                    id
                },
                kind: "function".into(),
                function: FunctionCall { name, arguments },
            })
            .collect();
        Ok(ChatResponse {
            message: ChatMessage {
                role: Role::Assistant,
                content: (!self.content.is_empty()).then_some(self.content),
                tool_calls,
                tool_call_id: None,
            },
            usage: self.usage.unwrap_or_default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(json: &str) -> Chunk {
        serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    #[test]
    fn text_deltas_are_handed_on_and_joined() -> Result<(), ModelError> {
        let mut assembly = Assembly::default();
        let role = chunk(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#);
        assert_eq!(assembly.take(role), None);
        let a = chunk(r#"{"choices":[{"index":0,"delta":{"content":"Hello"}}]}"#);
        assert_eq!(assembly.take(a).as_deref(), Some("Hello"));
        let b = chunk(
            r#"{"choices":[{"index":0,"delta":{"content":", world"},"finish_reason":null}]}"#,
        );
        assert_eq!(assembly.take(b).as_deref(), Some(", world"));
        let usage = chunk(
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}"#,
        );
        assert_eq!(assembly.take(usage), None);
        let done = assembly.finish()?;
        assert_eq!(done.message.content.as_deref(), Some("Hello, world"));
        assert!(done.message.tool_calls.is_empty());
        assert_eq!(done.usage.total_tokens, 5);
        Ok(())
    }

    #[test]
    fn tool_calls_are_put_together_from_their_fragments_by_index() -> Result<(), ModelError> {
        let mut assembly = Assembly::default();
        for json in [
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get_weather","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"id":"call_b","function":{"name":"now","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Oslo\"}"}}]}}]}"#,
        ] {
            assert_eq!(assembly.take(chunk(json)), None, "no text in a tool call");
        }
        let done = assembly.finish()?;
        assert_eq!(done.message.content, None);
        let calls: Vec<_> = done
            .message
            .tool_calls
            .iter()
            .map(|c| {
                (
                    c.id.as_str(),
                    c.function.name.as_str(),
                    c.function.arguments.as_str(),
                )
            })
            .collect();
        assert_eq!(
            calls,
            [
                ("call_a", "get_weather", r#"{"city":"Oslo"}"#),
                ("call_b", "now", "{}")
            ]
        );
        Ok(())
    }
}
