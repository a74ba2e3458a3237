//! A run is its caller's: with keys, an invoke key sees the runs it started
//! and no other caller's, by any route or protocol (the run's own routes,
//! its stream, A2A on both bindings, MCP), and cannot continue another's
//! conversation; an admin key sees everything.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::support::{client, FakeModel, HostBuilder};

const ADMIN: &str = "admin-key-0123456789abcdef";
const MINE: &str = "invoke-key-mine-0123456789";
const THEIRS: &str = "invoke-key-theirs-01234567";

async fn send(
    method: reqwest::Method,
    url: String,
    key: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = client()
        .request(method, url)
        .header("x-api-key", key)
        .header("A2A-Version", "1.0");
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

async fn rpc(host: &crate::support::host::Host, key: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    send(
        reqwest::Method::POST,
        host.url("/a2a/writer"),
        key,
        Some(body),
    )
    .await
    .1
}

/// An MCP tool call over Streamable HTTP: the text of the answer's events.
async fn mcp_call(host: &crate::support::host::Host, key: &str, thread: &str) -> String {
    let url = host.url("/runtime/webhooks/mcp");
    let post = |body: Value, session: Option<String>| {
        let mut request = client()
            .post(&url)
            .header("x-api-key", key)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-06-18");
        }
        request.send()
    };
    let init = post(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"}}}),
        None,
    )
    .await
    .unwrap();
    let session = init
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let _ = init.text().await;
    let _ = post(
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        session.clone(),
    )
    .await
    .unwrap()
    .text()
    .await;
    post(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "writer", "arguments": {"query": "and more?", "threadId": thread}}}),
        session,
    )
    .await
    .unwrap()
    .text()
    .await
    .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_started_with_one_invoke_key_is_seen_by_no_other_and_by_the_admin() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk")
        .arg("--mcp")
        .arg("--api-key")
        .arg(&format!("admin:{ADMIN}"))
        .arg("--api-key")
        .arg(&format!("invoke:{MINE}"))
        .arg("--api-key")
        .arg(&format!("invoke:{THEIRS}"))
        .start();
    // Mine: a run over HTTP on session "s1", and a task over A2A on "c1".
    let started = client()
        .post(host.url("/api/agents/writer/run"))
        .header("x-api-key", MINE)
        .json(&json!({"message": "hello", "sessionId": "s1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), StatusCode::OK);
    let run = started
        .headers()
        .get("x-ms-correlation-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(!run.is_empty());
    let task = rpc(
        &host,
        MINE,
        "SendMessage",
        json!({"message": {"messageId": "m1",
        "role": "ROLE_USER", "contextId": "c1", "parts": [{"text": "hi"}]}}),
    )
    .await;
    let task = task["result"]["task"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!task.is_empty());
    let asked = model.requests().len();

    // Theirs sees neither, by any route, and continues neither conversation.
    for (path, method) in [
        (
            format!("/api/agents/writer/runs/{run}"),
            reqwest::Method::GET,
        ),
        (
            format!("/api/agents/writer/runs/{run}/stream"),
            reqwest::Method::GET,
        ),
        (
            format!("/api/agents/writer/runs/{run}/cancel"),
            reqwest::Method::POST,
        ),
        (format!("/a2a/writer/tasks/{task}"), reqwest::Method::GET),
        (
            format!("/a2a/writer/tasks/{task}:cancel"),
            reqwest::Method::POST,
        ),
    ] {
        let (status, body) = send(method.clone(), host.url(&path), THEIRS, Some(json!({}))).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{method} {path}: {body}");
    }
    let (status, body) = send(
        reqwest::Method::POST,
        host.url(&format!("/api/agents/writer/runs/{run}/approvals")),
        THEIRS,
        Some(json!({"call_id": "x", "approved": true})),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    for (method, id) in [
        ("GetTask", &task),
        ("CancelTask", &task),
        ("SubscribeToTask", &task),
        ("GetTask", &run),
    ] {
        let answer = rpc(&host, THEIRS, method, json!({"id": id})).await;
        assert_eq!(answer["error"]["code"], -32001, "{method}: {answer}");
    }
    let listed = rpc(&host, THEIRS, "ListTasks", json!({})).await;
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    let (_, listed) = send(
        reqwest::Method::GET,
        host.url("/a2a/writer/tasks"),
        THEIRS,
        None,
    )
    .await;
    assert_eq!(listed["tasks"], json!([]), "{listed}");
    let (status, body) = send(
        reqwest::Method::POST,
        host.url("/api/agents/writer/run"),
        THEIRS,
        Some(json!({"message": "what did they say?", "sessionId": "s1"})),
    )
    .await;
    assert_eq!(
        (status, &body["errorCode"]),
        (StatusCode::FORBIDDEN, &json!("session_of_another_caller")),
        "{body}"
    );
    let answer = rpc(
        &host,
        THEIRS,
        "SendMessage",
        json!({"message": {"messageId": "m2",
        "role": "ROLE_USER", "contextId": "c1", "parts": [{"text": "what did they say?"}]}}),
    )
    .await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    // The same messageId and text as mine: a task of its own, not mine.
    let again = rpc(
        &host,
        THEIRS,
        "SendMessage",
        json!({"message": {"messageId": "m1",
        "role": "ROLE_USER", "parts": [{"text": "hi"}]}}),
    )
    .await;
    assert_ne!(again["result"]["task"]["id"], json!(task), "{again}");
    assert_ne!(again["result"]["task"]["contextId"], json!("c1"), "{again}");
    let over_mcp = mcp_call(&host, THEIRS, "s1").await;
    assert!(over_mcp.contains("another caller"), "{over_mcp}");
    // Their own message above was the only one the model was asked.
    assert_eq!(model.requests().len(), asked + 1);

    // Mine sees both; the admin key sees both, and every run.
    for key in [MINE, ADMIN] {
        let (status, body) = send(
            reqwest::Method::GET,
            host.url(&format!("/api/agents/writer/runs/{run}")),
            key,
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let answer = rpc(&host, key, "GetTask", json!({"id": task})).await;
        assert_eq!(answer["result"]["id"], json!(task), "{answer}");
        let listed = rpc(&host, key, "ListTasks", json!({"contextId": "c1"})).await;
        assert_eq!(listed["result"]["tasks"][0]["id"], json!(task), "{listed}");
    }
    let (status, all) = send(
        reqwest::Method::GET,
        host.url("/api/agents/writer/runs"),
        ADMIN,
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(all["runs"].as_array().map(Vec::len), Some(3), "{all}");
    // Mine goes on with its own conversation.
    let (status, body) = send(
        reqwest::Method::POST,
        host.url("/api/agents/writer/run"),
        MINE,
        Some(json!({"message": "and more", "sessionId": "s1"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}
