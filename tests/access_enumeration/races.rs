//! A new conversation named by two keys at the same moment, over HTTP,
//! A2A and MCP: one of them has it, the other gets the refusal, and the
//! conversation holds one caller's message alone. (A few rounds each: the
//! race's own attack test runs it a hundred times.)

use std::time::Duration;

use serde_json::json;

use super::wire::{mcp_call, mcp_open, rpc, send_within, Answer, Request};
use super::{ADMIN, KEY_A, KEY_B, MARK_A, MARK_B};
use crate::support::host::Host;

const ROUNDS: usize = 3;
const WITHIN: Duration = Duration::from_secs(20);

/// The protocols a conversation is named by.
#[derive(Clone, Copy, Debug)]
enum Over {
    Http,
    A2a,
    Mcp,
}

/// Races each protocol `ROUNDS` times; violations are pushed to `found`.
pub async fn race_new_conversations(host: &Host, found: &mut Vec<String>) {
    // MCP sessions of their own (B may have ended A's first one).
    let sessions = (
        mcp_open(&host.base, KEY_A).await,
        mcp_open(&host.base, KEY_B).await,
    );
    for over in [Over::Http, Over::A2a, Over::Mcp] {
        for round in 0..ROUNDS {
            let session = format!("race-{over:?}-{round}").to_lowercase();
            let (mine, theirs) = tokio::join!(
                claim(host, &sessions.0, over, &session, KEY_A, MARK_A),
                claim(host, &sessions.1, over, &session, KEY_B, MARK_B),
            );
            let what = format!("{over:?} race for new conversation {session}");
            let (a_won, b_won) = (won(over, &mine), won(over, &theirs));
            match (a_won, b_won) {
                (Some(true), Some(false)) | (Some(false), Some(true)) => {}
                _ => found.push(format!(
                    "{what}: wanted one caller to have it and the other refused; A got {}, B got {}",
                    mine.brief(),
                    theirs.brief()
                )),
            }
            if theirs.text.contains(MARK_A) || mine.text.contains(MARK_B) {
                found.push(format!(
                    "{what}: one caller's answer holds the other's message; A got {}, B got {}",
                    mine.brief(),
                    theirs.brief()
                ));
            }
            let path = format!("/api/agents/writer/sessions/{session}");
            let held = send_within(&host.base, &Request::get(&path), Some(ADMIN), WITHIN).await;
            let text = held.json["messages"].to_string();
            if text.contains(MARK_A) && text.contains(MARK_B) {
                found.push(format!(
                    "{what}: the conversation holds both callers' messages: {text}"
                ));
            }
        }
    }
}

/// Whether the caller has the conversation (`Some(false)`: refused as the
/// documented rule says; `None`: anything else).
fn won(over: Over, answer: &Answer) -> Option<bool> {
    match over {
        Over::Http => match (answer.status, answer.json["errorCode"].as_str()) {
            (200, _) => Some(true),
            (403, Some("session_of_another_caller")) => Some(false),
            _ => None,
        },
        Over::A2a => match answer.rpc_error() {
            None if answer.json["result"]["task"].is_object() => Some(true),
            Some(-32602) => Some(false),
            _ => None,
        },
        Over::Mcp => match answer.rpc_error() {
            None if answer.json["result"]["isError"] != true
                && answer.json["result"].is_object() =>
            {
                Some(true)
            }
            Some(-32602) => Some(false),
            _ => None,
        },
    }
}

async fn claim(host: &Host, mcp: &str, over: Over, session: &str, key: &str, mark: &str) -> Answer {
    let text = format!("{mark} opens {session}");
    let request = match over {
        Over::Http => Request::post(
            "/api/agents/writer/run",
            json!({"message": text, "sessionId": session}),
        )
        .header("accept", "application/json"),
        Over::A2a => Request::post(
            "/a2a/writer",
            rpc(
                "SendMessage",
                json!({"message": {"messageId": format!("{mark}-{session}"), "role": "ROLE_USER",
                    "contextId": session, "parts": [{"text": text}]}}),
            ),
        ),
        Over::Mcp => mcp_call(
            mcp,
            "tools/call",
            json!({"name": "writer", "arguments": {"query": text, "threadId": session}}),
        ),
    };
    send_within(&host.base, &request, Some(key), WITHIN).await
}
