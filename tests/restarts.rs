//! Durability across restarts: threads continue, runs interrupted by a crash
//! resume without repeating finished model turns or tool calls, SIGTERM lets
//! in-flight runs finish, and compiled components come from the cache.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::{
    client, fake_model::echo_of, wait_run_finished, FakeModel, HostBuilder, Reply,
};

#[tokio::test(flavor = "multi_thread")]
async fn a_restarted_host_on_the_same_store_continues_the_thread() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let builder = HostBuilder::new(dir.path()).openai(&model, "sk");
    let mut host = builder.start();
    let first = client()
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "Remember the tea.", "thread_id": "kept"}))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(host.terminate(), Some(0));

    let host = builder.start();
    let second = client()
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "What did I say?", "thread_id": "kept"}))
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), 200);
    assert_eq!(
        model.requests()[1].transcript()[1..],
        [
            "user: Remember the tea.".to_string(),
            format!("assistant: {}", echo_of("Remember the tea.")),
            "user: What did I say?".to_string(),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_interrupted_by_kill_9_resumes_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    // The first model call hangs; the host is killed while waiting for it.
    model.push(Reply::Delay(Duration::from_secs(60), Box::new(Reply::Echo)));
    let builder = HostBuilder::new(dir.path()).openai(&model, "sk");
    let mut host = builder.start();
    let accepted: Value = client()
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "Survive this.", "wait_for_response": false}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let correlation = accepted["correlation_id"].as_str().unwrap().to_string();
    model.wait_for_requests(1, Duration::from_secs(10)).await;
    host.kill();

    let host = builder.start();
    let run = wait_run_finished(&host.url(&format!("/api/agents/writer/runs/{correlation}"))).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(run["response"], echo_of("Survive this."));
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    // The resumed call sends the conversation once, not a duplicated message.
    assert_eq!(
        requests[1].transcript()[1..],
        ["user: Survive this.".to_string()]
    );
    host.wait_logged("resuming", 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crash_after_a_tool_call_does_not_repeat_the_model_turn_or_the_tool() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::ToolCall(
        "get_weather".into(),
        json!({"city": "Oslo"}),
    ));
    model.push(Reply::Delay(Duration::from_secs(60), Box::new(Reply::Echo)));
    model.push(Reply::Text("Cold in Oslo.".into()));
    let builder = HostBuilder::new(dir.path()).openai(&model, "sk");
    let mut host = builder.start();
    let accepted: Value = client()
        .post(host.url("/api/agents/weather/run"))
        .json(&json!({"message": "Oslo?", "wait_for_response": false}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let correlation = accepted["correlation_id"].as_str().unwrap().to_string();
    // Killed while the model thinks about the tool's result.
    model.wait_for_requests(2, Duration::from_secs(10)).await;
    host.kill();

    let host = builder.start();
    let run =
        wait_run_finished(&host.url(&format!("/api/agents/weather/runs/{correlation}"))).await;
    assert_eq!(run["response"], "Cold in Oslo.");
    let requests = model.requests();
    assert_eq!(
        requests.len(),
        3,
        "the tool-calling turn was not asked again"
    );
    let roles: Vec<String> = requests[2]
        .messages()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool"],
        "one tool call, one result"
    );
    assert_eq!(
        requests[2].messages()[3],
        requests[1].messages()[3],
        "the stored tool result was reused"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_an_in_flight_run_finish_then_exits_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::Delay(
        Duration::from_millis(1500),
        Box::new(Reply::Echo),
    ));
    let mut host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let url = host.url("/api/agents/writer/run");
    let in_flight =
        tokio::spawn(async move { client().post(url).body("finish me").send().await.unwrap() });
    model.wait_for_requests(1, Duration::from_secs(10)).await;
    host.signal_terminate();
    let response = in_flight.await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), echo_of("finish me"));
    assert_eq!(host.wait_exit(), Some(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_start_loads_compiled_components_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let builder = HostBuilder::new(dir.path()).cache_dir(&cache);
    let mut first = builder.start();
    let cold = first.output();
    assert_eq!(cold.matches("from_cache=false").count(), 2, "{cold}");
    assert_eq!(first.terminate(), Some(0));
    let second = builder.start();
    let warm = second.output();
    assert_eq!(warm.matches("from_cache=true").count(), 2, "{warm}");
    assert!(!warm.contains("from_cache=false"), "{warm}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_still_busy_after_the_shutdown_grace_resumes_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::Delay(Duration::from_secs(60), Box::new(Reply::Echo)));
    model.push(Reply::Delay(Duration::from_secs(60), Box::new(Reply::Echo)));
    let builder = HostBuilder::new(dir.path())
        .openai(&model, "sk")
        .arg("--shutdown-grace")
        .arg("300ms");
    let mut host = builder.start();
    let accepted: Value = client()
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "too slow", "thread_id": "a", "wait_for_response": false}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let correlation = accepted["correlation_id"].as_str().unwrap().to_string();
    // A synchronous caller on another thread waits on its run while the host stops.
    let url = host.url("/api/agents/writer/run");
    let waiting = tokio::spawn(async move {
        client()
            .post(url)
            .json(&json!({"message": "me too", "thread_id": "b"}))
            .send()
            .await
    });
    model.wait_for_requests(2, Duration::from_secs(10)).await;
    let stopped = std::time::Instant::now();
    host.signal_terminate();
    assert_eq!(host.wait_exit(), Some(0));
    assert!(
        stopped.elapsed() < Duration::from_secs(10),
        "the grace period bounds the stop"
    );
    assert!(
        waiting.await.unwrap().is_err(),
        "the caller's connection is closed, not answered"
    );

    let host = builder.start();
    let run = wait_run_finished(&host.url(&format!("/api/agents/writer/runs/{correlation}"))).await;
    assert_eq!(run["status"], "completed");
    assert_eq!(run["response"], echo_of("too slow"));
}
