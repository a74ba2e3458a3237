//! Streamed answers: server-sent events on the run endpoint, live and
//! chunk by chunk; a consumer that drops and reconnects (with
//! `Last-Event-ID`, or `?cursor=`) gets exactly the rest; the whole text at
//! once with `Accept: text/plain`; orchestrations' agent calls stream too.
//! With Redis (the real server): the stream's entries and TTL as a plain
//! Redis consumer sees them, and a run that outlives Redis still answers.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};

use crate::support::durable::{instance_url, start, wait_for};
use crate::support::fake_model::echo_of;
use crate::support::host::Host;
use crate::support::redis::PrivateRedis;
use crate::support::{client, FakeModel, HostBuilder, Reply};

/// One server-sent event.
#[derive(Debug, Clone, PartialEq)]
struct Sse {
    id: Option<String>,
    event: String,
    data: Value,
}

/// Parses complete events out of `buffer`, leaving a partial one in it.
fn take_events(buffer: &mut String) -> Vec<Sse> {
    let mut events = Vec::new();
    while let Some(end) = buffer.find("\n\n") {
        let block: String = buffer.drain(..end + 2).collect();
        let (mut id, mut event, mut data) = (None, "message".to_string(), String::new());
        for line in block.lines() {
            if let Some(v) = line.strip_prefix("id:") {
                id = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("event:") {
                event = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.trim_start());
            }
        }
        if data.is_empty() {
            continue; // a keep-alive comment
        }
        events.push(Sse {
            id,
            event,
            data: serde_json::from_str(&data).unwrap_or(Value::String(data)),
        });
    }
    events
}

/// Reads events from `response` until `stop` says so or the stream ends.
async fn read_events(response: reqwest::Response, stop: impl Fn(&[Sse]) -> bool) -> Vec<Sse> {
    let mut body = response.bytes_stream();
    let mut buffer = String::new();
    let mut events = Vec::new();
    while let Some(bytes) = tokio::time::timeout(Duration::from_secs(30), body.next())
        .await
        .expect("no event within 30 s")
    {
        buffer.push_str(&String::from_utf8_lossy(&bytes.unwrap()));
        events.extend(take_events(&mut buffer));
        if stop(&events) {
            break;
        }
    }
    events
}

fn text_of(events: &[Sse]) -> String {
    events
        .iter()
        .filter(|e| e.event == "chunk")
        .map(|e| e.data["text"].as_str().unwrap().to_string())
        .collect()
}

fn ids_of(events: &[Sse]) -> Vec<String> {
    events.iter().filter_map(|e| e.id.clone()).collect()
}

async fn post_run(host: &Host, agent: &str, body: Value, accept: &str) -> reqwest::Response {
    client()
        .post(host.url(&format!("/api/agents/{agent}/run")))
        .header("accept", accept)
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn stream_url(host: &Host, agent: &str, correlation_id: &str) -> String {
    host.url(&format!("/api/agents/{agent}/runs/{correlation_id}/stream"))
}

#[tokio::test(flavor = "multi_thread")]
async fn live_events_on_the_run_endpoint_spell_the_synchronous_answer_across_a_tool_call() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let script = || {
        model.push(Reply::ToolCall(
            "get_weather".into(),
            json!({"city": "Oslo"}),
        ));
        model.push(Reply::Paced(
            Duration::from_millis(20),
            Box::new(Reply::ToolResult),
        ));
    };
    script();
    let sync = post_run(
        &host,
        "weather",
        json!({"message": "Weather in Oslo?"}),
        "text/plain",
    )
    .await;
    assert_eq!(sync.status(), 200);
    let answer = sync.text().await.unwrap();
    assert!(answer.starts_with("tool said: "), "{answer}");

    script();
    let live = post_run(
        &host,
        "weather",
        json!({"message": "Weather in Oslo?"}),
        "text/event-stream",
    )
    .await;
    assert_eq!(live.status(), 200);
    assert!(live.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    assert!(live.headers().contains_key("x-ms-thread-id"));
    let correlation = live.headers()["x-ms-correlation-id"]
        .to_str()
        .unwrap()
        .to_string();
    let events = read_events(live, |_| false).await;
    let chunks = events.iter().filter(|e| e.event == "chunk").count();
    assert!(chunks >= 3, "the answer came in pieces: {events:?}");
    assert_eq!(text_of(&events), answer, "{events:?}");
    let last = events.last().unwrap();
    assert_eq!(last.event, "complete", "{events:?}");
    assert_eq!(last.data["status"], "complete");
    let ids = ids_of(&events);
    assert_eq!(ids.len(), events.len(), "every event has an id");
    let numbers: Vec<u64> = ids.iter().map(|i| i.parse().unwrap()).collect();
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // The run's stored record and its stream tell the same.
    let whole = client()
        .get(stream_url(&host, "weather", &correlation))
        .header("accept", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.text().await.unwrap(), answer);
}

/// A run paced slowly enough to disconnect from in the middle.
async fn slow_run(host: &Host, model: &FakeModel, words: usize) -> (String, String) {
    let text: Vec<String> = (0..words).map(|i| format!("word{i}")).collect();
    let text = text.join(" ");
    model.push(Reply::Paced(
        Duration::from_millis(60),
        Box::new(Reply::Text(text.clone())),
    ));
    let accepted: Value = post_run(
        host,
        "writer",
        json!({"message": "Write slowly.", "wait_for_response": false}),
        "application/json",
    )
    .await
    .json()
    .await
    .unwrap();
    let correlation = accepted["correlation_id"].as_str().unwrap().to_string();
    assert_eq!(
        accepted["stream_url"],
        format!("/api/agents/writer/runs/{correlation}/stream")
    );
    (correlation, text)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_consumer_that_reconnects_gets_exactly_the_remaining_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let (correlation, text) = slow_run(&host, &model, 30).await;
    let url = stream_url(&host, "writer", &correlation);

    // Three chunks, then the connection drops.
    let first = client().get(&url).send().await.unwrap();
    assert_eq!(first.status(), 200);
    let mut seen = read_events(first, |events| {
        events.iter().filter(|e| e.event == "chunk").count() >= 3
    })
    .await;
    seen.truncate(3);
    let last_id = seen[2].id.clone().unwrap();

    // Reconnect with Last-Event-ID, and another consumer with ?cursor=.
    let by_header = client()
        .get(&url)
        .header("last-event-id", &last_id)
        .send()
        .await
        .unwrap();
    let by_cursor = client()
        .get(format!("{url}?cursor={last_id}"))
        .send()
        .await
        .unwrap();
    for resumed in [by_header, by_cursor] {
        let rest = read_events(resumed, |_| false).await;
        assert_eq!(rest.last().unwrap().event, "complete", "{rest:?}");
        let mut all = seen.clone();
        all.extend(rest.iter().cloned());
        assert_eq!(text_of(&all), text, "no gap, no duplicate");
        let ids = ids_of(&all);
        let mut unique = ids.clone();
        unique.dedup();
        assert_eq!(ids, unique);
    }
    // From the start, after the run: everything, and the stream ends.
    let again = client()
        .get(format!("{url}?cursor=0"))
        .send()
        .await
        .unwrap();
    assert_eq!(text_of(&read_events(again, |_| false).await), text);
}

#[tokio::test(flavor = "multi_thread")]
async fn unknown_streams_and_bad_cursors_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path()).start();
    let missing = client()
        .get(stream_url(&host, "writer", "no-such-run"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let body: Value = missing.json().await.unwrap();
    assert_eq!(body["code"], "stream_not_found", "{body}");

    let done: Value = post_run(
        &host,
        "writer",
        json!({"message": "hi"}),
        "application/json",
    )
    .await
    .json()
    .await
    .unwrap();
    let correlation = done["correlation_id"].as_str().unwrap();
    let bad = client()
        .get(format!(
            "{}?cursor=yesterday",
            stream_url(&host, "writer", correlation)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await.unwrap();
    assert_eq!(body["code"], "invalid_cursor", "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_orchestrations_agent_call_streams_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "orchestration-tests"])
        .openai(&model, "sk")
        .start();
    let id = start(&host, "ask_writer", &json!("Tell me about tea")).await;
    wait_for(&host, &id, &["Completed"]).await;
    let status: Value = client()
        .get(format!("{}?showHistory=true", instance_url(&host, &id)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let runs = status["agentRuns"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{status}");
    assert_eq!(runs[0]["agent"], "writer");
    let url = host.url(runs[0]["streamUrl"].as_str().unwrap());
    let events = read_events(client().get(url).send().await.unwrap(), |_| false).await;
    assert_eq!(text_of(&events), echo_of("Tell me about tea"));
}

fn redis_url() -> String {
    std::env::var("AGENTHOST_TEST_REDIS").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

async fn redis_connection(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("Redis answers (make test starts it)")
}

fn field(map: &std::collections::HashMap<String, redis::Value>, name: &str) -> Option<String> {
    map.get(name)
        .map(|v| redis::from_redis_value::<String>(v.clone()).unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn with_redis_the_stream_is_a_redis_stream_a_plain_consumer_can_read() {
    use redis::streams::{StreamRangeReply, StreamReadOptions, StreamReadReply};
    use redis::AsyncCommands;

    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk")
        .env("REDIS_CONNECTION_STRING", &redis_url())
        .arg("--stream-ttl")
        .arg("120s")
        .start();
    assert!(host.output().contains("Redis Streams"), "{}", host.output());
    let done: Value = post_run(
        &host,
        "writer",
        json!({"message": "Tea in four words please"}),
        "application/json",
    )
    .await
    .json()
    .await
    .unwrap();
    let correlation = done["correlation_id"].as_str().unwrap().to_string();
    let answer = done["response"].as_str().unwrap().to_string();
    assert_eq!(answer, echo_of("Tea in four words please"));
    let key = format!("agent:response:{correlation}");
    let mut redis = redis_connection(&redis_url()).await;

    // The entries, as XRANGE shows them (the host writes the completion
    // right after the answer: allow it a moment).
    let mut range: StreamRangeReply = redis.xrange_all(&key).await.unwrap();
    for _ in 0..100 {
        if range
            .ids
            .last()
            .and_then(|e| field(&e.map, "status"))
            .is_some()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        range = redis.xrange_all(&key).await.unwrap();
    }
    let (last, chunks) = range.ids.split_last().unwrap();
    assert!(chunks.len() > 1, "{:?}", range.ids);
    for entry in chunks {
        assert!(field(&entry.map, "chunk").is_some(), "{:?}", entry.map);
        let at = field(&entry.map, "timestamp").unwrap();
        assert!(chrono::DateTime::parse_from_rfc3339(&at).is_ok(), "{at}");
    }
    assert_eq!(field(&last.map, "status").as_deref(), Some("complete"));
    assert!(field(&last.map, "timestamp").is_some());
    let ttl: i64 = redis.ttl(&key).await.unwrap();
    assert!((1..=120).contains(&ttl), "TTL {ttl}");

    // A consumer written against Redis alone rebuilds the answer.
    let mut cursor = "0".to_string();
    let mut rebuilt = String::new();
    'read: loop {
        let reply: StreamReadReply = redis
            .xread_options(&[&key], &[&cursor], &StreamReadOptions::default().count(2))
            .await
            .unwrap();
        let stream = &reply.keys[0];
        for entry in &stream.ids {
            cursor = entry.id.clone();
            if let Some(chunk) = field(&entry.map, "chunk") {
                rebuilt.push_str(&chunk);
            }
            if field(&entry.map, "status").as_deref() == Some("complete") {
                break 'read;
            }
        }
    }
    assert_eq!(rebuilt, answer);

    // The host's own SSE over Redis, resumed from a Redis entry id.
    let url = stream_url(&host, "writer", &correlation);
    let after_first = &chunks[0].id;
    let rest = read_events(
        client()
            .get(format!("{url}?cursor={after_first}"))
            .send()
            .await
            .unwrap(),
        |_| false,
    )
    .await;
    let first = field(&chunks[0].map, "chunk").unwrap();
    assert_eq!(format!("{first}{}", text_of(&rest)), answer);
    assert_eq!(rest[0].id.as_deref(), Some(chunks[1].id.as_str()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_that_outlives_redis_still_answers_and_the_host_stays_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let mut redis = PrivateRedis::start().await;
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk")
        .env("REDIS_CONNECTION_STRING", &redis.url)
        .start();
    let words: Vec<String> = (0..20).map(|i| format!("w{i}")).collect();
    let text = words.join(" ");
    model.push(Reply::Paced(
        Duration::from_millis(50),
        Box::new(Reply::Text(text.clone())),
    ));
    let url = host.url("/api/agents/writer/run");
    let run = tokio::spawn(async move {
        let response = client()
            .post(url)
            .body("Write twenty words.")
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    });
    model.wait_for_requests(1, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    redis.stop();
    let (status, answer) = run.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(answer, text);
    let health = client().get(host.url("/api/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    // The next run works too, with Redis still down.
    let next = client()
        .post(host.url("/api/agents/writer/run"))
        .body("And now?")
        .send()
        .await
        .unwrap();
    assert_eq!(next.status(), 200);
    assert_eq!(next.text().await.unwrap(), echo_of("And now?"));
    let output = host.output();
    assert!(output.contains("response streams degraded"), "{output}");
}

#[test]
fn redis_unreachable_at_start_falls_back_to_the_store_or_refuses_when_required() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .env("REDIS_CONNECTION_STRING", "redis://127.0.0.1:1")
        .start();
    assert!(
        host.output()
            .contains("response streams fall back to the store"),
        "{}",
        host.output()
    );
    drop(host);
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_agenthost"))
        .current_dir(dir.path())
        .args([
            "serve",
            "--port",
            "0",
            "--components",
            ".",
            "--require-redis",
        ])
        .args(crate::support::host::store_args(dir.path(), None))
        .env("REDIS_CONNECTION_STRING", "redis://127.0.0.1:1")
        .env_remove("DURABLE_TASK_SCHEDULER_CONNECTION_STRING")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot reach Redis at redis://127.0.0.1:1"),
        "{stderr}"
    );
}

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

/// Followers hold a place each, up to `--max-stream-followers`: past it a
/// reader gets 429 JSON (a run asked for with SSE is then not started),
/// and a place is given back when its reader goes away.
#[tokio::test(flavor = "multi_thread")]
async fn followers_past_the_cap_get_429_and_a_place_comes_back_when_one_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::Delay(Duration::from_secs(30), Box::new(Reply::Echo)));
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk")
        .arg("--max-stream-followers")
        .arg("2")
        .start();
    let http = client();
    let accepted: Value = http
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "slow", "waitForResponse": false}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = accepted["correlationId"].as_str().unwrap().to_string();
    let stream_url = host.url(&format!("/api/agents/writer/runs/{id}/stream"));
    let follow = || {
        http.get(&stream_url)
            .header("accept", "text/event-stream")
            .send()
    };
    let first = follow().await.unwrap();
    let second = follow().await.unwrap();
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (200, 200)
    );
    let third = follow().await.unwrap();
    assert_eq!(third.status(), 429);
    let body: Value = third.json().await.unwrap();
    assert_eq!(body["errorCode"], "too_many_followers", "{body}");
    // The slow run has asked the model: what comes later is another run's.
    let runs_before = model
        .wait_for_requests(1, Duration::from_secs(10))
        .await
        .len();
    let refused = http
        .post(host.url("/api/agents/writer/run"))
        .header("accept", "text/event-stream")
        .body("not started")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(model.requests().len(), runs_before, "a refused run started");
    drop(first);
    let started = std::time::Instant::now();
    loop {
        let again = follow().await.unwrap();
        if again.status() == 200 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the place of a reader that left never came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
