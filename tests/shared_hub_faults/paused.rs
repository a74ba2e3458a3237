//! Workers paused past their lease (SIGSTOP, then SIGCONT) while a
//! shared hub's other worker takes their work over: mid-run, mid-activity,
//! before a model request, an activity's request or a tool's request has
//! left. Every write the woken worker tries is refused, and no request it
//! had not sent leaves after the take-over.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::host::test_store;
use crate::support::{client, FakeModel, HostBuilder};

/// A worker paused past its lease mid-run (SIGSTOP) loses the session to
/// another worker, which runs the run to its end; when the paused worker
/// wakes (SIGCONT), its model turn answers with a tool call, and every write
/// it then tries is refused by the session fence: the conversation holds one
/// answer, with no tool result after it, and the answer stays the other
/// worker's. PostgreSQL only (several hosts on one hub).
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_paused_past_its_lease_mid_run_writes_nothing_after_the_take_over() {
    if test_store().is_none() {
        return;
    }
    use crate::support::Reply;
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let builder = || {
        HostBuilder::new(dir.path())
            .components(&["weather"])
            .openai(&model, "sk")
            .arg("--lease")
            .arg("2s")
    };
    let front = builder().arg("--no-worker").start();
    let first = builder().start_worker();
    let city = serde_json::json!({"city": "Lisbon"});
    // The first worker's first turn is slow: it is paused while it waits.
    model.push(Reply::Delay(
        Duration::from_secs(6),
        Box::new(Reply::ToolCall("get_weather".into(), city.clone())),
    ));
    model.push(Reply::ToolCall("get_weather".into(), city.clone()));
    model.push(Reply::Text("It is sunny in Lisbon.".into()));
    model.push(Reply::Text("A stale answer.".into()));
    let queued = client()
        .post(front.url("/api/agents/weather/run"))
        .json(&serde_json::json!({"message": "Weather in Lisbon?", "sessionId": "fenced", "waitForResponse": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), 202);
    let body: Value = queued.json().await.unwrap();
    let id = body["correlationId"].as_str().unwrap().to_string();
    model.wait_for_requests(1, Duration::from_secs(20)).await;
    first.pause();
    let second = builder().start_worker();
    let run =
        crate::support::wait_run_finished(&front.url(&format!("/api/agents/weather/runs/{id}")))
            .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["response"], "It is sunny in Lisbon.", "{run}");
    // The paused worker wakes: its slow turn answers, it runs the tool and
    // tries to store the round, then to end the run.
    first.resume();
    model.wait_for_requests(3, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let (roles, session) = crate::support::session_roles(&front.base, "weather", "fenced").await;
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "assistant"],
        "{session}\n--- paused worker ---\n{}\n--- other worker ---\n{}",
        first.output(),
        second.output()
    );
    let run: Value = client()
        .get(front.url(&format!("/api/agents/weather/runs/{id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["response"], "It is sunny in Lisbon.", "{run}");
    assert!(
        first.output().contains("no longer owns session 'fenced'"),
        "{}",
        first.output()
    );
}

/// A worker paused after its owner check but before its model request has
/// left (here: the request is under way, held up by a network that went
/// silent, when the worker is paused) loses the session to another worker,
/// which asks the turn and ends the run. When the first wakes and the network
/// comes back, its request is past its send-by moment: the last byte is held
/// back and the connection cut, so the model never gets that turn whole.
/// The model is asked the turn once, by the new owner, and nothing after the
/// run ended. PostgreSQL only (several hosts on one hub).
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_paused_before_its_model_request_left_never_sends_it_after_the_take_over() {
    use crate::support::tcp_proxy::TcpProxy;
    use crate::support::Reply;
    if test_store().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let proxy = TcpProxy::start(model.addr).await;
    let builder = || {
        HostBuilder::new(dir.path())
            .components(&["writer"])
            .openai(&model, "sk")
            .arg("--lease")
            .arg("2s")
            .arg("--max-body-bytes")
            .arg("67108864")
    };
    let front = builder().arg("--no-worker").start();
    // The first worker reaches the model through the proxy, the second
    // directly.
    let first = builder()
        .env(
            "OPENAI_BASE_URL",
            &format!("http://127.0.0.1:{}/v1", proxy.port),
        )
        .start_worker();
    // Far more than loopback's socket buffers hold: the first worker's
    // request is still being written when the proxy stops reading.
    let message = format!("Summarize: {}", "lorem ipsum ".repeat(2 << 20));
    model.push(Reply::Text("The summary.".into()));
    proxy.set_silent(true);
    let queued = client()
        .post(front.url("/api/agents/writer/run"))
        .json(
            &serde_json::json!({"message": message, "sessionId": "late", "waitForResponse": false}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), 202);
    let body: Value = queued.json().await.unwrap();
    let id = body["correlationId"].as_str().unwrap().to_string();
    // The first worker checked it holds the session and began to send.
    let began = Instant::now();
    while proxy.accepted() == 0 {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "no model request began"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(model.requests().is_empty(), "the first request got through");
    first.pause();
    let second = builder().start_worker();
    let run =
        crate::support::wait_run_finished(&front.url(&format!("/api/agents/writer/runs/{id}")))
            .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["response"], "The summary.", "{run}");
    let ended = Instant::now();
    // The network comes back and the first worker wakes, mid-send.
    proxy.set_silent(false);
    first.resume();
    // The rest of its body (tens of MiB through the proxy) then goes out,
    // and the gate cuts it short: on a loaded machine that takes seconds, so
    // the check waits for the cut (bounded), then gives a request that got
    // through anyway a moment to arrive.
    let resumed = Instant::now();
    while !first.output().contains("cut short") && resumed.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let asked = model.requests();
    assert_eq!(
        asked.len(),
        1,
        "the model was asked {} times ({:.1} s after the run ended: {:?})\n--- paused worker ---\n{}\n--- other worker ---\n{}",
        asked.len(),
        ended.elapsed().as_secs_f64(),
        asked.iter().map(|r| r.at_ms).collect::<Vec<_>>(),
        first.output(),
        second.output()
    );
    // Stopped by the send-by gate mid-send; or, on a loaded machine, its
    // stalled connection timed out during the pause and the retry found the
    // session gone before it sent. Either way, never sent.
    let out = first.output();
    assert!(
        out.contains("cut short") || out.contains("no longer owns session 'late'"),
        "{out}"
    );
    let (roles, session) = crate::support::session_roles(&front.base, "writer", "late").await;
    assert_eq!(roles, ["user", "assistant"], "{session}");
}

/// A worker paused past its lease mid-activity (SIGSTOP while the activity
/// waits for its server) loses the instance to another worker, which runs
/// the unfinished activity again and the rest to the end. When the paused
/// worker wakes, its activity returns and it tries to deliver the result:
/// refused (the task is no longer pending, the instance no longer its).
/// The output is right, no completed step ran again, and the journal does
/// not grow after the instance completed. PostgreSQL only.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_paused_past_its_lease_mid_activity_commits_nothing_after_the_take_over() {
    use crate::support::durable::{start_with_id, wait_for};
    use crate::support::run_log::RunLog;
    if test_store().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = RunLog::serve_slow_once(1, Duration::from_secs(6)).await;
    log.grant(dir.path());
    let builder = || {
        HostBuilder::new(dir.path())
            .components(&["orchestration-tests"])
            .arg("--lease")
            .arg("2s")
    };
    let front = builder().arg("--no-worker").start();
    let first = builder().start_worker();
    let url = format!("http://127.0.0.1:{}/paused", log.port);
    let id = "paused-mid-activity";
    start_with_id(
        &front,
        "counted",
        id,
        &serde_json::json!({"n": 3, "url": url}),
    )
    .await;
    // Step 1 is under way on the first worker: pause it there.
    let began = Instant::now();
    while !log.runs().iter().any(|(_, step)| *step == 1) {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "step 1 never ran"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.pause();
    let second = builder().start_worker();
    let done = wait_for(&front, id, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(done["output"], 3, "{done}");
    let history = |body: &Value| body["historyEvents"].as_array().map(Vec::len);
    let url = crate::support::durable::instance_url(&front, id);
    async fn with_history(url: &str) -> Value {
        client()
            .get(format!("{url}?showHistory=true"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
    let before = with_history(&url).await;
    // The paused worker wakes; its slow step answers and it tries to
    // deliver the result.
    first.resume();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = with_history(&url).await;
    assert_eq!(after["runtimeStatus"], "Completed", "{after}");
    assert_eq!(after["output"], 3, "{after}");
    assert_eq!(
        history(&after),
        history(&before),
        "the journal grew after the instance completed\n--- paused worker ---\n{}\n--- other worker ---\n{}",
        first.output(),
        second.output()
    );
    let runs = log.runs();
    let steps: Vec<u32> = runs.iter().map(|(_, step)| *step).collect();
    let again = crate::support::run_log::completed_activities_run_again(&runs);
    assert!(
        again.is_empty(),
        "completed steps ran again: {again:?} ({steps:?})"
    );
    // Step 1 ran on both workers (it had not completed); 0 and 2 once.
    assert_eq!(steps.iter().filter(|s| **s == 0).count(), 1, "{steps:?}");
    assert_eq!(steps.iter().filter(|s| **s == 2).count(), 1, "{steps:?}");
}

/// A worker paused past its lease after its activity began but before the
/// activity's HTTP request left loses the task to another worker, which runs
/// the whole orchestration to its end. When the paused worker wakes, the
/// activity's request is held back (the task is no longer its own): a
/// request sent then would repeat a step after the next one had run, an
/// effect no refused write can take back. PostgreSQL only.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_paused_before_its_activity_request_left_never_sends_it_after_the_take_over() {
    use crate::support::durable::{start_with_id, wait_for, wait_for_within};
    use crate::support::run_log::RunLog;
    if test_store().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = RunLog::serve().await;
    log.grant(dir.path());
    let builder = || {
        HostBuilder::new(dir.path())
            .components(&["orchestration-tests"])
            .arg("--lease")
            .arg("2s")
    };
    let front = builder().arg("--no-worker").start();
    let first = builder().start_worker();
    let id = "paused-before-request";
    let url = format!("http://127.0.0.1:{}/{id}", log.port);
    // Each step waits 2 s before its request: the pause lands in that wait.
    start_with_id(
        &front,
        "counted",
        id,
        &serde_json::json!({"n": 2, "url": url, "wait_ms": 2000}),
    )
    .await;
    wait_for(&front, id, &["Running"]).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(log.runs().is_empty(), "step 0 left before the pause");
    first.pause();
    let second = builder().start_worker();
    let done = wait_for_within(
        &front,
        id,
        &["Completed", "Failed"],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(done["output"], 2, "{done}");
    // The paused worker wakes with its wait over: its request would leave
    // at once.
    first.resume();
    held_back(&first).await;
    let runs = log.runs();
    let steps: Vec<u32> = runs.iter().map(|(_, step)| *step).collect();
    assert_eq!(
        steps,
        [0, 1],
        "--- paused worker ---\n{}\n--- other worker ---\n{}",
        first.output(),
        second.output()
    );
}

/// As above, for a tool of an agent run: the worker is paused inside the
/// tool, before its request left; the other worker takes the session over
/// and runs the tool (its request arrives once) and the run to its end. On
/// waking, the paused worker's request is held back by the session's
/// send-by check. PostgreSQL only.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_paused_inside_a_tool_never_sends_its_request_after_the_take_over() {
    use crate::support::run_log::RunLog;
    use crate::support::Reply;
    if test_store().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = RunLog::serve().await;
    log.grant(dir.path());
    let model = FakeModel::start().await;
    let url = format!("http://127.0.0.1:{}/tool/0", log.port);
    model.respond_with(std::sync::Arc::new(move |request| {
        let last = request.messages().last().cloned().unwrap_or_default();
        if last["role"] == "tool" {
            Reply::Text("fetched".into())
        } else {
            Reply::ToolCall(
                "late_hit".into(),
                serde_json::json!({"url": url, "wait_ms": 2000}),
            )
        }
    }));
    let builder = || {
        HostBuilder::new(dir.path())
            .components(&["orchestration-tests"])
            .openai(&model, "sk")
            .arg("--lease")
            .arg("2s")
    };
    let front = builder().arg("--no-worker").start();
    let first = builder().start_worker();
    let queued = client()
        .post(front.url("/api/agents/fetcher/run"))
        .json(&serde_json::json!({"message": "fetch it", "sessionId": "slow-tool", "waitForResponse": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), 202);
    let body: Value = queued.json().await.unwrap();
    let id = body["correlationId"].as_str().unwrap().to_string();
    // The model asked for the tool: the first worker is inside its wait.
    let began = Instant::now();
    while model.requests().is_empty() {
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "the model was never asked"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        log.runs().is_empty(),
        "the tool's request left before the pause"
    );
    first.pause();
    let second = builder().start_worker();
    let run =
        crate::support::wait_run_finished(&front.url(&format!("/api/agents/fetcher/runs/{id}")))
            .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["response"], "fetched", "{run}");
    first.resume();
    held_back(&first).await;
    assert_eq!(
        log.runs().len(),
        1,
        "the tool's request arrived {:?}\n--- paused worker ---\n{}\n--- other worker ---\n{}",
        log.runs(),
        first.output(),
        second.output()
    );
}

/// Waits (20 s at most) until `worker`, woken from a pause, says it held an
/// outbound request back, then a second more for a request that left
/// anyway to arrive; fails if it never says so.
async fn held_back(worker: &crate::support::host::Host) {
    let resumed = Instant::now();
    while !worker.output().contains("held back") && resumed.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        worker.output().contains("held back"),
        "the paused worker's request was not held back:\n{}",
        worker.output()
    );
}
