//! `make bench` (second part): the durable engine through the real binary.
//! - 10,000 instances waiting on an external event: the host's resident
//!   memory while they wait, and the time to raise all 10,000 events and see
//!   every instance complete;
//! - a 10-step sequential orchestration with an instant activity (steps/s);
//! - a 100-way fan-out (time to complete).
//!
//! Appends to `target/bench/report.md`. Nothing here asserts a speed.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fmt, percentile, BenchHost};
use serde_json::{json, Value};

const WAITING: usize = 10_000;
const CLIENTS: usize = 16;
const SEQUENCES: usize = 20;
const FANOUTS: usize = 5;

fn main() -> anyhow::Result<()> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let section = tokio.block_on(run())?;
    common::report(&section, false)
}

async fn run() -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let host = BenchHost::start(dir.path(), &["orchestration-tests"])?;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let base = Arc::new(host.base.clone());
    let mut out = String::from("\n## Durable orchestrations (SQLite store)\n\n");

    // 10,000 instances waiting on an event.
    let idle_rss = host.rss_mib()?;
    let started = Instant::now();
    for_each_concurrently(
        &http,
        &base,
        WAITING,
        |base, i| format!("{base}/api/orchestrators/wait_event/wait-{i}"),
        None,
    )
    .await?;
    let start_time = started.elapsed();
    wait_until_none(&http, &base, "Pending").await?;
    let all_waiting = started.elapsed();
    let waiting_rss = host.rss_mib()?;
    let raised = Instant::now();
    let instances = |base: &str, i: usize| {
        format!("{base}/runtime/webhooks/durabletask/instances/wait-{i}/raiseEvent/go")
    };
    for_each_concurrently(&http, &base, WAITING, instances, Some(json!({"go": true}))).await?;
    let raise_time = raised.elapsed();
    wait_until_none(&http, &base, "Running,Pending").await?;
    let raise_to_done = raised.elapsed();
    let done_rss = host.rss_mib()?;
    out += &format!(
        "{WAITING} instances of `wait_event` (each waits for one external event), {CLIENTS} HTTP clients:\n\n\
         | measure | value |\n|---|---|\n\
         | host RSS before any instance | {idle_rss:.0} MiB |\n\
         | start all {WAITING} (HTTP 202s) | {:.1} s ({:.0} starts/s) |\n\
         | until all {WAITING} are waiting | {:.1} s |\n\
         | **host RSS with {WAITING} instances waiting** | **{waiting_rss:.0} MiB** ({:.1} KiB per instance over idle) |\n\
         | raise all {WAITING} events (HTTP 202s) | {:.1} s |\n\
         | **from the first raise until all {WAITING} completed** | **{:.1} s** ({:.0} instances/s) |\n\
         | host RSS after | {done_rss:.0} MiB |\n\n",
        start_time.as_secs_f64(),
        WAITING as f64 / start_time.as_secs_f64(),
        all_waiting.as_secs_f64(),
        (waiting_rss - idle_rss) * 1024.0 / WAITING as f64,
        raise_time.as_secs_f64(),
        raise_to_done.as_secs_f64(),
        WAITING as f64 / raise_to_done.as_secs_f64(),
    );

    // 10-step sequences with an instant activity.
    let mut single = Vec::new();
    for _ in 0..5 {
        single.push(run_to_completion(&http, &base, "sequence", json!({"n": 10})).await?);
    }
    let started = Instant::now();
    let runs: Vec<_> = (0..SEQUENCES)
        .map(|_| {
            let (http, base) = (http.clone(), base.clone());
            tokio::spawn(async move {
                run_to_completion(&http, &base, "sequence", json!({"n": 10})).await
            })
        })
        .collect();
    for run in runs {
        run.await??;
    }
    let elapsed = started.elapsed();
    out += &format!(
        "10-step sequential orchestration (instant activity): one instance alone completes in {} (median of 5, \
         {:.0} steps/s); {SEQUENCES} at once complete in {:.2} s: **{:.0} steps/s**.\n\n",
        fmt(percentile(&mut single, 50.0)),
        10.0 / percentile(&mut single, 50.0).as_secs_f64(),
        elapsed.as_secs_f64(),
        (SEQUENCES * 10) as f64 / elapsed.as_secs_f64(),
    );

    let mut fanouts = Vec::new();
    for _ in 0..FANOUTS {
        fanouts.push(run_to_completion(&http, &base, "fanout", json!({"n": 100})).await?);
    }
    out += &format!(
        "100-way fan-out (100 instant activities awaited together): **{}** median to completion over {FANOUTS} runs \
         (min {}, max {}).\n",
        fmt(percentile(&mut fanouts, 50.0)),
        fmt(percentile(&mut fanouts, 0.0)),
        fmt(percentile(&mut fanouts, 100.0)),
    );
    Ok(out)
}

/// POSTs to `url(base, i)` for i in 0..count from `CLIENTS` concurrent clients.
async fn for_each_concurrently(
    http: &reqwest::Client,
    base: &Arc<String>,
    count: usize,
    url: fn(&str, usize) -> String,
    body: Option<Value>,
) -> anyhow::Result<()> {
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (http, base, body) = (http.clone(), base.clone(), body.clone());
            tokio::spawn(async move {
                for i in (c..count).step_by(CLIENTS) {
                    let mut request = http.post(url(&base, i));
                    if let Some(body) = &body {
                        request = request.json(body);
                    }
                    let response = request.send().await?;
                    anyhow::ensure!(
                        response.status() == 202,
                        "POST {} answered {}",
                        url(&base, i),
                        response.status()
                    );
                }
                Ok(())
            })
        })
        .collect();
    for client in clients {
        client.await??;
    }
    Ok(())
}

/// Polls until no instance has one of `statuses`.
async fn wait_until_none(http: &reqwest::Client, base: &str, statuses: &str) -> anyhow::Result<()> {
    let url = format!("{base}/runtime/webhooks/durabletask/instances?runtimeStatus={statuses}&top=1&showInput=false");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let page: Vec<Value> = http.get(&url).send().await?.json().await?;
        if page.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "instances still {statuses} after 10 minutes"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts an instance and returns the time until it completed.
async fn run_to_completion(
    http: &reqwest::Client,
    base: &str,
    name: &str,
    input: Value,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let response: Value = http
        .post(format!("{base}/api/orchestrators/{name}"))
        .json(&input)
        .send()
        .await?
        .json()
        .await?;
    let status_url = response["statusQueryGetUri"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("no status URL: {response}"))?
        .to_string();
    loop {
        let status: Value = http.get(&status_url).send().await?.json().await?;
        match status["runtimeStatus"].as_str() {
            Some("Completed") => return Ok(started.elapsed()),
            Some("Failed") | Some("Terminated") => {
                anyhow::bail!("{name} did not complete: {status}")
            }
            _ => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    }
}
