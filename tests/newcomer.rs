//! What a newcomer meets with no model and no setup: the offline model calls
//! a tool when asked `call TOOL with {json}` and answers with its result (an
//! approval too, end to end); `agenthost tool call` runs one tool of a
//! component file; `serve` makes a components directory that is not there;
//! an orchestration calls a tool of another component by name.

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{client, component, wait_run_finished, HostBuilder};

#[tokio::test(flavor = "multi_thread")]
async fn the_offline_model_calls_the_tool_a_message_names_and_answers_with_its_result() {
    let dir = tempfile::tempdir().unwrap();
    // No model configured: the offline model answers.
    let host = HostBuilder::new(dir.path())
        .components(&["doc-poet"])
        .start();
    let ask = |message: &'static str| {
        let url = host.url("/api/agents/poet/run");
        async move {
            let response = client().post(url).body(message).send().await.unwrap();
            assert_eq!(response.status(), 200);
            response.text().await.unwrap()
        }
    };
    // "a rose is a rose": seven vowels, so seven syllables by the tool's count.
    let answer = ask(r#"call count_syllables with {"text": "a rose is a rose"}"#).await;
    assert!(answer.contains("[offline model]"), "{answer}");
    assert!(
        answer.contains(r#"The tool returned: {"syllables":7}"#),
        "{answer}"
    );
    let unknown = ask("call rhyme with {}").await;
    assert!(
        unknown.contains("no tool named 'rhyme'") && unknown.contains("count_syllables"),
        "{unknown}"
    );
    // Anything else is the canned answer, as before.
    let plain = ask("Write a haiku").await;
    assert!(plain.contains("canned answer"), "{plain}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_that_needs_approval_waits_and_runs_once_approved_with_no_model() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .start();
    let response = client()
        .post(host.url("/api/agents/clerk/run"))
        .json(&json!({
            "message": r#"call refund with {"order": "A1", "amount": 2000}"#,
            "sessionId": "offline-approval",
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "awaiting_approval", "{body}");
    assert_eq!(
        body["pendingApprovals"][0]["callId"], "call_refund",
        "{body}"
    );
    let id = body["correlationId"].as_str().unwrap().to_string();
    let decided = client()
        .post(host.url(&format!("/api/agents/clerk/runs/{id}/approvals")))
        .json(&json!({"call_id": "call_refund", "approved": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 202);
    let run = wait_run_finished(&host.url(&format!("/api/agents/clerk/runs/{id}"))).await;
    assert_eq!(run["status"], "completed", "{run}");
    let answer = run["response"].as_str().unwrap_or_default();
    assert!(answer.contains(r#""refunded":"A1""#), "{answer}");
}

fn agenthost(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_agenthost"))
        .args(args)
        .env("AGENTHOST_LOG", "warn")
        .env(
            "AGENTHOST_CACHE_DIR",
            crate::support::host::test_artifact_cache(),
        )
        .output()
        .unwrap()
}

#[test]
fn tool_call_runs_one_tool_of_a_component_file_and_names_what_is_wrong() {
    let poet = component("doc-poet");
    let poet = poet.to_str().unwrap();
    let ran = agenthost(&[
        "tool",
        "call",
        poet,
        "count_syllables",
        r#"{"text": "tea"}"#,
    ]);
    assert!(ran.status.success(), "{ran:?}");
    let printed: Value = serde_json::from_slice(&ran.stdout).unwrap();
    assert_eq!(printed, json!({"syllables": 2}));
    let unknown = agenthost(&["tool", "call", poet, "rhyme"]);
    assert!(!unknown.status.success());
    let said = String::from_utf8_lossy(&unknown.stderr);
    assert!(
        said.contains("no tool named 'rhyme'") && said.contains("count_syllables"),
        "{said}"
    );
    for bad in ["{not json", "[1]", "\"x\""] {
        let refused = agenthost(&["tool", "call", poet, "count_syllables", bad]);
        assert!(!refused.status.success(), "{bad}");
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("must be a JSON object"),
            "{bad}"
        );
    }
    let wrong = agenthost(&["tool", "call", poet, "count_syllables", r#"{"line": 1}"#]);
    assert!(!wrong.status.success());
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("failed"),
        "{wrong:?}"
    );
}

/// A tool that waits for a human's approval under an agent runs when a
/// person calls it, and `tool call` says so; the component is compiled
/// once into the user's cache, and the next call loads it from there.
#[test]
fn tool_call_says_when_the_tool_needs_approval_and_compiles_a_component_once() {
    let cache = tempfile::tempdir().unwrap();
    let tests = component("orchestration-tests");
    let call = || {
        Command::new(env!("CARGO_BIN_EXE_agenthost"))
            .args(["tool", "call"])
            .arg(&tests)
            .args(["refund", r#"{"order": "A1", "amount": 5}"#])
            .env("AGENTHOST_LOG", "warn")
            .env("XDG_CACHE_HOME", cache.path())
            .env_remove("AGENTHOST_CACHE_DIR")
            .output()
            .unwrap()
    };
    let compiled = || {
        std::fs::read_dir(cache.path().join("agenthost/compiled"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
                    .count()
            })
            .unwrap_or(0)
    };
    let first = call();
    assert!(first.status.success(), "{first:?}");
    let printed: Value = serde_json::from_slice(&first.stdout).unwrap();
    assert_eq!(printed, json!({"refunded": "A1", "amount": 5}));
    assert!(
        String::from_utf8_lossy(&first.stderr).contains("needs a human's approval"),
        "{first:?}"
    );
    assert_eq!(compiled(), 1, "compiled into the user's cache");
    let modified = |p: &std::path::Path| std::fs::metadata(p).unwrap().modified().unwrap();
    let artifact = std::fs::read_dir(cache.path().join("agenthost/compiled"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .unwrap();
    let before = modified(&artifact);
    let second = call();
    assert!(second.status.success(), "{second:?}");
    assert_eq!(compiled(), 1);
    assert_eq!(modified(&artifact), before, "loaded, not compiled again");
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_makes_a_missing_components_directory_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("not-yet/components");
    let mut child = Command::new(env!("CARGO_BIN_EXE_agenthost"))
        .current_dir(dir.path())
        .args(["serve", "--port", "0", "--components"])
        .arg(&missing)
        .args(["--store"])
        .arg(format!("sqlite://{}", dir.path().join("a.db").display()))
        .env("AGENTHOST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !missing.is_dir() {
        assert!(std::time::Instant::now() < deadline, "no directory made");
        if let Some(status) = child.try_wait().unwrap() {
            let output = child.wait_with_output().unwrap();
            panic!(
                "serve exited ({status}): {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("created the components directory"), "{said}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_orchestration_calls_a_tool_of_another_component_and_an_unknown_one_is_named_once() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests", "doc-poet"])
        .start();
    let cases = [
        // By its name (one component offers it), and by component/name.
        ("count_syllables", json!({"ok": {"syllables": 2}})),
        ("doc-poet/count_syllables", json!({"ok": {"syllables": 2}})),
        (
            "nope",
            json!({"error": "no served component has an activity named 'nope'"}),
        ),
        (
            "doc-poet/nope",
            json!({"error": "component 'doc-poet' has no activity named 'nope'"}),
        ),
        (
            "elsewhere/count_syllables",
            json!({"error": "no served component is named 'elsewhere' (activity 'elsewhere/count_syllables')"}),
        ),
    ];
    for (activity, expected) in cases {
        let input = json!({"activity": activity, "input": {"text": "tea"}});
        let id = crate::support::durable::start(&host, "call_activity_of", &input).await;
        let done = crate::support::durable::wait_for(&host, &id, &["Completed", "Failed"]).await;
        assert_eq!(done["runtimeStatus"], "Completed", "{done}");
        assert_eq!(done["output"], expected, "{activity}: {done}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_that_needs_approval_is_not_run_for_another_components_orchestration() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests", "hostile"])
        .start();
    for activity in ["orchestration-tests/refund", "refund"] {
        let input = json!({"activity": activity, "input": {"order": "A1", "amount": 1}});
        let id = crate::support::durable::start(&host, "call_other_activity", &input).await;
        let done = crate::support::durable::wait_for(&host, &id, &["Completed", "Failed"]).await;
        let error = done["output"]["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("needs a human's approval before it runs"),
            "{activity}: {done}"
        );
    }
}
