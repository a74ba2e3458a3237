//! `agenthost client …` as a separate process against a running host: agent
//! runs that continue one session, and an orchestration started, inspected
//! (the Durable Task SDKs' field names), signalled and waited for.

use std::process::Command;

use serde_json::Value;

use crate::support::host::Host;
use crate::support::{fake_model::echo_of, FakeModel, HostBuilder};

/// Runs `agenthost client --endpoint HOST ARGS…`; (exit ok, stdout, stderr).
pub(crate) fn client(host: &Host, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_agenthost"))
        .args(["client", "--endpoint", &host.base])
        .args(args)
        .env_remove("DURABLE_TASK_SCHEDULER_CONNECTION_STRING")
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).trim().to_string(),
        String::from_utf8_lossy(&output.stderr).to_string(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_process_continues_one_session_across_two_runs() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let run = |message: &str| {
        client(
            &host,
            &["agent", "run", "writer", message, "--session", "cli-1"],
        )
    };
    let (ok, first, err) = run("Tea is calm.");
    assert!(ok, "{err}");
    assert_eq!(first, echo_of("Tea is calm."));
    assert!(err.contains("session: cli-1"), "{err}");
    let (ok, second, err) = run("Shorter.");
    assert!(ok, "{err}");
    assert_eq!(second, echo_of("Shorter."));
    let transcript = model.requests()[1].transcript().join("\n");
    assert!(
        transcript.contains("Tea is calm.") && transcript.contains(&first),
        "the second run carries the first exchange: {transcript}"
    );

    let (ok, _, err) = client(&host, &["agent", "run", "nobody", "hi"]);
    assert!(!ok);
    assert!(err.contains("404"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_process_starts_inspects_signals_and_waits_for_an_orchestration() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "approval"])
        .openai(&model, "sk")
        .start();
    let input = r#"{"topic": "tea", "timeout_seconds": 3600}"#;
    let (ok, id, err) = client(
        &host,
        &[
            "orchestration",
            "start",
            "approval",
            "--input",
            input,
            "--id",
            "cli-review",
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(id, "cli-review");

    let status = |host: &Host| -> Value {
        let (ok, out, err) = client(host, &["orchestration", "status", "cli-review"]);
        assert!(ok, "{err}");
        serde_json::from_str(&out).unwrap()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let waiting = loop {
        let current = status(&host);
        if current["serialized_custom_status"]
            .as_str()
            .is_some_and(|s| s.contains("awaiting_approval"))
        {
            break current;
        }
        assert!(std::time::Instant::now() < deadline, "{current}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(waiting["runtime_status"], "Running");
    assert_eq!(waiting["name"], "approval");
    let seeded: Value =
        serde_json::from_str(waiting["serialized_input"].as_str().unwrap()).unwrap();
    assert_eq!(seeded["topic"], "tea");
    assert_eq!(waiting["serialized_output"], Value::Null);

    let (ok, _, err) = client(
        &host,
        &["orchestration", "wait", "cli-review", "--timeout", "300ms"],
    );
    assert!(!ok, "still running: wait times out");
    assert!(err.contains("still Running"), "{err}");

    let (ok, _, err) = client(
        &host,
        &[
            "orchestration",
            "raise",
            "cli-review",
            "approval_received",
            "--data",
            r#"{"approved": true}"#,
        ],
    );
    assert!(ok, "{err}");
    let (ok, out, err) = client(
        &host,
        &["orchestration", "wait", "cli-review", "--timeout", "30s"],
    );
    assert!(ok, "{err}");
    let done: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(done["runtime_status"], "Completed", "{done}");
    let output: Value = serde_json::from_str(done["serialized_output"].as_str().unwrap()).unwrap();
    assert_eq!(output["status"], "published");

    let (ok, out, err) = client(&host, &["orchestration", "list"]);
    assert!(ok, "{err}");
    let listed: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["instance_id"], "cli-review");

    let (ok, _, err) = client(&host, &["orchestration", "terminate", "missing"]);
    assert!(!ok);
    assert!(err.contains("does not exist"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_process_cancels_a_run_and_lists_an_agents_runs() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let (ok, _, err) = client(
        &host,
        &["agent", "run", "writer", "One.", "--session", "l1"],
    );
    assert!(ok, "{err}");
    model.push(crate::support::Reply::Delay(
        std::time::Duration::from_secs(60),
        Box::new(crate::support::Reply::Echo),
    ));
    let queued: Value = crate::support::client()
        .post(host.url("/api/agents/writer/run"))
        .json(&serde_json::json!({"message": "Two.", "sessionId": "l1", "waitForResponse": false}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = queued["correlationId"].as_str().unwrap().to_string();
    while model.requests().len() < 2 {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (ok, out, err) = client(&host, &["agent", "cancel", "writer", &id]);
    assert!(ok, "{err}");
    let run: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(run["status"], "canceled", "{out}");
    assert_eq!(run["correlationId"], id.as_str(), "{out}");
    // Again: refused, and the process says why.
    let (ok, _, err) = client(&host, &["agent", "cancel", "writer", &id]);
    assert!(!ok);
    assert!(
        err.contains("409") && err.contains("already ended"),
        "{err}"
    );

    let (ok, out, err) = client(
        &host,
        &["agent", "runs", "writer", "--session", "l1", "--limit", "1"],
    );
    assert!(ok, "{err}");
    let page: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(page["runs"][0]["correlationId"], id.as_str(), "{out}");
    let after = page["next"].as_str().unwrap().to_string();
    let (ok, out, err) = client(
        &host,
        &[
            "agent",
            "runs",
            "writer",
            "--status",
            "completed",
            "--after",
            &after,
        ],
    );
    assert!(ok, "{err}");
    let page: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(page["runs"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(page["runs"][0]["status"], "completed", "{out}");
    assert!(page["next"].is_null(), "{out}");
    // Names and ids go into the path encoded: an id with `#`, `?` or `/`
    // names that run, never another route.
    for id in ["a#b", "a?x=1", "../sessions/l1"] {
        let (ok, _, err) = client(&host, &["agent", "cancel", "writer", id]);
        assert!(!ok);
        assert!(err.contains("404") && err.contains("no run"), "{id}: {err}");
    }
    let (ok, _, err) = client(&host, &["agent", "runs", "writer/../clerk"]);
    assert!(!ok);
    assert!(err.contains("404"), "{err}");
}
