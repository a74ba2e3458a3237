//! Long threads: a 2,000-turn conversation (tool rounds among its turns)
//! where every request succeeds, the model gets a window of whole turns
//! within the budget (never a tool result without its call), and the
//! stored conversation stays whole: paging returns every message.

use serde_json::{json, Value};

use crate::support::{client, FakeModel, HostBuilder, Reply};

const TURNS: usize = 2_000;
const BUDGET: usize = 400;

/// The host's estimate: about four characters a token, four more a message.
fn tokens(message: &Value) -> usize {
    let text = message["content"].as_str().map_or(0, str::len)
        + message["tool_calls"].as_array().map_or(0, |calls| {
            calls
                .iter()
                .map(|c| {
                    c["id"].as_str().map_or(0, str::len)
                        + c["function"]["name"].as_str().map_or(0, str::len)
                        + c["function"]["arguments"].as_str().map_or(0, str::len)
                })
                .sum()
        })
        + message["tool_call_id"].as_str().map_or(0, str::len);
    4 + text.div_ceil(4)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_2000_turn_thread_works_within_the_budget_and_keeps_every_message() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk")
        .arg("--history-budget-tokens")
        .arg(&BUDGET.to_string())
        .start();
    let http = client();
    let mut tool_turns = 0;
    for turn in 0..TURNS {
        if turn % 25 == 0 {
            model.push(Reply::ToolCall(
                "get_weather".into(),
                json!({"city": "Oslo"}),
            ));
            model.push(Reply::ToolResult);
            tool_turns += 1;
        }
        let response = http
            .post(host.url("/api/agents/weather/run"))
            .json(&json!({"message": format!("turn {turn}: how is the weather?"), "sessionId": "long"}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "turn {turn}");
    }
    let requests = model.requests();
    assert_eq!(requests.len(), TURNS + tool_turns);
    let mut cut = 0;
    for (i, request) in requests.iter().enumerate() {
        let messages = request.messages();
        assert_eq!(
            messages[0]["role"], "system",
            "request {i}: the system message is kept"
        );
        let window = &messages[1..];
        assert_eq!(
            window[0]["role"], "user",
            "request {i}: the window starts at a whole turn"
        );
        let users = window.iter().filter(|m| m["role"] == "user").count();
        let used: usize = window.iter().map(tokens).sum();
        assert!(
            used <= BUDGET || users == 1,
            "request {i}: {used} tokens over {BUDGET}"
        );
        for (j, m) in window.iter().enumerate() {
            if let Some(id) = m["tool_call_id"].as_str() {
                let called = window[..j].iter().any(|c| {
                    c["tool_calls"]
                        .as_array()
                        .is_some_and(|calls| calls.iter().any(|t| t["id"] == id))
                });
                assert!(called, "request {i}: tool result {id} without its call");
            }
        }
        if window.len() < messages.len() - 1 || users < i / 2 {
            cut += 1;
        }
    }
    assert!(
        cut > TURNS / 2,
        "long threads were cut to the budget ({cut} requests)"
    );

    // The stored conversation is whole.
    let mut after = 0;
    let mut stored = 0;
    loop {
        let page: Value = http
            .get(host.url(&format!(
                "/api/agents/weather/sessions/long?limit=1000&after={after}"
            )))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        stored += page["messages"].as_array().unwrap().len();
        match page["next"].as_i64() {
            Some(next) => after = next,
            None => break,
        }
    }
    assert_eq!(stored, TURNS * 2 + tool_turns * 2);
}
