//! The URLs a 202 hands out carry a token that opens them without a key, for
//! that instance or that run alone: the caller who started an orchestration
//! with an invoke key follows and manages it through the URLs it was given,
//! and follows the streams of the runs it leads to.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{ADMIN, INVOKE};
use crate::support::host::Host;
use crate::support::{client, FakeModel, HostBuilder, Reply};

fn keyed(dir: &std::path::Path, model: &FakeModel) -> Host {
    HostBuilder::new(dir)
        .components(&["writer", "orchestration-tests"])
        .openai(model, "sk")
        .arg("--api-key")
        .arg(&format!("admin:{ADMIN}"))
        .arg("--api-key")
        .arg(&format!("invoke:{INVOKE}"))
        .start()
}

/// Starts `orchestration` with an invoke key; the 202's body and `Location`.
async fn start(host: &Host, orchestration: &str, input: Value) -> (Value, String) {
    let response = client()
        .post(host.url(&format!("/api/orchestrators/{orchestration}")))
        .bearer_auth(INVOKE)
        .json(&input)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    (response.json().await.unwrap(), location)
}

fn uri(body: &Value, name: &str) -> String {
    body[name].as_str().unwrap().to_string()
}

/// `GET url` without a key: status and body.
async fn get(url: &str) -> (StatusCode, Value) {
    let response = client().get(url).send().await.unwrap();
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Polls the status URL (without a key) until the instance is `status`.
async fn wait_for(host: &Host, url: &str, status: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = get(url).await;
        if body["runtimeStatus"] == status {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{url} never {status}: {body}\n{}",
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invoke_caller_follows_and_manages_its_instance_by_the_urls_it_was_given_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = keyed(dir.path(), &model);
    let (first, location) = start(&host, "wait_event", json!(null)).await;
    let (second, _) = start(&host, "wait_event", json!(null)).await;
    let status_uri = uri(&first, "statusQueryGetUri");
    assert!(status_uri.contains("?token="), "{first}");
    assert_eq!(location, status_uri);

    // Its status, without a key.
    let (status, body) = get(&status_uri).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["instanceId"], first["id"]);

    // Its token opens nothing else: another instance, the list, the stream
    // of a run named like the instance.
    let token = status_uri.split("?token=").nth(1).unwrap();
    let instances = host.url("/runtime/webhooks/durabletask/instances");
    let other = uri(&second, "id");
    let own = uri(&first, "id");
    for (method, url) in [
        ("GET", format!("{instances}/{other}?token={token}")),
        ("DELETE", format!("{instances}/{other}?token={token}")),
        (
            "POST",
            format!("{instances}/{other}/terminate?token={token}"),
        ),
        (
            "POST",
            format!("{instances}/{other}/raiseEvent/go?token={token}"),
        ),
        ("GET", format!("{instances}?token={token}")),
        (
            "GET",
            host.url(&format!(
                "/api/agents/writer/runs/{own}/stream?token={token}"
            )),
        ),
        (
            "GET",
            host.url(&format!("/api/agents/writer/runs/{own}?token={token}")),
        ),
    ] {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let response = client()
            .request(method.clone(), &url)
            .json(&json!(null))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{method} {url}");
    }
    let (status, _) = get(&format!("{instances}/{own}?token={token}00")).await;
    assert_eq!(status, 401, "a token altered");

    // Its event URL, without a key: the instance completes with the payload.
    let raise = uri(&first, "sendEventPostUri").replace("{eventName}", "go");
    let response = client()
        .post(&raise)
        .json(&json!("done"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let done = wait_for(&host, &status_uri, "Completed").await;
    assert_eq!(done["output"], "done");

    // The other instance's own URLs suspend, resume, terminate and purge it.
    let second_status = uri(&second, "statusQueryGetUri");
    for (name, then) in [
        ("suspendPostUri", Some("Suspended")),
        ("resumePostUri", None),
        ("terminatePostUri", Some("Terminated")),
    ] {
        let url = uri(&second, name).replace("{text}", "by-its-starter");
        let response = client().post(&url).send().await.unwrap();
        assert_eq!(response.status(), 202, "{name}");
        if let Some(then) = then {
            wait_for(&host, &second_status, then).await;
        }
    }
    let purge = client()
        .delete(uri(&second, "purgeHistoryDeleteUri"))
        .send()
        .await
        .unwrap();
    assert_eq!(purge.status(), 200);
    let (status, body) = get(&second_status).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["errorCode"], "instance_not_found");
}

/// `GET url` as text, without a key.
/// A caller who started an id and kept its URLs after it finished gets
/// nothing of the instance started later under the same id (by anyone),
/// while that instance's own URLs work.
#[tokio::test(flavor = "multi_thread")]
async fn urls_kept_from_a_finished_instance_open_nothing_of_a_later_one_with_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = keyed(dir.path(), &model);
    let (before, _) = start(&host, "wait_event/order-42", json!(null)).await;
    let kept = uri(&before, "statusQueryGetUri");
    let raise = uri(&before, "sendEventPostUri").replace("{eventName}", "go");
    let response = client()
        .post(&raise)
        .json(&json!("first"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    wait_for(&host, &kept, "Completed").await;

    // Someone starts the id again: a new instance.
    let (after, _) = start(&host, "wait_event/order-42", json!(null)).await;
    let fresh = uri(&after, "statusQueryGetUri");
    assert_ne!(fresh, kept, "a new token for the new instance");
    let (status, body) = get(&fresh).await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = get(&kept).await;
    assert_eq!(status, 401, "the kept URL reads the new instance: {body}");
    let response = client()
        .post(&raise)
        .json(&json!("stolen"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        401,
        "the kept URL raises on the new instance"
    );
    let terminate = uri(&before, "terminatePostUri").replace("{text}", "x");
    let response = client().post(&terminate).send().await.unwrap();
    assert_eq!(
        response.status(),
        401,
        "the kept URL terminates the new instance"
    );
    let (_, body) = get(&fresh).await;
    assert_eq!(body["runtimeStatus"], "Running", "{body}");
}

async fn read_stream(url: &str) -> (StatusCode, String) {
    let response = client()
        .get(url)
        .header("accept", "text/plain")
        .send()
        .await
        .unwrap();
    (response.status(), response.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread")]
async fn stream_urls_of_a_decision_and_of_an_instances_agent_runs_open_that_run_alone() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = keyed(dir.path(), &model);

    // A run that waits for a decision; decided with an invoke key.
    model.push(Reply::ToolCall(
        "refund".into(),
        json!({"order": "A1", "amount": 2000}),
    ));
    model.push(Reply::ToolResult);
    let waiting: Value = client()
        .post(host.url("/api/agents/clerk/run"))
        .bearer_auth(INVOKE)
        .json(&json!({"message": "Refund order A1."}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(waiting["status"], "awaiting_approval", "{waiting}");
    let clerk_run = uri(&waiting, "correlationId");
    let decided = client()
        .post(host.url(&format!("/api/agents/clerk/runs/{clerk_run}/approvals")))
        .bearer_auth(INVOKE)
        .json(&json!({"call_id": "call_refund", "approved": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 202);
    let decided: Value = decided.json().await.unwrap();
    let decision_stream = uri(&decided, "streamUrl");
    assert!(decision_stream.contains("?token="), "{decided}");
    let (status, text) = read_stream(&host.url(&decision_stream)).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.starts_with("tool said:"), "{text}");

    // An orchestration's agent call: its run's stream URL, read through the
    // instance's own status URL with its history.
    model.push(Reply::Text("From the orchestration.".into()));
    let (started, _) = start(&host, "ask_writer", json!("write something")).await;
    let status_uri = uri(&started, "statusQueryGetUri");
    wait_for(&host, &status_uri, "Completed").await;
    let (status, body) = get(&format!("{status_uri}&showHistory=true")).await;
    assert_eq!(status, 200, "{body}");
    let run_stream = body["agentRuns"][0]["streamUrl"]
        .as_str()
        .unwrap_or_else(|| panic!("{body}"))
        .to_string();
    assert!(run_stream.contains("?token="), "{body}");
    let (status, text) = read_stream(&host.url(&run_stream)).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(text, "From the orchestration.");

    // Each token on the other run's stream, and on its record.
    let writer_run = body["agentRuns"][0]["correlationId"].as_str().unwrap();
    let decision_token = decision_stream.split("?token=").nth(1).unwrap();
    let run_token = run_stream.split("?token=").nth(1).unwrap();
    for path in [
        format!("/api/agents/writer/runs/{writer_run}/stream?token={decision_token}"),
        format!("/api/agents/clerk/runs/{clerk_run}/stream?token={run_token}"),
        format!("/api/agents/clerk/runs/{clerk_run}?token={decision_token}"),
    ] {
        let (status, _) = read_stream(&host.url(&path)).await;
        assert_eq!(status, 401, "{path}");
    }
}
