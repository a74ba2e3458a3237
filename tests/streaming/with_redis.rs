//! With Redis (the real server): the stream's entries and TTL as a plain
//! Redis consumer sees them, a run that outlives Redis still answers, and
//! a Redis unreachable at start is a fallback or a refusal, as configured.

use std::time::Duration;

use serde_json::{json, Value};

use super::*;

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
