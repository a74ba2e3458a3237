//! Runs stopped and listed by their callers: `POST
//! /api/agents/{name}/runs/{id}/cancel` stops a run mid-turn, one waiting
//! for a human at once (its calls closed for the session's next run), a
//! queued one when its turn comes without asking the model; an ended run
//! is refused; an orchestration's agent call that is canceled fails its
//! task with a clear error; through a front, the worker executing the run
//! stops it. `GET /api/agents/{name}/runs` pages newest first with filters
//! and answers bad parameters with a JSON 400.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::durable::{start, wait_for};
use crate::support::host::{test_store, Host};
use crate::support::{client, wait_run_finished, FakeModel, HostBuilder, Reply};

fn builder(dir: &std::path::Path, model: &FakeModel) -> HostBuilder {
    HostBuilder::new(dir)
        .components(&["orchestration-tests"])
        .openai(model, "sk")
}

/// Queues a run of `clerk` without waiting; its correlation id.
async fn queue(host: &Host, message: &str, session: &str) -> String {
    let response = client()
        .post(host.url("/api/agents/clerk/run"))
        .json(&json!({"message": message, "sessionId": session, "waitForResponse": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202, "{message}");
    let body: Value = response.json().await.unwrap();
    body["correlationId"].as_str().unwrap().to_string()
}

async fn cancel(host: &Host, id: &str) -> (u16, Value) {
    let response = client()
        .post(host.url(&format!("/api/agents/clerk/runs/{id}/cancel")))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

async fn get(host: &Host, path: &str) -> (u16, Value) {
    let response = client().get(host.url(path)).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

/// Waits until the model has been asked `n` times.
async fn asked(model: &FakeModel, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while model.requests().len() < n {
        assert!(Instant::now() < deadline, "the model was never asked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_stopped_mid_turn_ends_canceled_and_its_session_goes_on_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = builder(dir.path(), &model).start();
    // A turn that would take a minute: the cancel must not wait for it.
    model.push(Reply::Delay(
        Duration::from_secs(60),
        Box::new(Reply::Text("never seen".into())),
    ));
    let id = queue(&host, "Count to a million.", "s1").await;
    asked(&model, 1).await;
    let started = Instant::now();
    let (status, body) = cancel(&host, &id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "canceled", "{body}");
    assert_eq!(body["code"], "canceled", "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    let (_, run) = get(&host, &format!("/api/agents/clerk/runs/{id}")).await;
    assert_eq!(run["status"], "canceled", "{run}");
    // Its stream ends too, saying why.
    let stream = client()
        .get(host.url(&format!("/api/agents/clerk/runs/{id}/stream")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(stream.contains("canceled"), "{stream}");
    // A reader that reconnects after the last entry (as EventSource does)
    // is told nothing will follow, at once, and holds no follower's place.
    let last_id = stream
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("id:"))
        .map(|id| id.trim().to_string())
        .unwrap_or_else(|| panic!("no entry ids: {stream}"));
    let again = client()
        .get(host.url(&format!("/api/agents/clerk/runs/{id}/stream")))
        .header("last-event-id", &last_id)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 204);
    // Its whole text is refused as a cancellation, not as a failure (502).
    let (status, body) = {
        let response = client()
            .get(host.url(&format!("/api/agents/clerk/runs/{id}/stream")))
            .header("accept", "text/plain")
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json::<Value>().await.unwrap_or_default())
    };
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "canceled", "{body}");
    // The next run of the session is asked without the canceled one's
    // message: it never became part of the conversation.
    model.push(Reply::Echo);
    let response = client()
        .post(host.url("/api/agents/clerk/run"))
        .json(&json!({"message": "Hello again.", "sessionId": "s1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let transcript = model.requests().last().unwrap().transcript();
    assert!(
        !transcript.iter().any(|m| m.contains("million")),
        "{transcript:?}"
    );
    // Cancelling again, now that it ended, is refused.
    let (status, body) = cancel(&host, &id).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["code"], "run_not_cancelable", "{body}");
    assert_eq!(body["status"], "canceled", "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_waiting_for_a_human_is_canceled_at_once_and_its_calls_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = builder(dir.path(), &model).start();
    model.push(Reply::ToolCall(
        "refund".into(),
        json!({"order": "A1", "amount": 2000}),
    ));
    let response = client()
        .post(host.url("/api/agents/clerk/run"))
        .json(&json!({"message": "Refund order A1.", "sessionId": "c1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "awaiting_approval", "{body}");
    let id = body["correlationId"].as_str().unwrap().to_string();

    let (status, body) = cancel(&host, &id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "canceled", "{body}");
    assert!(body.get("pendingApprovals").is_none(), "{body}");
    // Nothing waits for a decision any more.
    let decided = client()
        .post(host.url(&format!("/api/agents/clerk/runs/{id}/approvals")))
        .json(&json!({"callId": "call_refund", "approved": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 404);
    // The session goes on: the model sees the call answered as not run.
    model.push(Reply::Echo);
    let response = client()
        .post(host.url("/api/agents/clerk/run"))
        .json(&json!({"message": "Never mind.", "sessionId": "c1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let messages = model.requests().last().unwrap().messages();
    let closed = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool result: {messages:?}"));
    assert_eq!(closed["tool_call_id"], "call_refund");
    assert!(
        closed["content"].as_str().unwrap().contains("canceled"),
        "{closed}"
    );
    assert_eq!(model.requests().len(), 2, "the refund was never run again");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queued_run_ends_canceled_when_its_turn_comes_without_asking_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = builder(dir.path(), &model).start();
    model.push(Reply::Delay(
        Duration::from_millis(1_500),
        Box::new(Reply::Echo),
    ));
    let first = queue(&host, "first", "q1").await;
    asked(&model, 1).await;
    let second = queue(&host, "second", "q1").await;
    let (status, body) = cancel(&host, &second).await;
    // Behind the first run, it ends when the first one has.
    assert!(status == 202 || status == 200, "{status} {body}");
    if status == 202 {
        assert_eq!(body["status"], "pending", "{body}");
        assert_eq!(body["cancelRequested"], true, "{body}");
    }
    let done = wait_run_finished(&host.url(&format!("/api/agents/clerk/runs/{second}"))).await;
    assert_eq!(done["status"], "canceled", "{done}");
    let done = wait_run_finished(&host.url(&format!("/api/agents/clerk/runs/{first}"))).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(model.requests().len(), 1, "the canceled run never asked");
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_are_listed_newest_first_in_pages_with_filters_and_bad_parameters_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = builder(dir.path(), &model).start();
    let mut ids = Vec::new();
    for (i, session) in ["a", "a", "b", "a", "b"].iter().enumerate() {
        let response = client()
            .post(host.url("/api/agents/clerk/run"))
            .json(&json!({"message": format!("m{i}"), "sessionId": session}))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        ids.push(
            response.headers()["x-ms-correlation-id"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    model.push(Reply::Delay(Duration::from_secs(60), Box::new(Reply::Echo)));
    let slow = queue(&host, "slow", "c").await;
    asked(&model, 6).await;
    let (status, body) = cancel(&host, &slow).await;
    assert_eq!(status, 200, "{body}");

    // Pages of two, newest first, until `next` is absent.
    let mut listed = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..10 {
        let path = match &after {
            Some(a) => format!("/api/agents/clerk/runs?limit=2&after={a}"),
            None => "/api/agents/clerk/runs?limit=2".to_string(),
        };
        let (status, page) = get(&host, &path).await;
        assert_eq!(status, 200, "{page}");
        let runs = page["runs"].as_array().unwrap();
        assert!(runs.len() <= 2, "{page}");
        listed.extend(
            runs.iter()
                .map(|r| r["correlationId"].as_str().unwrap().to_string()),
        );
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_string()),
            None => break,
        }
    }
    let mut expected = ids.clone();
    expected.push(slow.clone());
    expected.reverse();
    assert_eq!(listed, expected);

    let ids_of = |page: &Value| -> Vec<String> {
        page["runs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["correlationId"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, page) = get(&host, "/api/agents/clerk/runs?sessionId=b").await;
    assert_eq!(ids_of(&page), vec![ids[4].clone(), ids[2].clone()]);
    let (_, page) = get(&host, "/api/agents/clerk/runs?thread_id=a&status=completed").await;
    assert_eq!(
        ids_of(&page),
        vec![ids[3].clone(), ids[1].clone(), ids[0].clone()]
    );
    let (_, page) = get(&host, "/api/agents/clerk/runs?status=canceled").await;
    assert_eq!(ids_of(&page), vec![slow.clone()]);
    assert_eq!(page["runs"][0]["status"], "canceled");
    let (_, page) = get(&host, "/api/agents/clerk/runs?status=failed").await;
    assert_eq!(
        ids_of(&page),
        Vec::<String>::new(),
        "a canceled run is not a failed one"
    );

    let (_, page) = get(&host, "/api/agents/clerk/runs?threadId=b").await;
    assert_eq!(ids_of(&page), vec![ids[4].clone(), ids[2].clone()]);
    for (query, code) in [
        ("status=done", "invalid_filter"),
        // A misspelt filter must not list every run as if it had filtered.
        ("session=b", "invalid_query"),
        ("Limit=5", "invalid_query"),
        ("sessionId=%00", "invalid_path"),
        ("limit=0", "invalid_limit"),
        ("limit=101", "invalid_limit"),
        ("limit=ten", "invalid_limit"),
        ("after=yesterday", "invalid_cursor"),
    ] {
        let (status, body) = get(&host, &format!("/api/agents/clerk/runs?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["code"], code, "{query}: {body}");
    }
    let (status, body) = get(&host, "/api/agents/nobody/runs").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], "agent_not_found", "{body}");
    let (status, body) = cancel(&host, "no-such-run").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["code"], "run_not_found", "{body}");
    let (status, body) = cancel(&host, "%00").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "invalid_path", "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_orchestrations_agent_call_that_is_canceled_fails_its_task_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = builder(dir.path(), &model).start();
    model.push(Reply::Delay(Duration::from_secs(60), Box::new(Reply::Echo)));
    let instance = start(&host, "ask_clerk", &json!("Anything to refund?")).await;
    asked(&model, 1).await;
    let (_, page) = get(&host, "/api/agents/clerk/runs?status=pending").await;
    let run = page["runs"][0]["correlationId"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(run.starts_with(&instance), "{run} of {instance}");
    let (status, body) = cancel(&host, &run).await;
    assert_eq!(status, 200, "{body}");
    let done = wait_for(&host, &instance, &["Failed"]).await;
    let output = done["output"].to_string();
    assert!(
        output.contains("the call of agent 'clerk' was canceled"),
        "{done}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn through_a_front_the_worker_executing_the_run_stops_it() {
    if test_store().is_none() {
        return; // A front needs a shared hub (PostgreSQL).
    }
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let _worker = builder(dir.path(), &model).start_worker();
    let front = builder(dir.path(), &model).arg("--no-worker").start();
    model.push(Reply::Delay(Duration::from_secs(60), Box::new(Reply::Echo)));
    let id = queue(&front, "Take your time.", "f1").await;
    asked(&model, 1).await;
    let started = Instant::now();
    let (status, body) = cancel(&front, &id).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "canceled", "{body}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // The session's next run, through the front, completes on the worker.
    model.push(Reply::Echo);
    let response = client()
        .post(front.url("/api/agents/clerk/run"))
        .json(&json!({"message": "Quick one.", "sessionId": "f1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cancel_request_outlives_a_kill_9_of_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let mut host = builder(dir.path(), &model).start();
    model.push(Reply::Delay(Duration::from_secs(60), Box::new(Reply::Echo)));
    let first = queue(&host, "first", "k1").await;
    asked(&model, 1).await;
    let second = queue(&host, "second", "k1").await;
    let (status, body) = cancel(&host, &second).await;
    assert_eq!(status, 202, "queued behind a turn of a minute: {body}");
    assert_eq!(body["cancelRequested"], true, "{body}");
    host.kill();

    // The next start resumes the first run and ends the second as asked,
    // without asking the model for it.
    let host = builder(dir.path(), &model).start();
    let done = wait_run_finished(&host.url(&format!("/api/agents/clerk/runs/{first}"))).await;
    assert_eq!(done["status"], "completed", "{done}");
    let done = wait_run_finished(&host.url(&format!("/api/agents/clerk/runs/{second}"))).await;
    assert_eq!(done["status"], "canceled", "{done}");
    let asked_for_second = model
        .requests()
        .iter()
        .filter(|r| r.transcript().iter().any(|m| m == "user: second"))
        .count();
    assert_eq!(asked_for_second, 0);
    assert_eq!(model.requests().len(), 2, "the first run, asked again");
}

#[tokio::test(flavor = "multi_thread")]
async fn nul_characters_are_refused_in_ids_and_kept_out_of_the_store_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = builder(dir.path(), &model).start();
    // An id with NUL: refused at the edge, on every store.
    let response = client()
        .post(host.url("/api/agents/clerk/run"))
        .json(&json!({"message": "hi", "sessionId": "a\u{0}b"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "invalid_session_id", "{body}");
    // Text with NUL, from a caller and from the model: the run completes
    // (PostgreSQL refuses NUL in text, and used to refuse the whole batch).
    model.push(Reply::Text("before\u{0}after".into()));
    let response = client()
        .post(host.url("/api/agents/clerk/run"))
        .header("accept", "application/json")
        .json(&json!({"message": "one\u{0}two", "sessionId": "n1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    let id = body["correlationId"].as_str().unwrap().to_string();
    let (_, run) = get(&host, &format!("/api/agents/clerk/runs/{id}")).await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["response"], "before\u{FFFD}after", "{run}");
    let (status, health) = get(&host, "/api/health").await;
    assert_eq!(status, 200, "the store took every write: {health}");
    let (_, page) = get(&host, "/api/agents/clerk/runs?sessionId=n1").await;
    assert_eq!(page["runs"][0]["message"], "one\u{FFFD}two", "{page}");
}
