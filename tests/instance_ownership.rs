//! An orchestration instance is owned like a run: the invoke key that starts
//! it owns it, and another invoke key reaches none of it. Key B cannot
//! approve key A's waiting `approval` instance through the component's event
//! route (404, as for an id that never was), manage it through the
//! management API (admin's: 403), or start its id again, running or
//! finished, over HTTP or MCP (409, or MCP's tool error, nothing touched);
//! A's instance, its output and its status URL stay as they were, and A
//! approves and restarts it. A sub-orchestration belongs to its parent's key.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::support::host::Host;
use crate::support::{client, FakeModel, HostBuilder};

const ADMIN: &str = "admin-key-ownership-0123456";
const A: &str = "invoke-key-a-ownership-0123";
const B: &str = "invoke-key-b-ownership-0123";
const INSTANCES: &str = "/runtime/webhooks/durabletask/instances";

fn keyed(dir: &std::path::Path, model: &FakeModel) -> Host {
    HostBuilder::new(dir)
        .components(&["writer", "approval", "orchestration-tests"])
        .openai(model, "sk")
        .arg("--mcp")
        .arg("--api-key")
        .arg(&format!("admin:{ADMIN}"))
        .arg("--api-key")
        .arg(&format!("invoke:{A}"))
        .arg("--api-key")
        .arg(&format!("invoke:{B}"))
        .start()
}

/// `method url` with `key` (and a JSON body): status and body (JSON, or the
/// text as a string).
async fn call(method: Method, url: &str, key: &str, body: Option<Value>) -> (StatusCode, Value) {
    let mut request = client().request(method, url).header("x-api-key", key);
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

/// The instance as the admin key reads it.
async fn admin_view(host: &Host, id: &str) -> Value {
    let (status, body) = call(
        Method::GET,
        &host.url(&format!("{INSTANCES}/{id}")),
        ADMIN,
        None,
    )
    .await;
    assert!(status.is_success(), "{status} {body}");
    body
}

/// Polls (with the admin key) until `pick` of the instance is `want`.
async fn wait_until(host: &Host, id: &str, pick: &str, want: &Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let body = admin_view(host, id).await;
        if body.pointer(pick) == Some(want) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{id}: {pick} never {want}: {body}\n{}",
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What of an instance no refused call may change.
fn unchanged_part(view: &Value) -> Value {
    json!([
        view["runtimeStatus"],
        view["customStatus"],
        view["input"],
        view["output"],
        view["createdTime"],
        view["lastUpdatedTime"],
    ])
}

/// A JSON-RPC call of MCP tool `tool` with `key`, in a session of its own:
/// the response object.
async fn mcp_tool(host: &Host, key: &str, tool: &str, arguments: Value) -> Value {
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
    let text = post(
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": tool, "arguments": arguments}}),
        session,
    )
    .await
    .unwrap()
    .text()
    .await
    .unwrap_or_default();
    text.lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(|message| message["id"] == 2)
        .unwrap_or_else(|| panic!("no answer to the tool call: {text}"))
}

/// B's refusal on `id` is the one it gets for an id that never was (the id
/// aside): a JSON error body with the same status and code.
async fn as_unknown(host: &Host, path_of: impl Fn(&str) -> String, body: Option<Value>, id: &str) {
    let never = "never-was-1";
    let (status, refused) = call(Method::POST, &host.url(&path_of(id)), B, body.clone()).await;
    let (unknown_status, unknown) = call(Method::POST, &host.url(&path_of(never)), B, body).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{refused}");
    assert_eq!(unknown_status, StatusCode::NOT_FOUND, "{unknown}");
    assert!(refused["error"].is_string(), "{refused}");
    assert_eq!(
        refused.to_string().replace(id, never),
        unknown.to_string(),
        "another key's instance answers as an unknown one"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn another_invoke_key_can_neither_approve_manage_nor_replace_a_keys_instance() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = keyed(dir.path(), &model);
    let id = "owned-1";

    // A starts an approval that waits for a human.
    let (status, started) = call(
        Method::POST,
        &host.url(&format!("/api/orchestrators/approval/{id}")),
        A,
        Some(json!({"topic": "tea"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let status_url = started["statusQueryGetUri"].as_str().unwrap().to_string();
    assert!(status_url.contains("?token="), "{started}");
    let waiting = wait_until(
        &host,
        id,
        "/customStatus/state",
        &json!("awaiting_approval"),
    )
    .await;

    // B's approval through the component's event route: as for no instance.
    as_unknown(
        &host,
        |id| format!("/api/approval/{id}"),
        Some(json!({"approved": true})),
        id,
    )
    .await;
    // B's start of A's running id: refused.
    let (status, refused) = call(
        Method::POST,
        &host.url(&format!("/api/orchestrators/approval/{id}")),
        B,
        Some(json!({"topic": "theirs"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert!(refused["error"].is_string(), "{refused}");
    // The management API (raise, terminate, suspend, resume, purge, status,
    // list, purge by filter) is the admin's: B's key is refused before any
    // instance is looked at, whichever id it names.
    let instance = format!("{INSTANCES}/{id}");
    for (method, path, body) in [
        (
            Method::POST,
            format!("{instance}/raiseEvent/approval_received"),
            Some(json!({"approved": true})),
        ),
        (Method::POST, format!("{instance}/terminate"), None),
        (Method::POST, format!("{instance}/suspend"), None),
        (Method::POST, format!("{instance}/resume"), None),
        (Method::DELETE, instance.clone(), None),
        (Method::GET, instance.clone(), None),
        (Method::GET, INSTANCES.to_string(), None),
        (Method::DELETE, INSTANCES.to_string(), None),
    ] {
        let (status, body) = call(method.clone(), &host.url(&path), B, body).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {path}: {body}");
        assert!(body["error"].is_string(), "{method} {path}: {body}");
    }
    // Nothing of A's instance changed, as A's status URL and the admin see.
    let (status, mine) = call(Method::GET, &status_url, "", None).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{mine}");
    assert_eq!(unchanged_part(&mine), unchanged_part(&waiting));
    assert_eq!(
        unchanged_part(&admin_view(&host, id).await),
        unchanged_part(&waiting)
    );

    // A approves it: published.
    let (status, body) = call(
        Method::POST,
        &host.url(&format!("/api/approval/{id}")),
        A,
        Some(json!({"approved": true})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let done = wait_until(&host, id, "/runtimeStatus", &json!("Completed")).await;
    assert_eq!(done["output"]["status"], "published", "{done}");

    // B cannot replace A's finished instance, over HTTP or MCP.
    let (status, refused) = call(
        Method::POST,
        &host.url(&format!("/api/orchestrators/approval/{id}")),
        B,
        Some(json!({"topic": "theirs"})),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{refused}");
    assert_eq!(refused["code"], "instance_exists", "{refused}");
    let answer = mcp_tool(
        &host,
        B,
        "start_approval",
        json!({"instanceId": id, "input": {"topic": "theirs"}}),
    )
    .await;
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    // A's output and status URL are intact.
    let (status, mine) = call(Method::GET, &status_url, "", None).await;
    assert_eq!(status, StatusCode::OK, "{mine}");
    assert_eq!(unchanged_part(&mine), unchanged_part(&done));
    assert_eq!(mine["output"]["status"], "published", "{mine}");

    // A, its owner, starts it again; it stays A's.
    let (status, body) = call(
        Method::POST,
        &host.url(&format!("/api/orchestrators/approval/{id}")),
        A,
        Some(json!({"topic": "more tea"})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    wait_until(
        &host,
        id,
        "/customStatus/state",
        &json!("awaiting_approval"),
    )
    .await;
    as_unknown(
        &host,
        |id| format!("/api/approval/{id}"),
        Some(json!({"approved": true})),
        id,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sub_orchestration_belongs_to_its_parents_key_and_an_mcp_start_to_its_callers() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = keyed(dir.path(), &model);

    // A's parent starts a child; the child's id is derived from the parent's.
    let (status, body) = call(
        Method::POST,
        &host.url("/api/orchestrators/parent/family-1"),
        A,
        Some(json!({"n": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    wait_until(&host, "family-1", "/runtimeStatus", &json!("Completed")).await;
    let (_, listed) = call(
        Method::GET,
        &host.url(&format!("{INSTANCES}?instanceIdPrefix=family-1:")),
        ADMIN,
        None,
    )
    .await;
    let child = listed[0]["instanceId"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!child.is_empty(), "{listed}");
    let before = admin_view(&host, &child).await;
    let start_child = |key: &'static str| {
        let url = host.url(&format!("/api/orchestrators/child/{child}"));
        async move { call(Method::POST, &url, key, Some(json!({"n": 2}))).await }
    };
    let (status, refused) = start_child(B).await;
    assert_eq!(status, StatusCode::CONFLICT, "B: {refused}");
    assert_eq!(
        unchanged_part(&admin_view(&host, &child).await),
        unchanged_part(&before)
    );
    let (status, body) = start_child(A).await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "A owns its parent's child: {body}"
    );

    // An instance started over MCP is its caller's: B's event route finds
    // none of it; A's does.
    let answer = mcp_tool(&host, A, "start_wait_event", json!({"instanceId": "mcp-1"})).await;
    assert_eq!(
        answer["result"]["structuredContent"]["id"], "mcp-1",
        "{answer}"
    );
    wait_until(&host, "mcp-1", "/runtimeStatus", &json!("Running")).await;
    as_unknown(&host, |id| format!("/api/go/{id}"), Some(json!(1)), "mcp-1").await;
    let (status, body) = call(Method::POST, &host.url("/api/go/mcp-1"), A, Some(json!(1))).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    wait_until(&host, "mcp-1", "/runtimeStatus", &json!("Completed")).await;
}
