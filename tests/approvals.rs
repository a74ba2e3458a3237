//! Tool calls a human must approve (`always-require`): the run waits with
//! the pending call listed; approved, the tool runs in the component and
//! the answer uses its result; denied, the model sees the refusal and its
//! reason; a host restarted while waiting still takes the decision; the
//! deadline denies; an orchestration's agent call waits the same way; a
//! waiting run is left alone until its decision.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::durable::{instance_url, start, wait_for};
use crate::support::host::Host;
use crate::support::{client, wait_run_finished, FakeModel, HostBuilder, Reply};

fn clerk(dir: &std::path::Path, model: &FakeModel) -> HostBuilder {
    HostBuilder::new(dir)
        .components(&["orchestration-tests"])
        .openai(model, "sk")
}

/// The model asks for a refund, then answers with what the tool said.
fn script(model: &FakeModel) {
    model.push(Reply::ToolCall(
        "refund".into(),
        json!({"order": "A1", "amount": 2000}),
    ));
    model.push(Reply::ToolResult);
}

/// A synchronous run that comes back 202, waiting for a decision.
async fn awaiting(host: &Host) -> (String, Value) {
    awaiting_with(
        host,
        json!({"message": "Refund order A1, 20 euros.", "sessionId": "c1"}),
    )
    .await
}

/// [`awaiting`], the run asked for with `body`.
async fn awaiting_with(host: &Host, body: Value) -> (String, Value) {
    let response = client()
        .post(host.url("/api/agents/clerk/run"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "awaiting_approval", "{body}");
    let pending = &body["pendingApprovals"][0];
    assert_eq!(pending["tool"], "refund");
    assert_eq!(pending["callId"], "call_refund");
    // The arguments as the object the model wrote, not JSON in a string.
    assert_eq!(pending["arguments"], json!({"order": "A1", "amount": 2000}));
    let id = body["correlationId"].as_str().unwrap().to_string();
    let run: Value = client()
        .get(host.url(&format!("/api/agents/clerk/runs/{id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "awaiting_approval", "{run}");
    (id, body)
}

async fn decide(host: &Host, id: &str, decision: Value) -> reqwest::Response {
    client()
        .post(host.url(&format!("/api/agents/clerk/runs/{id}/approvals")))
        .json(&decision)
        .send()
        .await
        .unwrap()
}

async fn finished(host: &Host, id: &str) -> Value {
    wait_run_finished(&host.url(&format!("/api/agents/clerk/runs/{id}"))).await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approved_call_runs_in_the_component_and_the_answer_uses_its_result() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = clerk(dir.path(), &model).start();
    script(&model);
    let (id, body) = awaiting(&host).await;
    assert_eq!(model.requests().len(), 1, "the model waits too");
    assert_eq!(
        body["approvalsUrl"],
        format!("/api/agents/clerk/runs/{id}/approvals")
    );
    let approved = decide(
        &host,
        &id,
        json!({"call_id": "call_refund", "approved": true}),
    )
    .await;
    assert_eq!(approved.status(), 202);
    let run = finished(&host, &id).await;
    assert_eq!(run["status"], "completed", "{run}");
    let answer = run["response"].as_str().unwrap();
    assert!(
        answer.contains(r#"{"amount":2000,"refunded":"A1"}"#)
            || answer.contains(r#""refunded":"A1""#),
        "{answer}"
    );
    // Decided already: refused, whatever the new decision.
    let again = decide(
        &host,
        &id,
        json!({"callId": "call_refund", "approved": false}),
    )
    .await;
    assert_eq!(again.status(), 409);
    let unknown = decide(&host, &id, json!({"call_id": "nope", "approved": true})).await;
    assert_eq!(unknown.status(), 404);
    let bad = decide(&host, &id, json!({"approved": "yes"})).await;
    assert_eq!(bad.status(), 400);
}

/// A run waiting for a human has nothing to do until a decision: no pass
/// over the sessions (once a second on a shared hub) runs it again. (A run
/// posted while the host's start-up pass looks for unfinished runs is woken
/// twice, and the second execution finds it waiting once more: that one
/// look is allowed, not a look every second.)
/// On a session the host minted, the run's start is held back until its
/// first write (tests/held_runs.rs): here the tool round's messages, stored
/// before the human is asked. The waiting run is then stored, listed and
/// decided as any other.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_on_a_minted_session_is_stored_before_it_asks_a_human() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = clerk(dir.path(), &model).start();
    script(&model);
    let (id, _) = awaiting_with(&host, json!({"message": "Refund order A1, 20 euros."})).await;
    let listed: Value = client()
        .get(host.url("/api/agents/clerk/runs?status=awaiting_approval"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["runs"][0]["correlationId"], id.as_str(), "{listed}");
    let approved = decide(
        &host,
        &id,
        json!({"call_id": "call_refund", "approved": true}),
    )
    .await;
    assert_eq!(approved.status(), 202);
    let run = finished(&host, &id).await;
    assert_eq!(run["status"], "completed", "{run}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_run_is_run_again_only_by_its_decision() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = clerk(dir.path(), &model).start();
    script(&model);
    let (id, _) = awaiting(&host).await;
    let waits = || {
        host.output()
            .matches("the run waits for a human's approval")
            .count()
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let settled = waits();
    assert!((1..=2).contains(&settled), "{}", host.output());
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(waits(), settled, "{}", host.output());
    let approved = decide(
        &host,
        &id,
        json!({"call_id": "call_refund", "approved": true}),
    )
    .await;
    assert_eq!(approved.status(), 202);
    assert_eq!(finished(&host, &id).await["status"], "completed");
    assert_eq!(waits(), settled, "{}", host.output());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_denied_call_is_not_run_and_the_model_sees_the_refusal_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = clerk(dir.path(), &model).start();
    script(&model);
    let (id, _) = awaiting(&host).await;
    let denied = decide(
        &host,
        &id,
        json!({"call_id": "call_refund", "approved": false, "reason": "over the refund limit"}),
    )
    .await;
    assert_eq!(denied.status(), 202);
    let run = finished(&host, &id).await;
    assert_eq!(run["status"], "completed", "{run}");
    let seen = model.requests()[1].last_tool_result().unwrap();
    assert!(
        seen.contains("a human denied this call of 'refund': over the refund limit"),
        "{seen}"
    );
    assert!(!seen.contains("refunded"), "the tool did not run: {seen}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_restarted_while_a_call_waits_still_takes_the_decision() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let builder = clerk(dir.path(), &model);
    let mut host = builder.start();
    script(&model);
    let (id, _) = awaiting(&host).await;
    host.kill();
    let host = builder.start();
    let approved = decide(
        &host,
        &id,
        json!({"call_id": "call_refund", "approved": true}),
    )
    .await;
    assert_eq!(approved.status(), 202);
    let run = finished(&host, &id).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert!(
        run["response"].as_str().unwrap().contains("refunded"),
        "{run}"
    );
    assert_eq!(
        model.requests().len(),
        2,
        "the model was not asked again for the call"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn no_decision_before_the_deadline_denies_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = clerk(dir.path(), &model)
        .arg("--approval-timeout")
        .arg("1s")
        .start();
    script(&model);
    let (id, _) = awaiting(&host).await;
    let run = finished(&host, &id).await;
    assert_eq!(run["status"], "completed", "{run}");
    let seen = model.requests()[1].last_tool_result().unwrap();
    assert!(
        seen.contains("no decision before the approval deadline"),
        "{seen}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_orchestration_waits_on_its_agents_approval_and_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = clerk(dir.path(), &model).start();
    script(&model);
    let instance = start(&host, "ask_clerk", &json!("Refund order A1.")).await;
    let url = format!("{}?showHistory=true", instance_url(&host, &instance));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let run = loop {
        let status: Value = client()
            .get(&url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let run = status["agentRuns"][0].clone();
        if run["status"] == "awaiting_approval" {
            break run;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(run["pendingApprovals"][0]["tool"], "refund", "{run}");
    let id = run["correlationId"].as_str().unwrap();
    let approved = decide(
        &host,
        id,
        json!({"call_id": "call_refund", "approved": true}),
    )
    .await;
    assert_eq!(approved.status(), 202);
    let done = wait_for(&host, &instance, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert!(
        done["output"].as_str().unwrap().contains("refunded"),
        "{done}"
    );
}
