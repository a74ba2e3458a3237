//! Asynchronous runs: 202 + correlation id, the run lookup, and a synchronous
//! run that outlives its wait budget answering 202 instead of failing.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{
    client, fake_model::echo_of, get_json, wait_run_finished, FakeModel, HostBuilder, Reply,
};

#[tokio::test(flavor = "multi_thread")]
async fn wait_for_response_false_answers_202_and_the_run_can_be_looked_up() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::Delay(
        Duration::from_millis(300),
        Box::new(Reply::Echo),
    ));
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk-test")
        .start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "Later, please", "wait_for_response": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "accepted");
    assert_eq!(body["response"], "Agent request accepted");
    assert_eq!(body["message"], "Later, please");
    let correlation = body["correlation_id"].as_str().unwrap();
    assert!(uuid::Uuid::parse_str(correlation).is_ok());
    let thread = body["thread_id"].as_str().unwrap();

    let url = host.url(&format!("/api/agents/writer/runs/{correlation}"));
    let early: Value = get_json(&url).await;
    assert!(
        ["pending", "running"].contains(&early["status"].as_str().unwrap()),
        "{early}"
    );
    let run = wait_run_finished(&url).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(run["response"], echo_of("Later, please"));
    assert_eq!(run["thread_id"], thread);
    // camelCase, as every other body, with the first snake_case names beside.
    assert_eq!(run["sessionId"], thread);
    assert_eq!(run["correlationId"], correlation);
    assert_eq!(run["correlation_id"], correlation);
    assert_eq!(run["createdAt"], run["created_at"]);
    assert_eq!(run["updatedAt"], run["updated_at"]);
    assert!(
        run["createdAt"].as_str().is_some_and(|t| t.ends_with('Z')),
        "{run}"
    );

    // Unknown run, and a run looked up under another agent: 404 JSON.
    let missing = client()
        .get(host.url("/api/agents/writer/runs/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    assert_eq!(
        missing.json::<Value>().await.unwrap()["code"],
        "run_not_found"
    );
    let other = client()
        .get(host.url(&format!("/api/agents/weather/runs/{correlation}")))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn query_parameter_and_header_also_make_a_run_asynchronous() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk-test")
        .start();
    let by_query = client()
        .post(host.url("/api/agents/writer/run?wait_for_response=false"))
        .body("q")
        .send()
        .await
        .unwrap();
    assert_eq!(by_query.status(), 202);
    let by_header = client()
        .post(host.url("/api/agents/writer/run"))
        .header("x-ms-wait-for-response", "false")
        .body("h")
        .send()
        .await
        .unwrap();
    assert_eq!(by_header.status(), 202);
    let body: Value = by_header.json().await.unwrap();
    let run = wait_run_finished(&host.url(&format!(
        "/api/agents/writer/runs/{}",
        body["correlation_id"].as_str().unwrap()
    )))
    .await;
    assert_eq!(run["response"], echo_of("h"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sync_run_past_its_wait_budget_answers_202_then_completes() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::Delay(Duration::from_secs(2), Box::new(Reply::Echo)));
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk-test")
        .arg("--max-poll-retries")
        .arg("2")
        .arg("--poll-interval")
        .arg("250ms")
        .start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .body("slow one")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        location,
        format!(
            "/api/agents/writer/runs/{}",
            body["correlation_id"].as_str().unwrap()
        )
    );
    // Stored before its id was handed out, though its start was held back
    // while nobody knew of it (tests/held_runs.rs).
    let early = client().get(host.url(&location)).send().await.unwrap();
    assert_eq!(early.status(), 200);
    let early: Value = early.json().await.unwrap();
    assert_ne!(early["status"], "completed", "{early}");
    let run = wait_run_finished(&host.url(&location)).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(run["response"], echo_of("slow one"));
}
