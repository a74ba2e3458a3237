//! `make bench` (third part): several processes on one PostgreSQL task hub,
//! beside one host on SQLite and one on PostgreSQL, in the same run:
//! - durable steps/s: 20 ten-step sequences at once (median of 3 rounds);
//! - agent runs/s: synchronous `POST /api/agents/writer/run` from 16
//!   connections (offline model), through the HTTP host or front;
//! - take-over: 40 instances waiting on two workers, one killed with
//!   SIGKILL, all events raised at once: time until the last completes
//!   (the lease is 2 s).
//!
//! Setups: `serve` alone, then one `serve --no-worker` front with 1, 2 and 4
//! `agenthost worker` processes. The PostgreSQL database comes from
//! `AGENTHOST_BENCH_POSTGRES` (`make bench` starts PostgreSQL and sets it).
//! Appends to `target/bench/report.md`; nothing here asserts a speed.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fmt, percentile, BenchHost};
use serde_json::{json, Value};

const SEQUENCES: usize = 20;
const ROUNDS: usize = 3;
const CLIENTS: usize = 16;
const RUNS: usize = 800;
const WAITING: usize = 40;
const LEASE: &str = "2s";

fn main() -> anyhow::Result<()> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let section = tokio.block_on(run())?;
    common::report(&section, false)
}

struct Row {
    setup: String,
    steps_per_s: f64,
    runs_per_s: f64,
    p50: Duration,
    p99: Duration,
}

async fn run() -> anyhow::Result<String> {
    let Some(postgres) = std::env::var("AGENTHOST_BENCH_POSTGRES")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        return Ok("\n## Several hosts on one PostgreSQL hub\n\nSkipped: set \
                   AGENTHOST_BENCH_POSTGRES (make bench does).\n"
            .into());
    };
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let mut rows = Vec::new();
    {
        let dir = tempfile::tempdir()?;
        let host = BenchHost::start(dir.path(), &["writer", "orchestration-tests"])?;
        rows.push(measure(&http, "SQLite, one `serve`", &host.base).await?);
    }
    let hub_args = |hub: &str| -> Vec<String> {
        vec![
            "--store".into(),
            postgres.clone(),
            "--taskhub".into(),
            hub.into(),
            "--lease".into(),
            LEASE.into(),
        ]
    };
    let stamp = std::process::id();
    {
        let dir = tempfile::tempdir()?;
        let args = hub_args(&format!("bench{stamp}serve"));
        let host = launch(dir.path(), "serve", &args)?;
        rows.push(measure(&http, "PostgreSQL, one `serve`", &host.base).await?);
    }
    for workers in [1, 2, 4] {
        let dir = tempfile::tempdir()?;
        let args = hub_args(&format!("bench{stamp}w{workers}"));
        let _workers: Vec<BenchHost> = (0..workers)
            .map(|_| launch(dir.path(), "worker", &args))
            .collect::<anyhow::Result<_>>()?;
        let mut front_args = args.clone();
        front_args.push("--no-worker".into());
        let front = launch(dir.path(), "serve", &front_args)?;
        let setup = format!(
            "PostgreSQL, one front + {workers} worker{}",
            plural(workers)
        );
        rows.push(measure(&http, &setup, &front.base).await?);
    }
    let takeover = {
        let dir = tempfile::tempdir()?;
        let args = hub_args(&format!("bench{stamp}takeover"));
        take_over(&http, dir.path(), &args).await?
    };
    Ok(report(&rows, takeover))
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn launch(dir: &std::path::Path, mode: &str, args: &[String]) -> anyhow::Result<BenchHost> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    BenchHost::launch(dir, &["writer", "orchestration-tests"], mode, &args)
}

async fn measure(http: &reqwest::Client, setup: &str, base: &str) -> anyhow::Result<Row> {
    // Warm-up: caches, connections, the first claims.
    run_to_completion(http, base, json!({"n": 10})).await?;
    let mut rounds = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        let runs: Vec<_> = (0..SEQUENCES)
            .map(|_| {
                let (http, base) = (http.clone(), base.to_string());
                tokio::spawn(async move { run_to_completion(&http, &base, json!({"n": 10})).await })
            })
            .collect();
        for run in runs {
            run.await??;
        }
        rounds.push(started.elapsed());
    }
    let steps_per_s = (SEQUENCES * 10) as f64 / percentile(&mut rounds, 50.0).as_secs_f64();

    let url = Arc::new(format!("{base}/api/agents/writer/run"));
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                for _ in 0..RUNS / CLIENTS {
                    let start = Instant::now();
                    let response = http
                        .post(url.as_str())
                        .body("Write a haiku about tea")
                        .send()
                        .await?;
                    anyhow::ensure!(response.status() == 200, "status {}", response.status());
                    response.bytes().await?;
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
    let runs_per_s = latencies.len() as f64 / started.elapsed().as_secs_f64();
    Ok(Row {
        setup: setup.into(),
        steps_per_s,
        runs_per_s,
        p50: percentile(&mut latencies, 50.0),
        p99: percentile(&mut latencies, 99.0),
    })
}

/// Two workers share `WAITING` waiting instances; one is killed; every
/// event is raised at once. Returns the time from the kill to the last
/// completion.
async fn take_over(
    http: &reqwest::Client,
    dir: &std::path::Path,
    args: &[String],
) -> anyhow::Result<Duration> {
    let mut first = launch(dir, "worker", args)?;
    let _second = launch(dir, "worker", args)?;
    let mut front_args = args.to_vec();
    front_args.push("--no-worker".into());
    let front = launch(dir, "serve", &front_args)?;
    let base = &front.base;
    let mut ids = Vec::new();
    for _ in 0..WAITING {
        let started: Value = http
            .post(format!("{base}/api/orchestrators/wait_event"))
            .send()
            .await?
            .json()
            .await?;
        ids.push(
            started["id"]
                .as_str()
                .ok_or_else(|| anyhow::anyhow!("no id: {started}"))?
                .to_string(),
        );
    }
    // Every instance has run its first episode (it says it waits).
    for id in &ids {
        let url = format!("{base}/runtime/webhooks/durabletask/instances/{id}");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status: Value = http.get(&url).send().await?.json().await?;
            if status["customStatus"] == "waiting" {
                break;
            }
            anyhow::ensure!(Instant::now() < deadline, "{id} never waited: {status}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    first.kill();
    let killed = Instant::now();
    for id in &ids {
        let response = http
            .post(format!(
                "{base}/runtime/webhooks/durabletask/instances/{id}/raiseEvent/go"
            ))
            .json(&json!(1))
            .send()
            .await?;
        anyhow::ensure!(
            response.status() == 202,
            "raise answered {}",
            response.status()
        );
    }
    for id in &ids {
        let url = format!("{base}/runtime/webhooks/durabletask/instances/{id}");
        loop {
            let status: Value = http.get(&url).send().await?.json().await?;
            if status["runtimeStatus"] == "Completed" {
                break;
            }
            anyhow::ensure!(
                killed.elapsed() < Duration::from_secs(60),
                "{id} not taken over: {status}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    Ok(killed.elapsed())
}

async fn run_to_completion(
    http: &reqwest::Client,
    base: &str,
    input: Value,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let response: Value = http
        .post(format!("{base}/api/orchestrators/sequence"))
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
            Some("Failed") | Some("Terminated") => anyhow::bail!("did not complete: {status}"),
            _ => tokio::time::sleep(Duration::from_millis(1)).await,
        }
    }
}

fn report(rows: &[Row], takeover: Duration) -> String {
    let mut out = format!(
        "\n## Several hosts on one PostgreSQL hub ({} cores)\n\n\
         | setup | steps/s ({SEQUENCES} × 10-step sequences, median of {ROUNDS}) | agent runs/s ({CLIENTS} connections) | run p50 | run p99 |\n\
         |---|---|---|---|---|\n",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for row in rows {
        out += &format!(
            "| {} | {:.0} | {:.0} | {} | {} |\n",
            row.setup,
            row.steps_per_s,
            row.runs_per_s,
            fmt(row.p50),
            fmt(row.p99)
        );
    }
    out += &format!(
        "\nTake-over: {WAITING} instances waiting on two workers (lease {LEASE}); one worker \
         killed with SIGKILL and every event raised at once: the last instance completed \
         {} after the kill.\n",
        fmt(takeover)
    );
    out
}
