//! MCP (`--mcp`), driven by the official MCP Python SDK (PyPI, pinned,
//! installed into target/a2a-venv by `make test`): the agents and the
//! orchestrations are listed as tools, an agent answers as text with its
//! thread in `structuredContent`, the thread continues one conversation,
//! an orchestration starts through its tool; without `--mcp` nothing is
//! served there.

use std::collections::HashMap;
use std::process::Command;

use serde_json::Value;

use crate::support::durable::wait_for;
use crate::support::fake_model::echo_of;
use crate::support::host::Host;
use crate::support::{client, workspace, FakeModel, HostBuilder};

/// Runs the client against `base`: (succeeded, stdout, stderr).
fn run_client(base: &str) -> (bool, String, String) {
    let output = Command::new(crate::support::venv_python("a2a-venv"))
        .arg(workspace().join("tests/mcp/client.py"))
        .arg(base)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).to_string(),
        String::from_utf8_lossy(&output.stderr).to_string(),
    )
}

fn steps_of(host: &Host, (ok, stdout, stderr): (bool, String, String)) -> HashMap<String, Value> {
    assert!(ok, "{stdout}\n{stderr}\n{}", host.output());
    stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| (v["step"].as_str().unwrap().to_string(), v))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_sdk_lists_calls_continues_a_thread_and_starts_an_orchestration() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .openai(&model, "sk")
        .arg("--mcp")
        .start();
    let base = host.base.clone();
    let ran = tokio::task::spawn_blocking(move || run_client(&base))
        .await
        .unwrap();
    let steps = steps_of(&host, ran);
    let step = |name: &str| {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}: {steps:?}"))
    };
    assert_eq!(step("initialize")["server"], "agenthost");
    let names: Vec<&str> = step("tools")["names"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        names.contains(&"clerk") && names.contains(&"start_sequence"),
        "{names:?}"
    );
    assert_eq!(step("tools")["schema"]["required"][0], "query");
    let call = step("call");
    assert_eq!(call["text"], echo_of("hello"));
    assert_eq!(call["error"], false);
    let again = step("continue");
    assert_eq!(again["text"], echo_of("again"));
    assert_eq!(again["thread"], call["thread"]);
    let transcript = model.requests()[1].transcript();
    assert!(
        transcript.contains(&"user: hello".to_string()),
        "one thread: {transcript:?}"
    );
    let started = step("start");
    assert_eq!(started["error"], false);
    let id = started["id"].as_str().unwrap();
    assert_eq!(
        started["url"],
        format!("/runtime/webhooks/durabletask/instances/{id}")
    );
    let done = wait_for(&host, id, &["Completed"]).await;
    assert_eq!(done["output"], 3, "{done}");
    let unknown = step("unknown");
    assert!(
        unknown["raised"].is_string() || unknown["error"] == true,
        "{unknown}"
    );
    assert_eq!(model.requests().len(), 2, "the unknown tool asked nothing");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_flag_nothing_is_served_at_the_mcp_path() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let response = client()
        .post(host.url("/runtime/webhooks/mcp"))
        .json(&serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn with_keys_mcp_wants_an_invoke_key() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk")
        .arg("--mcp")
        .arg("--api-key")
        .arg("invoke:0123456789abcdef-invoke")
        .start();
    let initialize = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}});
    let post = || {
        client()
            .post(host.url("/runtime/webhooks/mcp"))
            .header("accept", "application/json, text/event-stream")
            .json(&initialize)
    };
    let refused = post().send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let answered = post()
        .bearer_auth("0123456789abcdef-invoke")
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    assert!(answered.headers().contains_key("mcp-session-id"));
}
