//! What key A owns when key B starts probing, one of each kind of resource,
//! and what B holds of its own (the tokens its starts were handed); and A's
//! resources read back, to compare before and after B's calls.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::wire::{mcp_call, mcp_open, rpc, send, send_within, Request};
use super::{ADMIN, KEY_A, KEY_B, MARK_A};
use crate::support::host::Host;

/// Long enough for a run of the fake model, or an orchestration's start.
const SETTLE: Duration = Duration::from_secs(20);

/// A's resources, by what the probes need of them.
pub struct Owned {
    /// A run of `writer` over HTTP (finished), on session `writer_session`.
    pub writer_run: String,
    pub writer_session: String,
    /// A run of `clerk` waiting for a human's decision on its `refund` call.
    pub clerk_run: String,
    pub clerk_session: String,
    /// An A2A task of `writer`, on context `context`.
    pub task: String,
    pub context: String,
    /// An MCP thread of `writer` and its run; A's MCP session.
    pub thread: String,
    pub thread_run: String,
    pub mcp_session: String,
    /// Instances: one of `wait_event` waiting for `go`, one of `approval`
    /// waiting for `approval_received`, one of `child` finished.
    pub waiting: String,
    pub approval: String,
    pub finished: String,
    /// The agent run `approval` made for its draft (no caller's).
    pub orchestration_run: String,
    /// B's own: a task (probed for the methods the bindings answer), an
    /// MCP session, the token of an instance and of a run's stream.
    pub b_task: String,
    pub b_mcp_session: String,
    pub b_instance_token: String,
    pub b_stream_token: String,
}

/// Creates A's resources (and B's few), and waits until each is where the
/// probes want it.
pub async fn create(host: &Host) -> Owned {
    let base = host.base.as_str();
    let writer_session = "a-writer-session".to_string();
    let run = Request::post(
        "/api/agents/writer/run",
        json!({"message": format!("{MARK_A} a note for the writer"), "sessionId": writer_session}),
    )
    .header("accept", "application/json");
    let answer = send_within(base, &run, Some(KEY_A), SETTLE).await;
    assert_eq!(answer.status, 200, "A's writer run: {}", answer.brief());
    let writer_run = answer.json["correlationId"]
        .as_str()
        .unwrap_or_else(|| panic!("no correlationId: {}", answer.brief()))
        .to_string();

    let clerk_session = "a-clerk-session".to_string();
    let clerk = Request::post(
        "/api/agents/clerk/run",
        json!({"message": format!("Refund order {MARK_A}-A1, 20 euros."), "sessionId": clerk_session}),
    );
    let answer = send_within(base, &clerk, Some(KEY_A), SETTLE).await;
    assert_eq!(
        answer.json["status"],
        "awaiting_approval",
        "A's clerk run: {}",
        answer.brief()
    );
    let clerk_run = answer.json["correlationId"]
        .as_str()
        .unwrap_or_default()
        .to_string();

    let context = "a-context".to_string();
    let message = rpc(
        "SendMessage",
        json!({"message": {"messageId": "a-message-1", "role": "ROLE_USER",
            "contextId": context, "parts": [{"text": format!("{MARK_A} over A2A")}]}}),
    );
    let answer = send_within(
        base,
        &Request::post("/a2a/writer", message),
        Some(KEY_A),
        SETTLE,
    )
    .await;
    let task = answer.json["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("A's A2A task: {}", answer.brief()))
        .to_string();

    let mcp_session = mcp_open(base, KEY_A).await;
    let thread = "a-thread".to_string();
    let asked = mcp_call(
        &mcp_session,
        "tools/call",
        json!({"name": "writer", "arguments": {"query": format!("{MARK_A} over MCP"), "threadId": thread}}),
    );
    let answer = send_within(base, &asked, Some(KEY_A), SETTLE).await;
    let thread_run = answer.json["result"]["structuredContent"]["correlationId"]
        .as_str()
        .unwrap_or_else(|| panic!("A's MCP call: {}", answer.brief()))
        .to_string();

    let input = json!({"note": format!("{MARK_A} input")});
    let (waiting, approval, finished) = (
        "a-waiting".to_string(),
        "a-approval".to_string(),
        "a-finished".to_string(),
    );
    for (name, id, input) in [
        ("wait_event", &waiting, input.clone()),
        (
            "approval",
            &approval,
            json!({"topic": format!("{MARK_A} topic")}),
        ),
        ("child", &finished, input),
    ] {
        let start = Request::post(format!("/api/orchestrators/{name}/{id}"), input);
        let answer = send(base, &start, Some(KEY_A)).await;
        assert_eq!(answer.status, 202, "A starts {name}: {}", answer.brief());
    }
    instance_where(host, &waiting, |s| s["customStatus"] == "waiting").await;
    let drafted = instance_where(host, &approval, |s| {
        s["customStatus"]["state"] == "awaiting_approval"
    })
    .await;
    let orchestration_run = drafted["agentRuns"][0]["correlationId"]
        .as_str()
        .unwrap_or_else(|| panic!("approval's agent run: {drafted}"))
        .to_string();
    instance_where(host, &finished, |s| s["runtimeStatus"] == "Completed").await;

    // B's own: a task, an MCP session, an instance and a run, for their tokens.
    let message = rpc(
        "SendMessage",
        json!({"message": {"messageId": "b-message-1", "role": "ROLE_USER",
            "parts": [{"text": "B's own"}]}}),
    );
    let answer = send_within(
        base,
        &Request::post("/a2a/writer", message),
        Some(KEY_B),
        SETTLE,
    )
    .await;
    let b_task = answer.json["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("B's A2A task: {}", answer.brief()))
        .to_string();
    let b_mcp_session = mcp_open(base, KEY_B).await;
    let start = Request::post("/api/orchestrators/child/b-own", json!({"note": "B's"}));
    let answer = send(base, &start, Some(KEY_B)).await;
    let b_instance_token = token_in(&answer.json["statusQueryGetUri"]);
    let run = Request::post(
        "/api/agents/writer/run",
        json!({"message": "B's own run", "waitForResponse": false}),
    );
    let answer = send(base, &run, Some(KEY_B)).await;
    let b_stream_token = token_in(&answer.json["streamUrl"]);
    Owned {
        writer_run,
        writer_session,
        clerk_run,
        clerk_session,
        task,
        context,
        thread,
        thread_run,
        mcp_session,
        waiting,
        approval,
        finished,
        orchestration_run,
        b_task,
        b_mcp_session,
        b_instance_token,
        b_stream_token,
    }
}

fn token_in(url: &Value) -> String {
    url.as_str()
        .and_then(|u| u.split("token=").nth(1))
        .map(|t| t.split('&').next().unwrap_or(t).to_string())
        .unwrap_or_else(|| panic!("a URL with a token: {url}"))
}

/// The instance's status (with its history), once `ready` holds of it.
async fn instance_where(host: &Host, id: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + SETTLE;
    loop {
        let status = instance(host, id).await;
        if ready(&status) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "instance {id} never got ready: {status}\n{}",
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn instance(host: &Host, id: &str) -> Value {
    let path = format!("/runtime/webhooks/durabletask/instances/{id}?showHistory=true");
    send(&host.base, &Request::get(path), Some(ADMIN))
        .await
        .json
}

/// What A's resources are, read back (with A's key where A may read, the
/// admin's where only an admin may), as labelled facts.
pub async fn snapshot(host: &Host, owned: &Owned) -> Vec<(String, Value)> {
    let base = host.base.as_str();
    let mut facts = Vec::new();
    for (agent, run) in [
        ("writer", &owned.writer_run),
        ("clerk", &owned.clerk_run),
        ("writer", &owned.thread_run),
        ("writer", &owned.task),
    ] {
        let path = format!("/api/agents/{agent}/runs/{run}");
        let read = send(base, &Request::get(&path), Some(KEY_A)).await;
        let run = &read.json;
        facts.push((
            format!("A's run {path}"),
            json!({"http": read.status, "status": run["status"], "response": run["response"],
                "pending": run["pendingApprovals"]}),
        ));
    }
    let task = rpc("GetTask", json!({"id": owned.task}));
    let read = send(base, &Request::post("/a2a/writer", task), Some(KEY_A)).await;
    facts.push((
        format!("A's A2A task {}", owned.task),
        json!({"state": read.json["result"]["status"]["state"],
            "history": read.json["result"]["history"].as_array().map(Vec::len)}),
    ));
    for (agent, session) in [
        ("writer", &owned.writer_session),
        ("writer", &owned.context),
        ("writer", &owned.thread),
        ("clerk", &owned.clerk_session),
    ] {
        let path = format!("/api/agents/{agent}/sessions/{session}");
        let read = send(base, &Request::get(&path), Some(ADMIN)).await;
        let contents: Vec<Value> = read.json["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| json!([m["role"], m["content"]]))
            .collect();
        facts.push((
            format!("A's conversation {path}"),
            json!({"http": read.status, "messages": contents}),
        ));
    }
    for id in [&owned.waiting, &owned.approval, &owned.finished] {
        let status = instance(host, id).await;
        facts.push((
            format!("A's instance {id}"),
            json!({"status": status["runtimeStatus"], "output": status["output"],
                "input": status["input"], "created": status["createdTime"],
                "custom": status["customStatus"], "name": status["name"],
                "history": status["historyEvents"].as_array().map(Vec::len)}),
        ));
    }
    let listed = mcp_call(&owned.mcp_session, "tools/list", json!({}));
    let read = send(base, &listed, Some(KEY_A)).await;
    facts.push((
        "A's MCP session".to_string(),
        json!({"http": read.status, "answers": read.json["result"]["tools"].is_array()}),
    ));
    facts
}
