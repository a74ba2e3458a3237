//! The routes under `/runtime/` (the management API, MCP), which the
//! Functions host keeps for itself, served again under `/api/runtime/`,
//! where an app's catch-all function forwards: the same answers to the same
//! keys and URL tokens, and, in a process the Functions host started
//! (`FUNCTIONS_CUSTOMHANDLER_PORT`), the URLs handed out point there.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use super::front::Front;
use super::init_app;
use crate::support::{client, free_port, HostBuilder};

const ADMIN: &str = "admin-key-runtime-alias-0123456789";
const INVOKE: &str = "invoke-key-runtime-alias-0123456789";
const INSTANCES: &str = "/runtime/webhooks/durabletask/instances";
const MCP: &str = "/runtime/webhooks/mcp";

#[tokio::test(flavor = "multi_thread")]
async fn the_runtime_routes_answer_the_same_under_api_with_the_same_keys_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .env("FUNCTIONS_CUSTOMHANDLER_PORT", &free_port().to_string())
        .arg("--mcp")
        .arg("--api-key")
        .arg(&format!("admin:{ADMIN}"))
        .arg("--api-key")
        .arg(&format!("invoke:{INVOKE}"))
        .start();
    let send = |method: Method, path: &str, key: Option<&str>, body: Option<Value>| {
        let mut request = client()
            .request(method, host.url(path))
            .header("host", "myapp.azurewebsites.net");
        if let Some(key) = key {
            request = request.header("x-functions-key", key);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        async move {
            let answer = request.send().await.unwrap();
            let status = answer.status();
            let headers = answer.headers().clone();
            let body: Value = answer.json().await.unwrap_or(Value::Null);
            (status, headers, body)
        }
    };

    // Started with the invoke key: the URLs handed out are under the alias,
    // each with the instance's token, the Location too.
    let (status, headers, started) = send(
        Method::POST,
        "/api/orchestrators/wait_event/alias-1",
        Some(INVOKE),
        Some(json!({"n": 1})),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    let alias_instance = format!("http://myapp.azurewebsites.net/api{INSTANCES}/alias-1");
    for field in [
        "statusQueryGetUri",
        "sendEventPostUri",
        "terminatePostUri",
        "suspendPostUri",
        "resumePostUri",
        "purgeHistoryDeleteUri",
    ] {
        let url = started[field].as_str().unwrap_or_default();
        assert!(
            url.starts_with(&alias_instance) && url.contains("token="),
            "{field}: {started}"
        );
    }
    let status_url = started["statusQueryGetUri"].as_str().unwrap().to_string();
    assert_eq!(
        headers.get("location").and_then(|v| v.to_str().ok()),
        Some(status_url.as_str())
    );
    let path_of = |url: &str| url.replace("http://myapp.azurewebsites.net", "");
    let token = status_url.split("token=").nth(1).unwrap().to_string();

    // A status read: the same answer at both paths, for every key kind and
    // for the instance's token, once the instance waits for its event (its
    // status holds still until it is raised).
    let original = format!("{INSTANCES}/alias-1");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, _, read) = send(Method::GET, &original, Some(ADMIN), None).await;
        if read["runtimeStatus"] == "Running" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{read}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    for (key, query) in [
        (Some(ADMIN), String::new()),
        (Some(INVOKE), String::new()),
        (None, String::new()),
        (None, format!("?token={token}")),
        (None, "?token=forged".to_string()),
    ] {
        let (at_original, _, read) =
            send(Method::GET, &format!("{original}{query}"), key, None).await;
        let (at_alias, _, alias_read) =
            send(Method::GET, &format!("/api{original}{query}"), key, None).await;
        assert_eq!(at_original, at_alias, "GET with {key:?} {query}");
        assert_eq!(read, alias_read, "GET with {key:?} {query}");
        let expected = match (key, query.contains(&token)) {
            (Some(ADMIN), _) | (None, true) => StatusCode::ACCEPTED, // running
            (Some(_), _) => StatusCode::FORBIDDEN,
            (None, false) => StatusCode::UNAUTHORIZED,
        };
        assert_eq!(at_alias, expected, "GET with {key:?} {query}: {alias_read}");
    }
    // The list: the admin's at both.
    for key in [Some(ADMIN), Some(INVOKE), None] {
        let (at_original, _, _) = send(Method::GET, INSTANCES, key, None).await;
        let (at_alias, _, _) = send(Method::GET, &format!("/api{INSTANCES}"), key, None).await;
        assert_eq!(at_original, at_alias, "the list with {key:?}");
    }

    // A raise: on an instance that is not there, the same refusals and the
    // same 404; then the one handed out, followed as given, is taken.
    for key in [Some(ADMIN), Some(INVOKE), None] {
        let path = format!("{INSTANCES}/missing/raiseEvent/go");
        let (at_original, _, _) = send(Method::POST, &path, key, Some(json!(1))).await;
        let (at_alias, _, _) =
            send(Method::POST, &format!("/api{path}"), key, Some(json!(1))).await;
        assert_eq!(at_original, at_alias, "raise with {key:?}");
    }
    let raise = started["sendEventPostUri"]
        .as_str()
        .unwrap()
        .replace("{eventName}", "go");
    let (raised, _, body) = send(
        Method::POST,
        &path_of(&raise),
        None,
        Some(json!({"ok": true})),
    )
    .await;
    assert_eq!(raised, StatusCode::ACCEPTED, "{body}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let done = loop {
        let (_, _, read) = send(Method::GET, &path_of(&status_url), None, None).await;
        if read["runtimeStatus"] == "Completed" {
            break read;
        }
        assert!(std::time::Instant::now() < deadline, "{read}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(done["output"], json!({"ok": true}));

    // MCP's endpoint: the same keys at both, and one set of sessions (a
    // session opened at one path goes on at the other).
    let mcp = |path: String, key: Option<&'static str>, session: Option<String>, body: Value| {
        let mut request = client()
            .post(host.url(&path))
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Some(session) = session {
            request = request
                .header("mcp-session-id", session)
                .header("mcp-protocol-version", "2025-06-18");
        }
        async move { request.send().await.unwrap() }
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let mut sessions = Vec::new();
    for path in [MCP.to_string(), format!("/api{MCP}")] {
        let refused = mcp(path.clone(), None, None, initialize.clone()).await;
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED, "{path}");
        let opened = mcp(path.clone(), Some(INVOKE), None, initialize.clone()).await;
        assert_eq!(opened.status(), StatusCode::OK, "{path}");
        let session = opened
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        assert!(!session.is_empty(), "{path}");
        sessions.push((path, session));
    }
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    for ((opened_at, session), other) in sessions.iter().zip([format!("/api{MCP}"), MCP.into()]) {
        let went_on = mcp(
            other.clone(),
            Some(INVOKE),
            Some(session.clone()),
            initialized.clone(),
        )
        .await;
        assert_eq!(
            went_on.status(),
            StatusCode::ACCEPTED,
            "a session opened at {opened_at}, used at {other}"
        );
        // Another caller's key on it: the unknown session, at both.
        let admin = mcp(
            other,
            Some(ADMIN),
            Some(session.clone()),
            initialized.clone(),
        )
        .await;
        assert_eq!(admin.status(), StatusCode::NOT_FOUND, "{opened_at}");
    }
}

/// The app's catch-all function forwards the alias; the original paths it
/// cannot (the Functions host's own space).
#[test]
fn the_alias_is_a_path_the_generated_functions_declare() {
    let components = super::super::components_with(&["writer"]);
    let app = tempfile::tempdir().unwrap();
    let dir = app.path().join("app");
    let init = init_app(
        app.path(),
        &dir,
        &["--components", &components.path().display().to_string()],
    );
    super::assert_succeeded(&init);
    let front = Front::read(&dir);
    for (method, path) in [
        ("GET", "/api/runtime/webhooks/durabletask/instances/x"),
        ("GET", "/api/runtime/webhooks/durabletask/instances"),
        ("DELETE", "/api/runtime/webhooks/durabletask/instances/x"),
        (
            "POST",
            "/api/runtime/webhooks/durabletask/instances/x/raiseEvent/go",
        ),
        (
            "POST",
            "/api/runtime/webhooks/durabletask/instances/x/terminate",
        ),
        ("POST", "/api/runtime/webhooks/mcp"),
    ] {
        front.assert_reaches(method, path);
    }
    for path in [
        "/runtime/webhooks/durabletask/instances/x",
        "/runtime/webhooks/mcp",
    ] {
        assert!(front.reaches("GET", path).is_none(), "{path}");
    }
}
