//! Work that waits or piles up stays bounded and whole (issue 18): a run
//! awaiting approval keeps its session, a crash between two tools reruns
//! only the unfinished one, a purge of thousands goes page by page, and a
//! thousand approval waits starve nothing.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{client, FakeModel, HostBuilder};

/// An idle session expires, but never while one of its runs waits for a
/// human: the conversation the run continues must still be there.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_whose_run_awaits_approval_never_expires_under_it() {
    use crate::support::Reply;
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .openai(&model, "sk")
        .arg("--session-ttl")
        .arg("1s")
        .start();
    let http = client();
    let first = http
        .post(host.url("/api/agents/clerk/run"))
        .json(&serde_json::json!({"message": "Remember order A1.", "sessionId": "kept"}))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    model.push(Reply::ToolCall(
        "refund".into(),
        serde_json::json!({"order": "A1", "amount": 2000}),
    ));
    model.push(Reply::ToolResult);
    let waiting = http
        .post(host.url("/api/agents/clerk/run"))
        .json(&serde_json::json!({"message": "Refund it.", "sessionId": "kept"}))
        .send()
        .await
        .unwrap();
    assert_eq!(waiting.status(), 202);
    let body: Value = waiting.json().await.unwrap();
    let id = body["correlationId"].as_str().unwrap().to_string();
    // Idle past the TTL while the run waits; then another message arrives
    // on the session (an enqueue checks the expiry too).
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let another = http
        .post(host.url("/api/agents/clerk/run"))
        .json(&serde_json::json!({"message": "And thanks.", "sessionId": "kept", "waitForResponse": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(another.status(), 202);
    let decided = http
        .post(host.url(&format!("/api/agents/clerk/runs/{id}/approvals")))
        .json(&serde_json::json!({"callId": "call_refund", "approved": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 202);
    crate::support::wait_run_finished(&host.url(&format!("/api/agents/clerk/runs/{id}"))).await;
    let transcript = model.requests().last().unwrap().transcript().join("\n");
    assert!(
        transcript.contains("Remember order A1."),
        "the conversation was kept for the waiting run: {transcript}"
    );
    let session: Value = http
        .get(host.url("/api/agents/clerk/sessions/kept"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = session.to_string();
    assert!(text.contains("Remember order A1."), "{text}");
    assert!(text.contains("Refund it."), "{text}");
}

/// Counts the calls of two tool URLs; the first call of `/second` is held
/// (never answered), later ones answer at once.
struct ToolServer {
    port: u16,
    first: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    second: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl ToolServer {
    async fn start() -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let first = Arc::new(AtomicUsize::new(0));
        let second = Arc::new(AtomicUsize::new(0));
        let (f, s) = (first.clone(), second.clone());
        let app = axum::Router::new()
            .route(
                "/first",
                axum::routing::get(move || {
                    f.fetch_add(1, Ordering::SeqCst);
                    async { "first done" }
                }),
            )
            .route(
                "/second",
                axum::routing::get(move || {
                    let held = s.fetch_add(1, Ordering::SeqCst) == 0;
                    async move {
                        if held {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                        }
                        "second done"
                    }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            port,
            first,
            second,
        }
    }

    fn calls(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering;
        (
            self.first.load(Ordering::SeqCst),
            self.second.load(Ordering::SeqCst),
        )
    }
}

/// kill -9 while the second tool of a round runs: the first tool's result
/// was stored when it returned, so the resumed run calls only the second.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_two_tools_of_a_round_runs_only_the_unfinished_one_again() {
    use crate::support::Reply;
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let tools = ToolServer::start().await;
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::write(
        components.join("hostile.toml"),
        format!("allowed_hosts = [\"127.0.0.1:{}\"]\n", tools.port),
    )
    .unwrap();
    let model = FakeModel::start().await;
    let url = |path: &str| json!({"url": format!("http://127.0.0.1:{}/{path}", tools.port)});
    model.push(Reply::ToolCalls(vec![
        ("fetch".into(), url("first")),
        ("fetch".into(), url("second")),
    ]));
    model.push(Reply::ToolResult);
    let builder = HostBuilder::new(dir.path())
        .components(&["hostile"])
        .openai(&model, "sk")
        .arg("--lease")
        .arg("1s");
    let mut host = builder.start();
    let response = client()
        .post(host.url("/api/agents/hostile/run"))
        .json(&json!({"message": "fetch both", "sessionId": "two-tools", "waitForResponse": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    let id = body["correlationId"].as_str().unwrap().to_string();
    let started = Instant::now();
    while tools.calls().1 == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the second tool never ran: {}",
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(tools.calls(), (1, 1));
    host.kill();
    let host = builder.start();
    let run =
        crate::support::wait_run_finished(&host.url(&format!("/api/agents/hostile/runs/{id}")))
            .await;
    assert_eq!(run["status"], "completed", "{run}\n{}", host.output());
    assert_eq!(
        tools.calls(),
        (1, 2),
        "the first tool ran again although its result had been returned"
    );
    let session: Value = client()
        .get(host.url("/api/agents/hostile/sessions/two-tools"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let roles: Vec<&str> = session["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool", "assistant"]);
}

/// A purge of thousands of finished instances deletes a page per commit:
/// an orchestration started while it runs is not queued behind every
/// deletion (it has completed when the purge answers), and the count is
/// exact across pages.
#[tokio::test(flavor = "multi_thread")]
async fn a_purge_of_thousands_goes_page_by_page_between_other_work_with_an_exact_count() {
    use futures::StreamExt;
    use serde_json::json;
    const OLD: usize = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .start();
    let base = host.url("/runtime/webhooks/durabletask/instances");
    let start = |id: String, n: u32| {
        let url = host.url(&format!("/api/orchestrators/sequence/{id}"));
        async move {
            let response = client()
                .post(url)
                .json(&json!({"n": n}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 202);
        }
    };
    futures::stream::iter(0..OLD)
        .map(|i| start(format!("old-{i:05}"), 0))
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    let status = |id: String| {
        let url = format!("{base}/{id}");
        async move {
            let body: Value = client()
                .get(url)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap_or_default();
            body["runtimeStatus"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }
    };
    let started = Instant::now();
    for i in 0..OLD {
        while status(format!("old-{i:05}")).await != "Completed" {
            assert!(started.elapsed() < Duration::from_secs(120));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let purge_url = format!("{base}?runtimeStatus=Completed&instanceIdPrefix=old-");
    let purging = tokio::spawn(async move {
        let body: Value = client()
            .delete(purge_url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        body
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    start("quick".into(), 1).await;
    let first = purging.await.unwrap();
    // On SQLite a purge page commits in milliseconds and the quick one's
    // few commits go between pages. On PostgreSQL an episode's latency is
    // of the order of the whole purge, so the order is not a property
    // there: only the exact count is checked.
    if crate::support::host::test_store().is_none() {
        assert_eq!(
            status("quick".into()).await,
            "Completed",
            "an orchestration started during the purge waited behind all of it: {first}"
        );
    }
    let mut deleted = first["instancesDeleted"].as_u64().unwrap();
    let mut more = first["more"] == json!(true);
    while more {
        let next: Value = client()
            .delete(format!(
                "{base}?runtimeStatus=Completed&instanceIdPrefix=old-"
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        deleted += next["instancesDeleted"].as_u64().unwrap();
        more = next["more"] == json!(true);
    }
    assert_eq!(deleted, OLD as u64);
    let left: Vec<Value> = crate::support::get_json(format!("{base}?instanceIdPrefix=old-")).await;
    assert!(left.is_empty(), "{} left", left.len());
}

/// A thousand agent calls waiting for a human's approval stay due (their
/// tasks run until the run ends) but never starve other tasks: a retried
/// activity started behind them is read and run at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_approval_waits_never_starve_a_retried_activity() {
    use crate::support::Reply;
    use futures::StreamExt;
    use serde_json::json;
    const WAITING: usize = 1_010;
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.respond_with(std::sync::Arc::new(|_| {
        Reply::ToolCall("refund".into(), json!({"order": "A1", "amount": 5}))
    }));
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .openai(&model, "sk")
        .start();
    let start = |name: &'static str, id: String| {
        let url = host.url(&format!("/api/orchestrators/{name}/{id}"));
        async move {
            let response = client()
                .post(url)
                .json(&json!("Refund order A1."))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 202);
        }
    };
    futures::stream::iter(0..WAITING)
        .map(|i| start("ask_clerk", format!("waiting-{i}")))
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    model
        .wait_for_requests(WAITING, Duration::from_secs(120))
        .await;
    // Every wait stored (on PostgreSQL the last hundred answers are still
    // being written when the model has been asked a thousand times): what
    // follows measures starvation, not the store's backlog.
    let metrics = host.url("/metrics");
    let stored = Instant::now();
    loop {
        let text = client()
            .get(&metrics)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let pending = text
            .lines()
            // `agenthost_approvals_pending{taskhub="…"} N`
            .find(|line| line.starts_with("agenthost_approvals_pending"))
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|value| value.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        if pending >= WAITING as f64 {
            break;
        }
        assert!(
            stored.elapsed() < Duration::from_secs(120),
            "{pending} of {WAITING} approval waits stored"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    start("failing_activity", "retried".into()).await;
    let url = host.url("/runtime/webhooks/durabletask/instances/retried");
    let started = Instant::now();
    loop {
        let body: Value = crate::support::get_json(&url).await;
        if body["runtimeStatus"] == "Failed" {
            assert!(body["output"].to_string().contains("caught"), "{body}");
            break;
        }
        // Starved, it never runs (the due read found only the thousand
        // running tasks); the bound is generous because on PostgreSQL, with
        // the rest of the suite running beside it, a retry has taken over 15 s.
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the retried activity never ran behind {WAITING} approval waits: {body}\n{}",
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
