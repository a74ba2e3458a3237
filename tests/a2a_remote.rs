//! The durable A2A client: an orchestration in host 1 calls an agent of
//! host 2 (`call-remote-agent`, within the component's `allowed_hosts`).
//! Host 1 killed with -9 mid-call goes on by the remote task it stored, and
//! host 2 sees one task; a message sent again with its `messageId` finds the
//! task the first started (so a crash before the task id was stored sends
//! nothing new); a remote task waiting for a human shows as the instance's
//! custom status until it goes on; a remote that is down when the call is
//! sent gets it once it is up; a host the grants do not name, or a card
//! that is not A2A, fails the call naming why.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::durable::{start, wait_for, wait_for_custom_status};
use crate::support::host::Host;
use crate::support::{client, FakeModel, HostBuilder, Reply};

/// Host 2: serves the test component's agents (`tuned`, `clerk`) over A2A.
fn remote(dir: &Path, model: &FakeModel) -> Host {
    HostBuilder::new(dir)
        .components(&["orchestration-tests"])
        .openai(model, "sk")
        .start()
}

/// Host 1's builder, its component granted `grant` (none when `None`).
fn caller(dir: &Path, model: &FakeModel, grant: Option<&str>) -> HostBuilder {
    let components = dir.join("components");
    std::fs::create_dir_all(&components).unwrap();
    if let Some(grant) = grant {
        std::fs::write(
            components.join("orchestration-tests.toml"),
            format!("allowed_hosts = [\"{grant}\"]\n"),
        )
        .unwrap();
    }
    HostBuilder::new(dir)
        .components(&["orchestration-tests"])
        .openai(model, "sk")
}

fn authority(host: &Host) -> String {
    host.base.trim_start_matches("http://").to_string()
}

fn card_of(host: &Host, agent: &str) -> String {
    host.url(&format!("/a2a/{agent}/.well-known/agent-card.json"))
}

async fn runs_of(host: &Host, agent: &str) -> Vec<Value> {
    let page: Value = client()
        .get(host.url(&format!("/api/agents/{agent}/runs?limit=100")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    page["runs"].as_array().cloned().unwrap_or_default()
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_caller_killed_mid_call_goes_on_by_the_remote_task_and_the_remote_saw_one_task() {
    let (dir1, dir2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (model1, model2) = (FakeModel::start().await, FakeModel::start().await);
    // Slow enough for host 1 to die and come back while the task works.
    model2.push(Reply::Delay(
        Duration::from_secs(3),
        Box::new(Reply::Text("the remote answer".into())),
    ));
    let host2 = remote(dir2.path(), &model2);
    let builder = caller(dir1.path(), &model1, Some(&authority(&host2)));
    let mut host1 = builder.start();
    let input =
        json!({"card": card_of(&host2, "tuned"), "message": "hello remote", "context": "ctx-1"});
    let id = start(&host1, "remote_call", &input).await;
    // Host 2 is asking its model: the remote task was sent and works.
    until("host 2's model turn", || model2.requests().len() == 1).await;
    host1.kill();
    let host1 = builder.start();
    let done = wait_for(&host1, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(
        done["output"],
        json!({"answer": "the remote answer"}),
        "{done}"
    );
    assert_eq!(model2.requests().len(), 1, "host 2 asked its model once");
    let runs = runs_of(&host2, "tuned").await;
    assert_eq!(runs.len(), 1, "host 2 saw one task: {runs:?}");
    assert_eq!(runs[0]["sessionId"], "ctx-1", "{runs:?}");
    assert!(
        model1.requests().is_empty(),
        "host 1 asked no model of its own"
    );
}

/// `SendMessage` of `message` to host's agent `tuned`; the JSON-RPC answer.
async fn send_message(host: &Host, message: Value, at_once: bool) -> Value {
    client()
        .post(host.url("/a2a/tuned"))
        .header("A2A-Version", "1.0")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": message,
                "configuration": {"returnImmediately": at_once},
            }}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_sent_again_with_its_message_id_finds_the_task_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = remote(dir.path(), &model);
    let hi = |id: &str| json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": "hi"}]});
    let task_of = |answer: Value| answer["result"]["task"].clone();
    let first = task_of(send_message(&host, hi("m-1"), true).await);
    let task = first["id"].as_str().unwrap().to_string();
    // Sent again, blocking: the same task, once it ended.
    let again = task_of(send_message(&host, hi("m-1"), false).await);
    assert_eq!(again["id"], task.as_str(), "{again}");
    assert_eq!(again["status"]["state"], "TASK_STATE_COMPLETED", "{again}");
    // The id again on another context, or with another text, is another
    // message, as the A2A SDKs take it: a task of its own (and its own
    // retry finds that one).
    let mut elsewhere = hi("m-1");
    elsewhere["contextId"] = json!("elsewhere");
    let mut other_text = hi("m-1");
    other_text["parts"] = json!([{"text": "bye"}]);
    let mut others = Vec::new();
    for other in [elsewhere, other_text] {
        let started = task_of(send_message(&host, other.clone(), true).await);
        let id = started["id"].as_str().unwrap_or("none").to_string();
        assert_ne!(id, task, "{started}");
        let retried = task_of(send_message(&host, other, true).await);
        assert_eq!(retried["id"], id.as_str(), "{retried}");
        others.push(id);
    }
    assert_ne!(others[0], others[1]);
    // A retry that names the context the first answer gave (sent without
    // one), or leaves out the one it named: the same task.
    let first_answer = task_of(send_message(&host, hi("m-3"), true).await);
    let mut named = hi("m-3");
    named["contextId"] = first_answer["contextId"].clone();
    let retried = task_of(send_message(&host, named, true).await);
    assert_eq!(retried["id"], first_answer["id"], "{retried}");
    let mut on_context = hi("m-4");
    on_context["contextId"] = json!("ctx-4");
    let first_on_context = task_of(send_message(&host, on_context, true).await);
    let retried = task_of(send_message(&host, hi("m-4"), true).await);
    assert_eq!(retried["id"], first_on_context["id"], "{retried}");
    // Five at once with one id: one task.
    let many =
        futures::future::join_all((0..5).map(|_| send_message(&host, hi("m-2"), true))).await;
    let ids: std::collections::HashSet<String> = many
        .iter()
        .map(|a| {
            a["result"]["task"]["id"]
                .as_str()
                .unwrap_or("none")
                .to_string()
        })
        .collect();
    assert_eq!(ids.len(), 1, "{many:?}");
    assert!(!ids.contains(&task), "another message id, another task");
    // A message without an id is a new task each time.
    let plain = json!({"role": "ROLE_USER", "parts": [{"text": "hi"}]});
    let first_plain = task_of(send_message(&host, plain.clone(), true).await);
    let second_plain = task_of(send_message(&host, plain, true).await);
    assert_ne!(first_plain["id"], second_plain["id"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let runs = runs_of(&host, "tuned").await;
        if runs.len() == 8 && runs.iter().all(|r| r["status"] == "completed") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "eight tasks, each completed: {runs:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remote_task_waiting_for_a_human_shows_as_the_custom_status_until_it_goes_on() {
    let (dir1, dir2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (model1, model2) = (FakeModel::start().await, FakeModel::start().await);
    model2.push(Reply::ToolCall(
        "refund".into(),
        json!({"order": "A1", "amount": 2000}),
    ));
    model2.push(Reply::ToolResult);
    let host2 = remote(dir2.path(), &model2);
    let host1 = caller(dir1.path(), &model1, Some(&authority(&host2))).start();
    let input = json!({"card": card_of(&host2, "clerk"), "message": "Refund order A1"});
    let id = start(&host1, "remote_call", &input).await;
    let shown =
        wait_for_custom_status(&host1, &id, "/state", &json!("TASK_STATE_INPUT_REQUIRED")).await;
    let status = &shown["customStatus"];
    assert_eq!(status["waitingFor"], "remote-agent", "{shown}");
    assert_eq!(status["cardUrl"], card_of(&host2, "clerk").as_str());
    let task = status["taskId"].as_str().unwrap().to_string();
    let pending = &status["status"]["message"]["parts"][1]["data"]["pendingApprovals"][0];
    assert_eq!(pending["callId"], "call_refund", "{shown}");
    let decided = client()
        .post(host2.url(&format!("/api/agents/clerk/runs/{task}/approvals")))
        .json(&json!({"call_id": "call_refund", "approved": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 202);
    let done = wait_for(&host1, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    let answer = done["output"]["answer"].as_str().unwrap_or_default();
    assert!(answer.contains("refunded"), "{done}");
    assert_eq!(
        done["customStatus"],
        Value::Null,
        "the status the code had is back: {done}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_not_granted_or_a_card_that_is_not_a2a_fails_the_call_naming_why() {
    let (dir1, dir2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (model1, model2) = (FakeModel::start().await, FakeModel::start().await);
    let host2 = remote(dir2.path(), &model2);
    let ungranted = caller(dir1.path(), &model1, None).start();
    let id = start(
        &ungranted,
        "remote_call",
        &json!({"card": card_of(&host2, "tuned")}),
    )
    .await;
    let failed = wait_for(&ungranted, &id, &["Completed", "Failed"]).await;
    assert_eq!(failed["runtimeStatus"], "Failed", "{failed}");
    let why = failed["output"].to_string();
    assert!(
        why.contains("allowed_hosts") && why.contains(&authority(&host2)),
        "{why}"
    );
    drop(ungranted);
    let dir3 = tempfile::tempdir().unwrap();
    let granted = caller(dir3.path(), &model1, Some(&authority(&host2))).start();
    let cases = [
        (
            host2.url("/api/openapi.json"),
            "names no JSON-RPC interface",
        ),
        (
            "ftp://example.com/card".to_string(),
            "is not an http or https URL",
        ),
        (card_of(&host2, "nobody"), "HTTP 404"),
    ];
    for (card, expected) in cases {
        let id = start(&granted, "remote_call", &json!({ "card": card })).await;
        let failed = wait_for(&granted, &id, &["Completed", "Failed"]).await;
        assert_eq!(failed["runtimeStatus"], "Failed", "{failed}");
        let why = failed["output"].to_string();
        assert!(why.contains(expected), "{card}: {why}");
    }
    assert!(
        model2.requests().is_empty(),
        "no call reached host 2's agents"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_remote_down_when_the_call_is_sent_gets_it_once_it_is_up() {
    let (dir1, dir2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (model1, model2) = (FakeModel::start().await, FakeModel::start().await);
    // A port nothing listens on yet.
    let port = crate::support::free_port();
    let authority = format!("127.0.0.1:{port}");
    let host1 = caller(dir1.path(), &model1, Some(&authority)).start();
    let card = format!("http://{authority}/a2a/tuned/.well-known/agent-card.json");
    let id = start(
        &host1,
        "remote_call",
        &json!({"card": card, "message": "late"}),
    )
    .await;
    // The first sends find nobody; the call keeps trying.
    until("host 1 to try and fail", || {
        host1
            .output()
            .contains("the remote agent did not take the message")
    })
    .await;
    model2.push(Reply::Text("finally".into()));
    let _host2 = HostBuilder::new(dir2.path())
        .components(&["orchestration-tests"])
        .openai(&model2, "sk")
        .port(port)
        .start();
    let done = wait_for(&host1, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(done["output"], json!({"answer": "finally"}), "{done}");
    assert_eq!(model2.requests().len(), 1);
}
