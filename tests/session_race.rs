//! A new session belongs to the caller whose first message the store takes
//! first (issue 53, point 2). Two invoke keys name the same new session at
//! the same moment, 100 times over each protocol (HTTP `sessionId`, A2A
//! `contextId`, MCP `threadId`): exactly one is answered, the other gets the
//! protocol's refusal (403 `session_of_another_caller`, JSON-RPC -32602),
//! and nothing of the loser's message reaches the winner's conversation:
//! not the model's answer (the fake model answers with every user message
//! it was sent), not the session's stored messages. On PostgreSQL the race
//! is run again with each caller on a host of its own, on one hub.

use std::sync::Arc;

use reqwest::StatusCode;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use crate::support::fake_model::{Recorded, Reply};
use crate::support::host::Host;
use crate::support::{client, FakeModel, HostBuilder};

const ADMIN: &str = "admin-key-race-0123456789ab";
const KEYS: [&str; 2] = ["invoke-key-a-race-0123456", "invoke-key-b-race-0123456"];
const ROUNDS: usize = 100;
/// Rounds raced at once (each round's two callers race each other).
const AT_ONCE: usize = 10;

/// How a caller fared in one round: answered (with what the caller was
/// shown), or refused as the protocol documents it.
#[derive(Debug)]
enum Fate {
    Answered(String),
    Refused,
}

#[derive(Clone, Copy, Debug)]
enum Protocol {
    Http,
    A2a,
    Mcp,
}

fn secret(caller: usize, round: usize) -> String {
    format!("SECRET-OF-{}-{round}", ["A", "B"][caller])
}

/// Answers with every user message of the conversation, so a cross-read
/// shows.
fn echoing_model(model: &FakeModel) {
    model.respond_with(Arc::new(|request: &Recorded| {
        let said: Vec<String> = request
            .messages()
            .iter()
            .filter(|m| m["role"] == "user")
            .filter_map(|m| m["content"].as_str().map(str::to_string))
            .collect();
        Reply::Text(format!("heard: {}", said.join(" | ")))
    }));
}

/// A host with the admin key and both invoke keys.
fn keyed(dir: &std::path::Path, model: &FakeModel) -> HostBuilder {
    HostBuilder::new(dir)
        .components(&["writer"])
        .openai(model, "sk")
        .arg("--mcp")
        .arg("--api-key")
        .arg(&format!("admin:{ADMIN}"))
        .arg("--api-key")
        .arg(&format!("invoke:{}", KEYS[0]))
        .arg("--api-key")
        .arg(&format!("invoke:{}", KEYS[1]))
}

#[tokio::test(flavor = "multi_thread")]
async fn two_callers_racing_for_one_new_session_leave_one_owner_and_no_cross_read() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    echoing_model(&model);
    let host = Arc::new(keyed(dir.path(), &model).start());
    let failures = race(
        [host.clone(), host],
        &[Protocol::Http, Protocol::A2a, Protocol::Mcp],
    )
    .await;
    assert!(
        failures.is_empty(),
        "{} of {} rounds went wrong:\n{}",
        failures.len(),
        3 * ROUNDS,
        failures.join("\n")
    );
}

/// The same race with each caller on a host of its own, both on one
/// PostgreSQL hub: the two first writes meet in the database, not in one
/// host's writer. PostgreSQL only (one process serves a SQLite file).
#[tokio::test(flavor = "multi_thread")]
async fn two_hosts_of_one_hub_leave_a_racing_session_one_owner_and_no_cross_read() {
    if crate::support::host::test_store().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    echoing_model(&model);
    let hosts = [
        Arc::new(keyed(dir.path(), &model).start()),
        Arc::new(keyed(dir.path(), &model).start()),
    ];
    let failures = race(hosts, &[Protocol::Http, Protocol::A2a, Protocol::Mcp]).await;
    assert!(
        failures.is_empty(),
        "{} of {} rounds went wrong:\n{}",
        failures.len(),
        3 * ROUNDS,
        failures.join("\n")
    );
}

/// `ROUNDS` rounds over each protocol, `AT_ONCE` at a time: caller A on
/// `hosts[0]`, B on `hosts[1]`, each sending its secret on the round's new
/// session at the same moment. What went wrong, one line a round.
async fn race(hosts: [Arc<Host>; 2], protocols: &[Protocol]) -> Vec<String> {
    let mcp = [
        mcp_session(&hosts[0], KEYS[0]).await,
        mcp_session(&hosts[1], KEYS[1]).await,
    ];
    let mut failures = Vec::new();
    for &protocol in protocols {
        let run = uuid::Uuid::new_v4().simple().to_string();
        for group in (0..ROUNDS).collect::<Vec<_>>().chunks(AT_ONCE) {
            let mut rounds = JoinSet::new();
            for &round in group {
                let (hosts, mcp) = (hosts.clone(), mcp.clone());
                let session = format!("race-{protocol:?}-{run}-{round}");
                rounds.spawn(async move {
                    let fates = tokio::join!(
                        say(&hosts[0], protocol, &mcp[0], 0, &session, round),
                        say(&hosts[1], protocol, &mcp[1], 1, &session, round),
                    );
                    let stored = stored_messages(&hosts[0], &session).await;
                    judge(protocol, round, [fates.0, fates.1], &stored)
                });
            }
            while let Some(judged) = rounds.join_next().await {
                if let Err(failure) = judged.unwrap() {
                    failures.push(failure);
                }
            }
        }
        eprintln!("{protocol:?}: {} rounds went wrong so far", failures.len());
    }
    failures
}

/// One owner, the other refused, and neither shown nor stored the other's.
fn judge(
    protocol: Protocol,
    round: usize,
    fates: [Fate; 2],
    stored: &[String],
) -> Result<(), String> {
    let round_of = format!("{protocol:?} round {round}");
    let winner = match &fates {
        [Fate::Answered(_), Fate::Refused] => 0,
        [Fate::Refused, Fate::Answered(_)] => 1,
        other => return Err(format!("{round_of}: not one owner: {other:?}")),
    };
    let (mine, theirs) = (secret(winner, round), secret(1 - winner, round));
    let Fate::Answered(shown) = &fates[winner] else {
        return Err(format!("{round_of}: no answer"));
    };
    if !shown.contains(&mine) || shown.contains(&theirs) {
        return Err(format!(
            "{round_of}: the owner was shown the other's message: {shown}"
        ));
    }
    if !stored.iter().any(|m| m.contains(&mine)) || stored.iter().any(|m| m.contains(&theirs)) {
        return Err(format!(
            "{round_of}: the session holds the other's message: {stored:?}"
        ));
    }
    Ok(())
}

/// `caller` sends its secret on `session`.
async fn say(
    host: &Host,
    protocol: Protocol,
    mcp: &str,
    caller: usize,
    session: &str,
    round: usize,
) -> Fate {
    let (key, text) = (KEYS[caller], secret(caller, round));
    match protocol {
        Protocol::Http => {
            let response = client()
                .post(host.url("/api/agents/writer/run"))
                .header("x-api-key", key)
                .json(&json!({"message": text, "sessionId": session}))
                .send()
                .await
                .unwrap();
            let status = response.status();
            let body = response.text().await.unwrap_or_default();
            match status {
                StatusCode::OK => Fate::Answered(body),
                StatusCode::FORBIDDEN if body.contains("session_of_another_caller") => {
                    Fate::Refused
                }
                other => Fate::Answered(format!("unexpected {other}: {body}")),
            }
        }
        Protocol::A2a => {
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": {"messageId": format!("m-{caller}-{round}"), "role": "ROLE_USER",
                "contextId": session, "parts": [{"text": text}]}}});
            let answer: Value = client()
                .post(host.url("/a2a/writer"))
                .header("x-api-key", key)
                .header("A2A-Version", "1.0")
                .json(&body)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap_or(Value::Null);
            match answer["error"]["code"].as_i64() {
                Some(-32602) => Fate::Refused,
                _ => Fate::Answered(answer.to_string()),
            }
        }
        Protocol::Mcp => {
            // Ids differ: the calls of one MCP session go at once.
            let body = json!({"jsonrpc": "2.0", "id": 100 + round, "method": "tools/call", "params": {
                "name": "writer", "arguments": {"query": text, "threadId": session}}});
            let events = mcp_post(host, key, Some(mcp), &body)
                .await
                .text()
                .await
                .unwrap_or_default();
            match events.contains("\"code\":-32602") {
                true => Fate::Refused,
                false => Fate::Answered(events),
            }
        }
    }
}

/// The contents of the session's stored messages, read with the admin key.
async fn stored_messages(host: &Host, session: &str) -> Vec<String> {
    let conversation: Value = client()
        .get(host.url(&format!("/api/agents/writer/sessions/{session}")))
        .header("x-api-key", ADMIN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap_or(Value::Null);
    conversation["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .map(|m| m["content"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

async fn mcp_post(
    host: &Host,
    key: &str,
    session: Option<&str>,
    body: &Value,
) -> reqwest::Response {
    let mut request = client()
        .post(host.url("/runtime/webhooks/mcp"))
        .header("x-api-key", key)
        .header("accept", "application/json, text/event-stream")
        .json(body);
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-06-18");
    }
    request.send().await.unwrap()
}

/// An initialized MCP session of `key`: its id.
async fn mcp_session(host: &Host, key: &str) -> String {
    let init = mcp_post(
        host,
        key,
        None,
        &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "race", "version": "1"}}}),
    )
    .await;
    let session = init
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .unwrap_or_default();
    let _ = init.text().await;
    assert!(!session.is_empty(), "the MCP server named no session");
    let _ = mcp_post(
        host,
        key,
        Some(&session),
        &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await
    .text()
    .await;
    session
}
