//! Streams under faults: a run executed again after kill -9 restarts its
//! stream, and a stream that lost entries ends `failed` with the reason.

use std::time::Duration;

use serde_json::{json, Value};

use super::*;

/// A run executed again after kill -9 streams its second attempt after a
/// `restart` event; the stream's text is that attempt's alone, equal to the
/// stored answer (before, the second attempt was appended to the first).
#[tokio::test(flavor = "multi_thread")]
async fn a_run_executed_again_after_kill_9_restarts_its_stream_and_reads_as_the_stored_answer() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let builder = HostBuilder::new(dir.path()).openai(&model, "sk");
    let mut host = builder.start();
    let words: Vec<String> = (0..40).map(|i| format!("word{i} ")).collect();
    model.push(Reply::Paced(
        Duration::from_millis(50),
        Box::new(Reply::Text(words.concat())),
    ));
    let queued = client()
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "Write a long answer.", "waitForResponse": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), 202);
    let body: Value = queued.json().await.unwrap();
    let id = body["correlationId"].as_str().unwrap().to_string();
    // Some of the first attempt is streamed (and stored), then the host dies.
    let partial = client()
        .get(stream_url(&host, "writer", &id))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let seen = read_events(partial, |events| {
        events.iter().filter(|e| e.event == "chunk").count() >= 5
    })
    .await;
    assert!(seen.iter().filter(|e| e.event == "chunk").count() >= 5);
    tokio::time::sleep(Duration::from_millis(200)).await;
    host.kill();
    model.push(Reply::Text("The second, whole answer.".into()));
    let host = builder.start();
    let run =
        crate::support::wait_run_finished(&host.url(&format!("/api/agents/writer/runs/{id}")))
            .await;
    assert_eq!(run["status"], "completed", "{run}");
    let answer = run["response"].as_str().unwrap().to_string();
    assert_eq!(answer, "The second, whole answer.");

    let whole = client()
        .get(stream_url(&host, "writer", &id))
        .header("accept", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.text().await.unwrap(), answer);

    let replay = client()
        .get(stream_url(&host, "writer", &id))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    let events = read_events(replay, |_| false).await;
    let restart = events
        .iter()
        .position(|e| e.event == "restart")
        .unwrap_or_else(|| panic!("no restart event: {events:?}"));
    assert!(events[..restart].iter().any(|e| e.event == "chunk"));
    assert!(
        events[restart].id.is_none(),
        "a restart has no id to resume at"
    );
    assert_eq!(text_of(&events[restart..]), answer, "{events:?}");
    assert_eq!(events.last().unwrap().event, "complete");
}

/// Redis refuses writes (out of memory) in the middle of a streamed answer:
/// the run still completes with its answer in its record, and its stream,
/// instead of reading as whole with a hole in it, ends `failed` with the
/// reason once Redis takes writes again.
#[tokio::test(flavor = "multi_thread")]
async fn a_stream_that_lost_entries_ends_failed_with_the_reason_never_with_a_silent_gap() {
    let redis = PrivateRedis::start().await;
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk")
        .env("REDIS_CONNECTION_STRING", &redis.url)
        .start();
    let words: Vec<String> = (0..30).map(|i| format!("word{i} ")).collect();
    model.push(Reply::Paced(
        Duration::from_millis(50),
        Box::new(Reply::Text(words.concat())),
    ));
    let queued = client()
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "Write a long answer.", "waitForResponse": false}))
        .send()
        .await
        .unwrap();
    let body: Value = queued.json().await.unwrap();
    let id = body["correlationId"].as_str().unwrap().to_string();
    let mut admin = redis::Client::open(redis.url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query_async(&mut admin)
        .await
        .unwrap();
    let run =
        crate::support::wait_run_finished(&host.url(&format!("/api/agents/writer/runs/{id}")))
            .await;
    assert_eq!(run["status"], "completed", "the run goes on: {run}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query_async(&mut admin)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let whole = loop {
        let whole = client()
            .get(stream_url(&host, "writer", &id))
            .header("accept", "text/plain")
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        if let Ok(whole) = whole {
            if whole.status() != 504 {
                break whole;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the stream never ended"
        );
    };
    assert_eq!(
        whole.status(),
        502,
        "a stream with a hole must not read as whole"
    );
    let error: Value = whole.json().await.unwrap();
    assert!(
        error["error"].as_str().unwrap().contains("lost entries"),
        "{error}"
    );
}
