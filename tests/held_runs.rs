//! A synchronous run on a session minted for it: nobody is told of it before
//! its answer, so its start is held back and committed with its end, one
//! commit where there were two, on SQLite and on a shared hub (PostgreSQL),
//! where no other host can know the session either.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{
    client, fake_model::echo_of, get_json, metric, FakeModel, HostBuilder, Reply,
};

/// Transactions the store's writer has committed.
const COMMITS: &str = "agenthost_journal_commit_batch_size_count";

#[tokio::test(flavor = "multi_thread")]
async fn a_run_on_a_session_minted_for_it_costs_one_commit_where_held() {
    const RUNS: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let run = |body: Value| {
        client()
            .post(host.url("/api/agents/writer/run"))
            .json(&body)
            .send()
    };
    // The histogram is there once something was committed.
    assert_eq!(
        run(json!({"message": "first"})).await.unwrap().status(),
        200
    );
    let before = metric(&host, COMMITS).await;
    for i in 0..RUNS {
        let response = run(json!({"message": format!("minted {i}")}))
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let session = response.headers()["x-ms-thread-id"]
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(
            response.text().await.unwrap(),
            echo_of(&format!("minted {i}"))
        );
        // Stored whole: the conversation reads back, the run is listed.
        let conversation: Value =
            get_json(&host.url(&format!("/api/agents/writer/sessions/{session}"))).await;
        assert_eq!(
            conversation["messages"].as_array().map(Vec::len),
            Some(2),
            "{conversation}"
        );
    }
    let minted = metric(&host, COMMITS).await - before;
    let before = metric(&host, COMMITS).await;
    for i in 0..RUNS {
        let body = json!({"message": format!("named {i}"), "sessionId": format!("named-{i}")});
        assert_eq!(run(body).await.unwrap().status(), 200);
    }
    let named = metric(&host, COMMITS).await - before;
    let listed: Value = get_json(&host.url("/api/agents/writer/runs?limit=100")).await;
    assert_eq!(
        listed["runs"].as_array().map(Vec::len),
        Some(2 * RUNS + 1),
        "{listed}"
    );
    // A run whose session the caller named is stored before it executes:
    // two commits each, one at a time.
    assert!(
        named >= (2 * RUNS) as f64,
        "{RUNS} named runs: {named} commits"
    );
    // The host's own passes (sweeps at its start, on a busy machine still
    // going) commit now and then: at most half as many again. Two commits
    // a run would be at least twice as many.
    assert!(
        minted <= (RUNS + RUNS / 2) as f64,
        "{RUNS} runs on minted sessions: {minted} commits"
    );
}

/// What a held run leaves when its host dies: nothing. Its caller saw the
/// connection drop and was told no id; nothing it was told is lost, and no
/// answer nobody can ask for is computed at the next start, by this host
/// or (on a shared hub) any other.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_during_a_held_run_leaves_nothing_to_resume() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::Delay(Duration::from_secs(60), Box::new(Reply::Echo)));
    let builder = HostBuilder::new(dir.path()).openai(&model, "sk");
    let mut host = builder.start();
    let url = host.url("/api/agents/writer/run");
    let caller = tokio::spawn(async move { client().post(url).body("Not yet told").send().await });
    model.wait_for_requests(1, Duration::from_secs(10)).await;
    host.kill();
    let dropped = tokio::time::timeout(Duration::from_secs(10), caller)
        .await
        .expect("the caller's request did not end when its host died")
        .unwrap();
    assert!(dropped.is_err(), "the caller was answered: {dropped:?}");

    let host = builder.start();
    let runs_url = host.url("/api/agents/writer/runs");
    // The restart's pass over unfinished runs is done once the host
    // answers a run of its own: a resumed one would have gone first.
    let after = client()
        .post(host.url("/api/agents/writer/run"))
        .body("After")
        .send();
    assert_eq!(after.await.unwrap().status(), 200);
    let listed: Value = get_json(&runs_url).await;
    let runs = listed["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{listed}");
    assert_eq!(runs[0]["response"], echo_of("After"));
    let asked: Vec<_> = model.requests().iter().map(|r| r.transcript()).collect();
    assert!(
        asked
            .iter()
            .filter(|t| t.iter().any(|m| m.contains("Not yet told")))
            .count()
            == 1,
        "the held run was executed again: {asked:?}"
    );
}

/// A held run executes in its caller's request until it ends; a caller
/// that hangs up before then leaves it to go on alone: it is stored with
/// its answer, the model asked once.
#[tokio::test(flavor = "multi_thread")]
async fn a_held_run_whose_caller_hangs_up_goes_on_and_is_stored() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::Delay(Duration::from_secs(2), Box::new(Reply::Echo)));
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let url = host.url("/api/agents/writer/run");
    let caller = tokio::spawn(async move { client().post(url).body("Hung up on").send().await });
    model.wait_for_requests(1, Duration::from_secs(10)).await;
    caller.abort();
    assert!(caller.await.is_err_and(|e| e.is_cancelled()));

    let runs_url = host.url("/api/agents/writer/runs");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let runs = loop {
        let listed: Value = get_json(&runs_url).await;
        let runs = listed["runs"].as_array().cloned().unwrap_or_default();
        if runs.iter().any(|r| r["status"] == "completed") {
            break runs;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run of a caller who hung up was not stored: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["response"], echo_of("Hung up on"));
    let session = runs[0]["sessionId"]
        .as_str()
        .expect("the run names its session");
    let conversation: Value =
        get_json(&host.url(&format!("/api/agents/writer/sessions/{session}"))).await;
    assert_eq!(conversation["messages"].as_array().map(Vec::len), Some(2));
    assert_eq!(model.requests().len(), 1, "the model was asked again");
}
