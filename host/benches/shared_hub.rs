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
//!
//! Then the durable workloads of `durable.rs` (`common::workloads`) on
//! PostgreSQL, on one `serve` and on a front + 2 workers, each setup on fresh
//! task hubs; beside them DBOS on a fresh PostgreSQL database of the same
//! server (`peer/dbos_peer.py`), and `pgbench` (TPC-B-like, writes) on a
//! scratch database as the machine's ceiling. `psql` creates and drops those
//! databases. A peer or pgbench that fails is a line in the report.
//!
//! Appends to `target/bench/report.md`; nothing here asserts a speed.
//! `AGENTHOST_BENCH_ONLY=durable-postgres` (or `shared-hub`) runs one of the
//! two sections alone.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::workloads::{self, Measured, Setup, ALONE, FANOUTS, ROUNDS as DURABLE_ROUNDS};
use common::{fmt, percentile, BenchHost};
use serde_json::{json, Value};

const SEQUENCES: usize = 20;
const ROUNDS: usize = 3;
const CLIENTS: usize = 16;
const RUNS: usize = 800;
const WAITING: usize = 40;
const LEASE: &str = "2s";
/// Waiting instances (ours and the peer's) in the durable workloads on
/// PostgreSQL.
const PG_WAITING: usize = 2_000;

fn main() -> anyhow::Result<()> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let Some(postgres) = std::env::var("AGENTHOST_BENCH_POSTGRES")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        return common::report(
            "\n## Several hosts on one PostgreSQL hub\n\nSkipped, and the durable workloads \
             on PostgreSQL too: set AGENTHOST_BENCH_POSTGRES (make bench does).\n",
            false,
        );
    };
    let only = std::env::var("AGENTHOST_BENCH_ONLY").unwrap_or_default();
    if only.is_empty() || only == "shared-hub" {
        let section = tokio.block_on(run(&postgres))?;
        common::report(&section, false)?;
    }
    if only.is_empty() || only == "durable-postgres" {
        let section = durable_on_postgres(&tokio, &postgres)?;
        common::report(&section, false)?;
    }
    Ok(())
}

struct Row {
    setup: String,
    steps_per_s: f64,
    runs_per_s: f64,
    p50: Duration,
    p99: Duration,
}

async fn run(postgres: &str) -> anyhow::Result<String> {
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
            postgres.into(),
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

/// A 10-step sequence, polled every millisecond by its own client.
async fn run_to_completion(
    http: &reqwest::Client,
    base: &str,
    input: Value,
) -> anyhow::Result<Duration> {
    workloads::run_to_completion_polled(http, base, "sequence", input, Duration::from_millis(1))
        .await
}

fn report(rows: &[Row], takeover: Duration) -> String {
    let mut out = format!(
        "\n## Several hosts on one PostgreSQL hub ({} cores)\n\n\
         | setup | steps/s ({SEQUENCES} × 10-step sequences, median of {ROUNDS}) | agent runs/s ({CLIENTS} connections; issue #21 target ≥ 3,000 req/s) | run p50 | run p99 (issue #21 target ≤ 20 ms) |\n\
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

/// The durable workloads on PostgreSQL (one `serve`; a front + 2 workers),
/// DBOS on PostgreSQL, and pgbench: the report section.
fn durable_on_postgres(tokio: &tokio::runtime::Runtime, postgres: &str) -> anyhow::Result<String> {
    let stamp = std::process::id();
    let hub = |setup: &str, label: &str| -> Vec<String> {
        vec![
            "--store".into(),
            postgres.into(),
            "--taskhub".into(),
            format!("bench{stamp}{setup}{label}"),
        ]
    };
    // Each launch is on a hub of its own (`main`, `wait2000`).
    let one_serve =
        |dir: &Path, label: &str| launch(dir, "serve", &hub("dur", label)).map(Setup::single);
    let front_and_two = |dir: &Path, label: &str| -> anyhow::Result<Setup> {
        let args = hub("fw", label);
        let mut hosts = (0..2)
            .map(|_| launch(dir, "worker", &args))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let mut front_args = args.clone();
        front_args.push("--no-worker".into());
        let front = launch(dir, "serve", &front_args)?;
        let base = front.base.clone();
        hosts.insert(0, front);
        Ok(Setup { base, hosts })
    };
    let serve = tokio.block_on(workloads::run(&one_serve, &[PG_WAITING]))?;
    let split = tokio.block_on(workloads::run(&front_and_two, &[PG_WAITING]))?;
    let peer = peer_on_postgres(postgres, stamp);
    let pgbench = pgbench(postgres, stamp);
    Ok(durable_report(&serve, &split, &peer, &pgbench))
}

/// `url` with its database replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (url, None),
    };
    let authority = head.find("://").map_or(0, |i| i + 3);
    let path = head[authority..]
        .find('/')
        .map_or(head.len(), |i| authority + i);
    let mut out = format!("{}/{database}", &head[..path]);
    if let Some(query) = query {
        out.push('?');
        out.push_str(query);
    }
    out
}

/// Runs `program` with `args`; `Err` says why it did not run or failed.
fn command(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => format!("{program} not found"),
            _ => format!("could not start {program}: {e}"),
        })?;
    if !output.status.success() {
        return Err(format!(
            "{program} {} failed ({}): {}",
            args.first().unwrap_or(&""),
            output.status,
            String::from_utf8_lossy(&output.stderr)
                .lines()
                .rev()
                .take(3)
                .collect::<Vec<_>>()
                .join(" | ")
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `statement` through psql on the server of `postgres` (its own database).
fn psql(postgres: &str, statement: &str) -> Result<(), String> {
    command(
        "psql",
        &[
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            statement,
            postgres,
        ],
    )
    .map(drop)
}

/// A fresh database `name` on the server of `postgres` for the time of
/// `work`, dropped after.
fn with_fresh_database<T>(
    postgres: &str,
    name: &str,
    work: impl FnOnce(&str) -> Result<T, String>,
) -> Result<T, String> {
    let drop_it = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
    psql(postgres, &drop_it)?;
    psql(postgres, &format!("CREATE DATABASE {name}"))?;
    let result = work(&with_database(postgres, name));
    let dropped = psql(postgres, &drop_it);
    let result = result?;
    dropped.map(|()| result)
}

/// DBOS with its system database on a fresh PostgreSQL database.
fn peer_on_postgres(postgres: &str, stamp: u32) -> Result<Value, String> {
    with_fresh_database(postgres, &format!("agenthost_bench_dbos_{stamp}"), |url| {
        workloads::run_peer(&PG_WAITING.to_string(), Some(url))
    })
}

/// pgbench's figures: write transactions/s at 8 clients, and one client's
/// average latency (a commit after another, as one sequence's steps are).
struct Pgbench {
    tps: f64,
    alone_latency_ms: f64,
}

/// pgbench, TPC-B-like with `-N` (no updates of the branch and teller rows),
/// 8 clients for 10 s, then 1 client for 5 s, on a scratch database.
fn pgbench(postgres: &str, stamp: u32) -> Result<Pgbench, String> {
    let figure = |out: &str, prefix: &str, suffix: &str| -> Result<f64, String> {
        out.lines()
            .find_map(|l| {
                l.strip_prefix(prefix)
                    .filter(|rest| rest.contains(suffix))
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
            })
            .ok_or_else(|| format!("no `{prefix}…{suffix}` in pgbench's output: {out}"))
    };
    with_fresh_database(
        postgres,
        &format!("agenthost_bench_pgbench_{stamp}"),
        |url| {
            command("pgbench", &["-i", "-s", "10", "-q", url])?;
            let eight = command("pgbench", &["-N", "-c", "8", "-j", "2", "-T", "10", url])?;
            let one = command("pgbench", &["-N", "-c", "1", "-T", "5", url])?;
            Ok(Pgbench {
                tps: figure(&eight, "tps = ", "without initial connection time")?,
                alone_latency_ms: figure(&one, "latency average = ", "ms")?,
            })
        },
    )
}

fn durable_report(
    serve: &Measured,
    split: &Measured,
    peer: &Result<Value, String>,
    pgbench: &Result<Pgbench, String>,
) -> String {
    let p = |key: &str| peer.as_ref().ok().and_then(|v| v[key].as_f64());
    let cell =
        |v: Option<f64>, unit: &str| v.map_or("–".to_string(), |v| format!("{v:.1} {unit}"));
    // agenthost (one serve / front + 2) against DBOS, > 1 when ahead.
    let ratio = |ours: [f64; 2], theirs: Option<f64>, higher_is_better: bool| {
        theirs.map_or("–".to_string(), |t| {
            let r = |o: f64| if higher_is_better { o / t } else { t / o };
            format!("**{:.1}×** / **{:.1}×**", r(ours[0]), r(ours[1]))
        })
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (serve_wait, split_wait) = (&serve.waiting[0], &split.waiting[0]);
    let mut out = String::from(
        "\n## Durable orchestrations on PostgreSQL, beside DBOS on PostgreSQL and pgbench\n\n",
    );
    out += &format!(
        "The workloads of the SQLite section on one PostgreSQL server: agenthost as one `serve`, \
         and as a front (`serve --no-worker`) with 2 `worker` processes, each on fresh task hubs \
         (the waiting instances on a hub of their own, {PG_WAITING} of them). "
    );
    match peer {
        Ok(v) => {
            out += &format!(
                "Peer: DBOS {} (Python) with its system database on a fresh PostgreSQL database \
                 of the same server, both of its styles measured, the better one quoted; its \
                 waiting workload ran with {} instances.\n\n",
                v["version"].as_str().unwrap_or("?"),
                v["waiting"]
            )
        }
        Err(why) => out += &format!("Peer not run: {why}\n\n"),
    }
    out += "| workload | agenthost one serve | agenthost front + 2 workers | DBOS (PG) | ratio vs DBOS (one serve / front + 2; > 1: agenthost ahead) | issue #21 target |\n\
            |---|---|---|---|---|---|\n";
    out += &format!(
        "| {SEQUENCES} × 10-step sequences at once (median of {DURABLE_ROUNDS}) | {:.0} steps/s | {:.0} steps/s | {} | {} | ≥ 3,000 steps/s |\n",
        serve.steps_per_s,
        split.steps_per_s,
        cell(p("sequence_steps_per_s"), "steps/s"),
        ratio([serve.steps_per_s, split.steps_per_s], p("sequence_steps_per_s"), true)
    );
    out += &format!(
        "| one 10-step sequence alone (median of {ALONE}) | {} | {} | {} | {} | ≤ 10 ms |\n",
        fmt(serve.alone),
        fmt(split.alone),
        cell(p("sequence_alone_ms"), "ms"),
        ratio(
            [ms(serve.alone), ms(split.alone)],
            p("sequence_alone_ms"),
            false
        )
    );
    out += &format!(
        "| 100-way fan-out (median of {FANOUTS}) | {} | {} | {} | {} | ≤ 20 ms |\n",
        fmt(serve.fanout),
        fmt(split.fanout),
        cell(p("fanout_ms"), "ms"),
        ratio([ms(serve.fanout), ms(split.fanout)], p("fanout_ms"), false)
    );
    out += &format!(
        "| raise-all to completion ({PG_WAITING} waiting) | {:.0} /s | {:.0} /s | {} | {} | ≥ 3,000 /s |\n\n",
        serve_wait.done_per_s(),
        split_wait.done_per_s(),
        cell(p("raise_to_done_per_s"), "/s"),
        ratio([serve_wait.done_per_s(), split_wait.done_per_s()], p("raise_to_done_per_s"), true)
    );
    out += &format!(
        "Fan-out min–max: one serve {}–{}, front + 2 {}–{}. Starts of the waiting instances \
         ({CLIENTS} HTTP clients): one serve {:.0}/s, front + 2 {:.0}/s{}. With each of the \
         {SEQUENCES} clients polling its own sequence instead of one poller: one serve {:.0} \
         steps/s, front + 2 {:.0} steps/s.\n\n",
        fmt(serve.fanout_range.0),
        fmt(serve.fanout_range.1),
        fmt(split.fanout_range.0),
        fmt(split.fanout_range.1),
        serve_wait.starts_per_s,
        split_wait.starts_per_s,
        p("starts_per_s").map_or(String::new(), |s| format!(", DBOS {s:.0}/s")),
        serve.steps_per_s_self_polled,
        split.steps_per_s_self_polled,
    );
    out += &format!(
        "Front + 2 workers against one serve (the issue asks for no slower): {}.\n\n",
        {
            let slower: Vec<&str> = [
                ("sequences", split.steps_per_s < serve.steps_per_s),
                ("one sequence alone", split.alone > serve.alone),
                ("fan-out", split.fanout > serve.fanout),
                (
                    "raise-all",
                    split_wait.done_per_s() < serve_wait.done_per_s(),
                ),
            ]
            .into_iter()
            .filter_map(|(name, slower)| slower.then_some(name))
            .collect();
            if slower.is_empty() {
                "no slower on any of the four".to_string()
            } else {
                format!("slower on {} in this run", slower.join(", "))
            }
        }
    );
    match pgbench {
        Ok(bench) => {
            out += &format!(
                "Ceiling: pgbench on the same server (scratch database, `-i -s 10`, then `-N -c 8 \
                 -j 2 -T 10`): **{:.0} write transactions/s** (each a few writes and one \
                 commit). One client alone (`-N -c 1 -T 5`): {:.2} ms a transaction.\n",
                bench.tps, bench.alone_latency_ms
            )
        }
        Err(why) => out += &format!("Ceiling: pgbench not run: {why}\n"),
    }
    if let Ok(v) = peer {
        out += &format!("\nPeer raw figures: `{v}`\n");
    }
    out
}
