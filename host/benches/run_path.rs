//! `make bench`: an agent run beside the bare wasm runtime, and what a run
//! writes. Appends to `target/bench/report.md`:
//! - `wasmtime serve` (the CLI of the wasmtime the host embeds, `make
//!   wasmtime-cli`) answering the `hello-http` test guest, and a `writer`
//!   run (offline model, a new session each request) on SQLite and, with
//!   `AGENTHOST_BENCH_POSTGRES`, on PostgreSQL: requests/s, p50 and p99 at 1
//!   and at 16 connections, by one load generator (wrk when installed: `make
//!   bench` installs it; else a client in this process), rounds taken in
//!   turn so that the machine's drift falls on every peer alike; the ratios
//!   of the medians;
//! - the bytes each run made the store write (SQLite: the host's
//!   `/proc/PID/io` `write_bytes`, i.e. the WAL and its checkpoints;
//!   PostgreSQL: how far the WAL's insert position moved) and the rows it left, for a run
//!   whose caller waits for the whole answer and for one whose caller
//!   follows its stream.
//!
//! Medians over rounds; nothing here asserts a speed.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fmt, percentile, BenchHost};

/// Each load runs this long, after a warm-up of [`WARM_UP`].
const LOAD: Duration = Duration::from_secs(5);
const WARM_UP: Duration = Duration::from_secs(1);
const ROUNDS: usize = 3;
const CONNECTIONS: [usize; 2] = [1, 16];
/// Runs whose writes are counted, per kind.
const COUNTED_RUNS: usize = 1_000;

fn main() -> anyhow::Result<()> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = tokio.block_on(measure())?;
    common::report(&report, false)
}

/// One peer under load: where to send what.
struct Target {
    name: String,
    url: String,
    /// A POST with this body; a GET when `None`.
    body: Option<&'static str>,
}

/// One load's outcome.
#[derive(Clone, Copy)]
struct Load {
    per_second: f64,
    p50: Duration,
    p99: Duration,
}

async fn measure() -> anyhow::Result<String> {
    let scratch = tempfile::tempdir()?;
    let mut out = String::from("\n## An agent run beside the wasm runtime\n\n");
    let serve = WasmtimeServe::start()?;
    let sqlite_dir = scratch.path().join("sqlite");
    std::fs::create_dir_all(&sqlite_dir)?;
    let sqlite = BenchHost::start(&sqlite_dir, &["writer"])?;
    let postgres_url = std::env::var("AGENTHOST_BENCH_POSTGRES").ok();
    let postgres_dir = scratch.path().join("postgres");
    std::fs::create_dir_all(&postgres_dir)?;
    let hub = format!("runpath{}", std::process::id());
    let postgres = match &postgres_url {
        Some(url) => Some(BenchHost::launch(
            &postgres_dir,
            &["writer"],
            "serve",
            &["--store", url, "--taskhub", &hub],
        )?),
        None => None,
    };

    let mut targets = Vec::new();
    if let Some(serve) = &serve {
        targets.push(Target {
            name: format!("`{}` hello", serve.version),
            url: format!("{}/", serve.base),
            body: None,
        });
    }
    let writer = |base: &str| format!("{base}/api/agents/writer/run");
    targets.push(Target {
        name: "`writer` run, SQLite".into(),
        url: writer(&sqlite.base),
        body: Some("Write a haiku about tea"),
    });
    if let Some(host) = &postgres {
        targets.push(Target {
            name: "`writer` run, PostgreSQL".into(),
            url: writer(&host.base),
            body: Some("Write a haiku about tea"),
        });
    }

    // rounds[target][connections] = loads
    let mut rounds = vec![vec![Vec::new(); CONNECTIONS.len()]; targets.len()];
    for _ in 0..ROUNDS {
        for (t, target) in targets.iter().enumerate() {
            for (c, connections) in CONNECTIONS.iter().enumerate() {
                rounds[t][c].push(load(target, *connections, scratch.path()).await?);
            }
        }
    }
    let generator = if has_wrk() {
        "wrk (`--latency`: its percentiles), 1 thread a connection up to 2"
    } else {
        "the bench's own client (reqwest), in its process: install `wrk` for the same load from outside"
    };
    out += &format!(
        "Each cell: the median of {ROUNDS} rounds of {} s (peers taken in turn), requests/s, p50 / p99; \
         one closed-loop load generator for all: {generator}.\n\n\
         | peer | 1 connection | 16 connections |\n|---|---|---|\n",
        LOAD.as_secs()
    );
    let medians: Vec<Vec<Load>> = rounds
        .iter()
        .map(|per_connections| per_connections.iter().map(|loads| median(loads)).collect())
        .collect();
    for (target, loads) in targets.iter().zip(&medians) {
        out += &format!("| {} |", target.name);
        for load in loads {
            out += &format!(
                " {:.0} /s, {} / {} |",
                load.per_second,
                fmt(load.p50),
                fmt(load.p99)
            );
        }
        out += "\n";
    }
    if serve.is_some() {
        out +=
            "\nRatios to the runtime's hello (requests/s; p99 as a multiple of the hello's):\n\n\
                | peer | 1 connection | 16 connections |\n|---|---|---|\n";
        for (target, loads) in targets.iter().zip(&medians).skip(1) {
            out += &format!("| {} |", target.name);
            for (load, hello) in loads.iter().zip(&medians[0]) {
                out += &format!(
                    " **{:.2}**, p99 {:.1}× |",
                    load.per_second / hello.per_second,
                    load.p99.as_secs_f64() / hello.p99.as_secs_f64()
                );
            }
            out += "\n";
        }
    } else {
        out += "\n`wasmtime serve` not measured: run `make wasmtime-cli test-components` first.\n";
    }
    drop(sqlite);
    drop(postgres);

    out += &writes(scratch.path(), postgres_url.as_deref()).await?;
    Ok(out)
}

/// The round with the median requests/s.
fn median(loads: &[Load]) -> Load {
    let mut sorted = loads.to_vec();
    sorted.sort_by(|a, b| a.per_second.total_cmp(&b.per_second));
    sorted[sorted.len() / 2]
}

/// The load: by wrk (Debian's `wrk`, `make bench` installs it) when it is
/// there, the same tool for every peer and out of the bench's process; else
/// by the bench's own client.
async fn load(target: &Target, connections: usize, scratch: &Path) -> anyhow::Result<Load> {
    if has_wrk() {
        wrk(target, connections, scratch)
    } else {
        in_process(target, connections).await
    }
}

fn has_wrk() -> bool {
    Command::new("wrk")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// `wrk` with `connections` connections (a thread each, two at most: the
/// machine's cores), [`WARM_UP`] then [`LOAD`], its own latency percentiles.
fn wrk(target: &Target, connections: usize, scratch: &Path) -> anyhow::Result<Load> {
    let script = scratch.join("post.lua");
    let body = target.body.unwrap_or_default().replace('"', "\\\"");
    std::fs::write(
        &script,
        match target.body {
            Some(_) => format!(
                "wrk.method = \"POST\"\nwrk.body = \"{body}\"\nwrk.headers[\"Content-Type\"] = \"text/plain\"\n"
            ),
            None => String::new(),
        },
    )?;
    let threads = connections.min(2).to_string();
    let connections = connections.to_string();
    let run = |seconds: u64| {
        Command::new("wrk")
            .args(["-t", &threads, "-c", &connections, "--latency"])
            .arg("-d")
            .arg(format!("{seconds}s"))
            .arg("-s")
            .arg(&script)
            .arg(&target.url)
            .output()
    };
    run(WARM_UP.as_secs())?;
    let output = run(LOAD.as_secs())?;
    let text = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success() && !text.contains("Non-2xx"),
        "wrk on {}: {text}",
        target.url
    );
    let field = |prefix: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix).map(|v| v.trim().to_string()))
            .ok_or_else(|| anyhow::anyhow!("wrk printed no '{prefix}': {text}"))
    };
    Ok(Load {
        per_second: field("Requests/sec:")?.parse()?,
        p50: wrk_duration(&field("50%")?)?,
        p99: wrk_duration(&field("99%")?)?,
    })
}

/// A wrk latency: `812.00us`, `1.23ms`, `2.00s`.
fn wrk_duration(text: &str) -> anyhow::Result<Duration> {
    let (number, unit) = text.split_at(
        text.find(|c: char| c.is_ascii_alphabetic())
            .unwrap_or(text.len()),
    );
    let number: f64 = number.parse()?;
    let seconds = match unit {
        "us" => number / 1e6,
        "ms" => number / 1e3,
        "s" => number,
        "m" => number * 60.0,
        _ => anyhow::bail!("a wrk latency in '{unit}': {text}"),
    };
    Ok(Duration::from_secs_f64(seconds))
}

/// `connections` clients in this process, each sending its next request
/// once it has the last answer, for [`LOAD`] after [`WARM_UP`].
async fn in_process(target: &Target, connections: usize) -> anyhow::Result<Load> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(connections)
        .build()?;
    let url = Arc::new(target.url.clone());
    let body = target.body;
    let begin = Instant::now();
    let counted_from = begin + WARM_UP;
    let end = counted_from + LOAD;
    let clients: Vec<_> = (0..connections)
        .map(|_| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let start = Instant::now();
                    if start >= end {
                        return Ok::<_, anyhow::Error>(latencies);
                    }
                    let request = match body {
                        Some(body) => http.post(url.as_str()).body(body),
                        None => http.get(url.as_str()),
                    };
                    let response = request.send().await?;
                    anyhow::ensure!(response.status() == 200, "status {}", response.status());
                    response.bytes().await?;
                    if start >= counted_from {
                        latencies.push(start.elapsed());
                    }
                }
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for client in clients {
        latencies.extend(client.await??);
    }
    anyhow::ensure!(!latencies.is_empty(), "no request answered");
    Ok(Load {
        per_second: latencies.len() as f64 / LOAD.as_secs_f64(),
        p50: percentile(&mut latencies, 50.0),
        p99: percentile(&mut latencies, 99.0),
    })
}

/// `wasmtime serve` on the hello component, on a free port; killed on drop.
struct WasmtimeServe {
    child: Child,
    base: String,
    version: String,
}

impl WasmtimeServe {
    /// `None` when the CLI or the component is not built.
    fn start() -> anyhow::Result<Option<Self>> {
        let wasmtime = common::root().join("target/wasmtime-cli/bin/wasmtime");
        let (Ok(hello), true) = (common::component("hello-http"), wasmtime.exists()) else {
            return Ok(None);
        };
        let version = Command::new(&wasmtime).arg("--version").output()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let child = Command::new(&wasmtime)
            .arg("serve")
            .arg("-Scli")
            .arg("--addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg(&hello)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let serve = Self {
            child,
            base: format!("http://127.0.0.1:{port}"),
            version: String::from_utf8_lossy(&version.stdout)
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" "),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            anyhow::ensure!(Instant::now() < deadline, "wasmtime serve did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Some(serve))
    }
}

impl Drop for WasmtimeServe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The tables a run writes to, whose rows are counted.
const RUN_TABLES: [&str; 4] = ["sessions", "messages", "runs", "stream_entries"];

/// Bytes and rows per run: whole answers, then followed streams.
async fn writes(scratch: &Path, postgres: Option<&str>) -> anyhow::Result<String> {
    let mut out = format!(
        "\n### What one run writes ({COUNTED_RUNS} `writer` runs of each kind, one at a time, a new session each)\n\n\
         | store | run | bytes written per run | rows per run ({}) |\n|---|---|---|---|\n",
        RUN_TABLES.join(", ")
    );
    for streamed in [false, true] {
        let dir = scratch.join(format!("writes-sqlite-{streamed}"));
        std::fs::create_dir_all(&dir)?;
        let host = BenchHost::start(&dir, &["writer"])?;
        let bytes_before = written_bytes(&host)?;
        send_runs(&host.base, streamed).await?;
        let bytes = written_bytes(&host)? - bytes_before;
        drop(host);
        let rows = sqlite_rows(&dir.join("bench.db")).await?;
        out += &writes_row("SQLite", streamed, bytes, &rows);
    }
    if let Some(url) = postgres {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect(url)
            .await?;
        for streamed in [false, true] {
            let dir = scratch.join(format!("writes-postgres-{streamed}"));
            std::fs::create_dir_all(&dir)?;
            let hub = format!("runwrites{}{}", std::process::id(), u8::from(streamed));
            let host = BenchHost::launch(
                &dir,
                &["writer"],
                "serve",
                &["--store", url, "--taskhub", &hub],
            )?;
            // The WAL's insert position, not `pg_stat_wal`: a backend
            // reports its WAL statistics at most once a second, and a
            // thousand runs now take less.
            let wal = || async {
                sqlx::query_scalar::<_, i64>(
                    "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::BIGINT",
                )
                .fetch_one(&pool)
                .await
            };
            // Idle hosts write too (leases, the scheduler): a second of it
            // is left out by starting the count after the host settled.
            tokio::time::sleep(Duration::from_secs(1)).await;
            let before = wal().await?;
            send_runs(&host.base, streamed).await?;
            let bytes = wal().await? - before;
            drop(host);
            let mut rows = Vec::new();
            for table in RUN_TABLES {
                let count: i64 =
                    sqlx::query_scalar(&format!("SELECT COUNT(*) FROM \"taskhub_{hub}\".{table}"))
                        .fetch_one(&pool)
                        .await?;
                rows.push(count);
            }
            out += &writes_row("PostgreSQL (WAL)", streamed, bytes.max(0) as u64, &rows);
            sqlx::query(&format!("DROP SCHEMA \"taskhub_{hub}\" CASCADE"))
                .execute(&pool)
                .await?;
        }
    }
    Ok(out)
}

fn writes_row(store: &str, streamed: bool, bytes: u64, rows: &[i64]) -> String {
    let per_run = |n: f64| n / COUNTED_RUNS as f64;
    let rows: Vec<String> = rows
        .iter()
        .map(|r| format!("{:.1}", per_run(*r as f64)))
        .collect();
    format!(
        "| {store} | {} | {:.0} B | {} |\n",
        if streamed {
            "followed stream (SSE)"
        } else {
            "whole answer"
        },
        per_run(bytes as f64),
        rows.join(" / ")
    )
}

/// [`COUNTED_RUNS`] runs, one at a time; `streamed`: as server-sent events.
async fn send_runs(base: &str, streamed: bool) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let url = format!("{base}/api/agents/writer/run");
    for _ in 0..COUNTED_RUNS {
        let mut request = http.post(&url).body("Write a haiku about tea");
        if streamed {
            request = request.header("accept", "text/event-stream");
        }
        let response = request.send().await?;
        anyhow::ensure!(response.status() == 200, "status {}", response.status());
        let body = response.text().await?;
        anyhow::ensure!(
            !streamed || body.contains("event: complete"),
            "the stream did not complete: {body}"
        );
    }
    Ok(())
}

/// Bytes the host process made the kernel write to storage so far.
fn written_bytes(host: &BenchHost) -> anyhow::Result<u64> {
    let io = std::fs::read_to_string(format!("/proc/{}/io", host.pid()))?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no write_bytes in /proc/PID/io"))
}

async fn sqlite_rows(file: &Path) -> anyhow::Result<Vec<i64>> {
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect(&format!("sqlite://{}", file.display()))
        .await?;
    let mut rows = Vec::new();
    for table in RUN_TABLES {
        rows.push(
            sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
                .fetch_one(&pool)
                .await?,
        );
    }
    pool.close().await;
    Ok(rows)
}
