//! Streamed answers: server-sent events on the run endpoint, live and
//! chunk by chunk; a consumer that drops and reconnects (with
//! `Last-Event-ID`, or `?cursor=`) gets exactly the rest; the whole text at
//! once with `Accept: text/plain`; orchestrations' agent calls stream too.
//! With Redis (the real server): `streaming/with_redis.rs`; under kill -9 and
//! lost entries: `streaming/faults.rs`.

use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};

use crate::support::durable::{instance_url, start, wait_for};
use crate::support::fake_model::echo_of;
use crate::support::host::Host;
use crate::support::redis::PrivateRedis;
use crate::support::{client, FakeModel, HostBuilder, Reply};

mod faults;
mod unfollowed;
mod with_redis;

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
