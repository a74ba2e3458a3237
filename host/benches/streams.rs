//! `make bench` (streams): streamed answers through the real binary.
//! - time to first chunk: a model server here streams its answer (first
//!   chunk at once, the rest 20 ms apart); the overhead is the time from
//!   the model sending its first chunk to the client receiving it as an SSE
//!   event from `POST /api/agents/writer/run` (`Accept: text/event-stream`),
//!   both on this process's clock;
//! - streams/s sustained: 16 clients each running streamed runs with the
//!   offline model, every answer read to its completion event;
//! - both with the embedded backend (the store) and with Redis Streams
//!   (`AGENTHOST_BENCH_REDIS`, which `make bench` starts).
//!
//! Appends to `target/bench/report.md`; nothing here asserts a speed.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::response::sse::{Event, Sse};
use common::{fmt, percentile, BenchHost};
use futures::StreamExt;

const FIRST_CHUNK_RUNS: usize = 100;
const CLIENTS: usize = 16;
const STREAMS_PER_CLIENT: usize = 50;

fn main() -> anyhow::Result<()> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let section = tokio.block_on(run())?;
    common::report(&section, false)
}

async fn run() -> anyhow::Result<String> {
    let model = StreamingModel::start().await?;
    let mut rows = Vec::new();
    let redis = std::env::var("AGENTHOST_BENCH_REDIS")
        .ok()
        .filter(|r| !r.is_empty());
    let backends: Vec<(&str, Option<String>)> = match redis {
        Some(url) => vec![("store (SQLite)", None), ("Redis Streams", Some(url))],
        None => vec![("store (SQLite)", None)],
    };
    for (name, redis) in backends {
        let dir = tempfile::tempdir()?;
        let store = format!("sqlite://{}", dir.path().join("bench.db").display());
        let mut env = vec![
            ("OPENAI_BASE_URL", model.base.as_str()),
            ("OPENAI_API_KEY", "bench"),
            ("OPENAI_MODEL", "bench"),
        ];
        if let Some(url) = &redis {
            env.push(("REDIS_CONNECTION_STRING", url.as_str()));
        }
        let host = BenchHost::launch_with_env(
            dir.path(),
            &["writer"],
            "serve",
            &["--store", &store],
            &env,
        )?;
        let mut overheads = first_chunk_overheads(&host.base, &model).await?;
        drop(host);
        let dir = tempfile::tempdir()?;
        let store = format!("sqlite://{}", dir.path().join("bench.db").display());
        let env: Vec<(&str, &str)> = redis
            .iter()
            .map(|url| ("REDIS_CONNECTION_STRING", url.as_str()))
            .collect();
        let offline = BenchHost::launch_with_env(
            dir.path(),
            &["writer"],
            "serve",
            &["--store", &store],
            &env,
        )?;
        let (streams_per_s, mut latencies) = sustained(&offline.base).await?;
        rows.push(format!(
            "| {name} | {} | {} | {streams_per_s:.0} | {} | {} |\n",
            fmt(percentile(&mut overheads, 50.0)),
            fmt(percentile(&mut overheads, 99.0)),
            fmt(percentile(&mut latencies, 50.0)),
            fmt(percentile(&mut latencies, 99.0)),
        ));
    }
    Ok(format!(
        "\n## Streamed answers (`Accept: text/event-stream`)\n\n\
         | backend | first chunk over the model's, p50 | p99 | streams/s ({CLIENTS} clients, offline model) | stream p50 | stream p99 |\n\
         |---|---|---|---|---|---|\n{}",
        rows.concat()
    ))
}

/// Posts a streamed run and reads until the first chunk event; returns the
/// instant it arrived.
async fn first_chunk_at(http: &reqwest::Client, base: &str) -> anyhow::Result<Instant> {
    let response = http
        .post(format!("{base}/api/agents/writer/run"))
        .header("accept", "text/event-stream")
        .body("Stream this")
        .send()
        .await?;
    anyhow::ensure!(response.status() == 200, "status {}", response.status());
    let mut body = response.bytes_stream();
    let mut seen = String::new();
    let mut first = None;
    while let Some(bytes) = body.next().await {
        seen.push_str(&String::from_utf8_lossy(&bytes?));
        if first.is_none() && seen.contains("event: chunk") {
            first = Some(Instant::now());
        }
        if seen.contains("event: complete") {
            break;
        }
    }
    first.ok_or_else(|| anyhow::anyhow!("no chunk event: {seen}"))
}

async fn first_chunk_overheads(
    base: &str,
    model: &StreamingModel,
) -> anyhow::Result<Vec<Duration>> {
    let http = reqwest::Client::new();
    for _ in 0..10 {
        first_chunk_at(&http, base).await?;
    }
    let mut overheads = Vec::with_capacity(FIRST_CHUNK_RUNS);
    for _ in 0..FIRST_CHUNK_RUNS {
        let received = first_chunk_at(&http, base).await?;
        let sent = model
            .last_first_chunk()
            .ok_or_else(|| anyhow::anyhow!("the model sent nothing"))?;
        overheads.push(received.saturating_duration_since(sent));
    }
    Ok(overheads)
}

/// `CLIENTS` clients, each reading `STREAMS_PER_CLIENT` streamed runs to the end.
async fn sustained(base: &str) -> anyhow::Result<(f64, Vec<Duration>)> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let url = Arc::new(format!("{base}/api/agents/writer/run"));
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                for _ in 0..STREAMS_PER_CLIENT {
                    let start = Instant::now();
                    let response = http
                        .post(url.as_str())
                        .header("accept", "text/event-stream")
                        .body("Write a haiku about tea")
                        .send()
                        .await?;
                    let text = response.text().await?;
                    anyhow::ensure!(text.contains("event: complete"), "{text}");
                    latencies.push(start.elapsed());
                }
                Ok(latencies)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for client in clients {
        latencies.extend(client.await??);
    }
    Ok((
        latencies.len() as f64 / started.elapsed().as_secs_f64(),
        latencies,
    ))
}

/// An OpenAI-compatible endpoint that streams four chunks, the first at
/// once, and notes when it sent the first.
struct StreamingModel {
    base: String,
    first_chunk: Arc<Mutex<Option<Instant>>>,
}

impl StreamingModel {
    async fn start() -> anyhow::Result<Self> {
        let first_chunk = Arc::new(Mutex::new(None));
        let noted = first_chunk.clone();
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            axum::routing::post(move || {
                let noted = noted.clone();
                async move {
                    let words = ["Tea ", "is ", "calm ", "water."];
                    let events = futures::stream::iter(words.into_iter().enumerate()).then(
                        move |(i, word)| {
                            let noted = noted.clone();
                            async move {
                                if i == 0 {
                                    *noted.lock().unwrap_or_else(|p| p.into_inner()) =
                                        Some(Instant::now());
                                } else {
                                    tokio::time::sleep(Duration::from_millis(20)).await;
                                }
                                let chunk = serde_json::json!({"choices": [{"index": 0, "delta": {"content": word}}]});
                                Ok::<_, std::convert::Infallible>(Event::default().data(chunk.to_string()))
                            }
                        },
                    );
                    let done = futures::stream::once(async {
                        Ok::<_, std::convert::Infallible>(Event::default().data("[DONE]"))
                    });
                    Sse::new(events.chain(done))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}/v1", listener.local_addr()?);
        let listener = axum::serve::ListenerExt::tap_io(listener, |connection| {
            let _ = connection.set_nodelay(true);
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(Self { base, first_chunk })
    }

    fn last_first_chunk(&self) -> Option<Instant> {
        *self.first_chunk.lock().unwrap_or_else(|p| p.into_inner())
    }
}
