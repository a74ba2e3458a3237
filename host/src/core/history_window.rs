//! Which part of a long conversation is sent to the model. The stored
//! history stays whole; the model sees the newest whole turns that fit the
//! agent's budget. A turn begins at a user message and holds everything up
//! to the next one (answers, tool calls and their results), so cutting only
//! at turn starts never separates a tool call from its result. The system
//! message is not part of the history: the caller always puts it first.
//! The newest turn is always sent, even alone over the budget: the model
//! must see the question. The budget applies to tool results too: while the
//! turns sent are over it, their oldest tool results are left out (each
//! replaced by a short note), so a turn of many large results is not sent
//! whole.

use super::chat::{ChatMessage, Role};

/// Tokens a message costs beyond its text (role, separators), as OpenAI
/// counts them roughly.
const PER_MESSAGE: usize = 4;

/// An estimate of a message's tokens: about four characters a token, which
/// is what the OpenAI tokenizers average on English text and JSON.
pub fn estimate(message: &ChatMessage) -> usize {
    let chars = message.content.as_deref().map_or(0, str::len)
        + message
            .tool_calls
            .iter()
            .map(|c| c.function.name.len() + c.function.arguments.len() + c.id.len())
            .sum::<usize>()
        + message.tool_call_id.as_deref().map_or(0, str::len);
    PER_MESSAGE + chars.div_ceil(4)
}

/// The index of the first message to send: the start of the oldest turn
/// such that it and every newer one fit in `budget` tokens.
pub fn start(history: &[ChatMessage], budget: usize) -> usize {
    let mut used = 0usize;
    let mut start: Option<usize> = None;
    // Tokens of the turn being read (backwards) since its last message.
    let mut turn = 0usize;
    for (i, message) in history.iter().enumerate().rev() {
        turn += estimate(message);
        if message.role == Role::User {
            if start.is_some() && used + turn > budget {
                return start.unwrap_or(i);
            }
            used += turn;
            turn = 0;
            start = Some(i);
        }
    }
    // Reached the beginning: messages before the first user message (an
    // old store's) come along if they fit; a history with no user message
    // at all cannot be cut at a turn and goes whole.
    match start {
        Some(first) if turn > 0 && used + turn > budget => first,
        _ => 0,
    }
}

/// Leaves out the content of tool results of `window` (the messages
/// [`start`] chose), oldest first, while the window is over `budget`: the
/// newest turn is sent even over the budget, and a turn of tool rounds can
/// gather results far over it. Each result left out is replaced by a short
/// tool error saying so (the model must still see one result per call).
/// Returns how many were left out.
pub fn leave_out_tool_results(window: &mut [ChatMessage], budget: usize) -> usize {
    let mut used: usize = window.iter().map(estimate).sum();
    let mut left_out = 0;
    for message in window.iter_mut() {
        if used <= budget {
            break;
        }
        if message.role != Role::Tool {
            continue;
        }
        let bytes = message.content.as_deref().map_or(0, str::len);
        let note = serde_json::json!({
            "error": format!(
                "this tool result ({bytes} bytes) was left out: the conversation is over \
                 its history budget of {budget} tokens"
            )
        })
        .to_string();
        // A result not much longer than its note is kept: leaving it out
        // would save little (and a note is never replaced by a note).
        if bytes <= 2 * note.len() {
            continue;
        }
        let before = estimate(message);
        message.content = Some(note);
        used = used - before + estimate(message);
        left_out += 1;
    }
    left_out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::chat::{FunctionCall, ToolCall};

    fn user(text: &str) -> ChatMessage {
        ChatMessage::user(text)
    }

    fn answer(text: &str) -> ChatMessage {
        ChatMessage::assistant(text)
    }

    fn call(id: &str) -> ChatMessage {
        let mut m = ChatMessage::assistant("");
        m.content = None;
        m.tool_calls = vec![ToolCall {
            id: id.into(),
            kind: "function".into(),
            function: FunctionCall {
                name: "get_weather".into(),
                arguments: "{\"city\":\"Oslo\"}".into(),
            },
        }];
        m
    }

    fn result(id: &str) -> ChatMessage {
        ChatMessage::tool_result(id, "{\"temperature\": 3}")
    }

    fn tokens(history: &[ChatMessage]) -> usize {
        history.iter().map(estimate).sum()
    }

    #[test]
    fn everything_is_sent_when_it_fits() {
        let history = [user("a"), answer("b"), user("c")];
        assert_eq!(start(&history, 1_000), 0);
    }

    #[test]
    fn the_oldest_whole_turns_go_first_and_the_window_starts_at_a_user_message() {
        let mut history = Vec::new();
        for i in 0..50 {
            history.push(user(&format!("question {i} {}", "x".repeat(40))));
            if i % 3 == 0 {
                history.push(call(&format!("c{i}")));
                history.push(result(&format!("c{i}")));
            }
            history.push(answer(&format!("answer {i} {}", "y".repeat(40))));
        }
        history.push(user("the last question"));
        for budget in [30, 100, 250, 600, 1_000] {
            let from = start(&history, budget);
            let window = &history[from..];
            assert_eq!(window[0].role, Role::User, "budget {budget}");
            assert!(
                tokens(window) <= budget
                    || window.iter().filter(|m| m.role == Role::User).count() == 1,
                "budget {budget}: {} tokens",
                tokens(window)
            );
            // No tool result without the call before it in the window.
            for (i, m) in window.iter().enumerate() {
                if let Some(id) = &m.tool_call_id {
                    assert!(
                        window[..i]
                            .iter()
                            .any(|c| c.tool_calls.iter().any(|t| &t.id == id)),
                        "budget {budget}: result {id} without its call"
                    );
                }
            }
            // The next older turn would not have fit.
            if from > 0 {
                let older = history[..from]
                    .iter()
                    .rposition(|m| m.role == Role::User)
                    .unwrap_or(0);
                assert!(tokens(&history[older..]) > budget, "budget {budget}");
            }
        }
    }

    #[test]
    fn the_newest_turn_is_sent_even_alone_over_the_budget() {
        let history = [user("old"), answer("old"), user(&"long ".repeat(400))];
        assert_eq!(start(&history, 10), 2);
    }

    #[test]
    fn tool_results_are_left_out_oldest_first_until_the_newest_turn_fits() {
        let big = "x".repeat(4_000);
        let mut window = vec![
            user("read both"),
            call("c1"),
            ChatMessage::tool_result("c1", big.clone()),
            call("c2"),
            ChatMessage::tool_result("c2", big.clone()),
        ];
        // Fits one result (about 1,000 tokens) and not two.
        assert_eq!(leave_out_tool_results(&mut window, 1_500), 1);
        assert!(window[2]
            .content
            .as_deref()
            .is_some_and(|c| c.contains("4000 bytes") && c.contains("left out")));
        assert_eq!(window[4].content.as_deref(), Some(big.as_str()));
        assert!(tokens(&window) <= 1_500);
        // Under a budget nothing fits, every result goes; the calls stay.
        assert_eq!(leave_out_tool_results(&mut window, 10), 1);
        assert_eq!(window.iter().filter(|m| m.tool_calls.len() == 1).count(), 2);
        // Within the budget nothing changes.
        let mut small = vec![user("a"), call("c"), result("c")];
        assert_eq!(leave_out_tool_results(&mut small, 1_000), 0);
        assert_eq!(small[2].content.as_deref(), Some("{\"temperature\": 3}"));
    }
}
