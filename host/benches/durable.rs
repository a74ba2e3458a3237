//! `make bench` (second part): the durable engine through the real binary,
//! and the same workloads on a peer, DBOS (Python, SQLite), in the same run:
//! - 20 ten-step sequences at once (steps/s) and one alone (latency);
//! - a 100-way fan-out (time to complete);
//! - 10,000 and 100,000 instances waiting on an external event: start rate,
//!   the host's resident memory while they wait, and raise-all to completion.
//!
//! Appends to `target/bench/report.md`. Nothing here asserts a speed. The
//! peer runs from `target/bench-venv` (`make bench-peer` installs it); set
//! `AGENTHOST_BENCH_PEER_WAITING` to size its waiting workload (default 2,000:
//! DBOS starts about a hundred waiting workflows a second here).

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fmt, percentile, root, BenchHost};
use serde_json::{json, Value};

const WAITING: [usize; 2] = [10_000, 100_000];
const CLIENTS: usize = 16;
const SEQUENCES: usize = 20;
const FANOUTS: usize = 5;
/// Runs of one sequence alone (after a warm-up); the median is quoted. A
/// lone run's time varies by 2× from one to the next on this VM: five runs
/// made the median swing between reports.
const ALONE: usize = 21;
/// Rounds of the 20-sequence workload; the median is quoted.
const ROUNDS: usize = 5;

fn main() -> anyhow::Result<()> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let ours = tokio.block_on(run())?;
    let peer = run_peer();
    let section = report(&ours, &peer);
    common::report(&section, false)
}

/// What one run of our workloads measured.
#[derive(Default)]
struct Measured {
    steps_per_s: f64,
    steps_per_s_self_polled: f64,
    alone: Duration,
    fanout: Duration,
    fanout_range: (Duration, Duration),
    waiting: Vec<Waiting>,
}

struct Waiting {
    count: usize,
    idle_rss: f64,
    starts_per_s: f64,
    until_waiting: Duration,
    rss: f64,
    raise_time: Duration,
    raise_to_done: Duration,
}

impl Waiting {
    fn kib_each(&self) -> f64 {
        (self.rss - self.idle_rss) * 1024.0 / self.count as f64
    }

    fn done_per_s(&self) -> f64 {
        self.count as f64 / self.raise_to_done.as_secs_f64()
    }
}

async fn run() -> anyhow::Result<Measured> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let mut measured = Measured::default();
    {
        let dir = tempfile::tempdir()?;
        let host = BenchHost::start(dir.path(), &["orchestration-tests"])?;
        let base = host.base.clone();
        let mut single = Vec::new();
        for _ in 0..=ALONE {
            single.push(run_to_completion(&http, &base, "sequence", json!({"n": 10})).await?);
        }
        single.remove(0); // warm-up: the first run compiles nothing but warms caches
        measured.alone = percentile(&mut single, 50.0);
        // One poller watches for the end: twenty polling their own instance
        // every half millisecond take CPU from the engine being measured.
        let mut rounds = Vec::new();
        for _ in 0..ROUNDS {
            let started = Instant::now();
            for_each_concurrently(
                &http,
                &Arc::new(base.clone()),
                SEQUENCES,
                |base, _| format!("{base}/api/orchestrators/sequence"),
                Some(json!({"n": 10})),
            )
            .await?;
            wait_until_none_every(&http, &base, "Pending,Running", Duration::from_millis(1))
                .await?;
            rounds.push(started.elapsed());
        }
        measured.steps_per_s =
            (SEQUENCES * 10) as f64 / percentile(&mut rounds, 50.0).as_secs_f64();
        // The harness of earlier reports, for comparison with them.
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
        measured.steps_per_s_self_polled =
            (SEQUENCES * 10) as f64 / started.elapsed().as_secs_f64();
        let mut fanouts = Vec::new();
        for _ in 0..FANOUTS {
            fanouts.push(run_to_completion(&http, &base, "fanout", json!({"n": 100})).await?);
        }
        measured.fanout = percentile(&mut fanouts, 50.0);
        measured.fanout_range = (
            percentile(&mut fanouts, 0.0),
            percentile(&mut fanouts, 100.0),
        );
    }
    for count in WAITING {
        measured.waiting.push(waiting(&http, count).await?);
    }
    Ok(measured)
}

/// `count` instances of `wait_event` in a fresh host: started, waiting, then
/// one event raised at each.
async fn waiting(http: &reqwest::Client, count: usize) -> anyhow::Result<Waiting> {
    let dir = tempfile::tempdir()?;
    let host = BenchHost::start(dir.path(), &["orchestration-tests"])?;
    let base = Arc::new(host.base.clone());
    let idle_rss = host.rss_mib()?;
    let started = Instant::now();
    let starts = |base: &str, i: usize| format!("{base}/api/orchestrators/wait_event/wait-{i}");
    for_each_concurrently(http, &base, count, starts, None).await?;
    let start_time = started.elapsed();
    wait_until_none(http, &base, "Pending").await?;
    let until_waiting = started.elapsed();
    let rss = host.rss_mib()?;
    let raised = Instant::now();
    let instances = |base: &str, i: usize| {
        format!("{base}/runtime/webhooks/durabletask/instances/wait-{i}/raiseEvent/go")
    };
    for_each_concurrently(http, &base, count, instances, Some(json!({"go": true}))).await?;
    let raise_time = raised.elapsed();
    wait_until_none(http, &base, "Running,Pending").await?;
    Ok(Waiting {
        count,
        idle_rss,
        starts_per_s: count as f64 / start_time.as_secs_f64(),
        until_waiting,
        rss,
        raise_time,
        raise_to_done: raised.elapsed(),
    })
}

/// Runs the DBOS peer; `Err` says why it did not run.
fn run_peer() -> Result<Value, String> {
    let python = root().join("target/bench-venv/bin/python");
    if !python.exists() {
        return Err("target/bench-venv is missing: run `make bench-peer` (make bench does)".into());
    }
    let waiting = std::env::var("AGENTHOST_BENCH_PEER_WAITING").unwrap_or_else(|_| "2000".into());
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let output = Command::new(python)
        .arg(root().join("host/benches/peer/dbos_peer.py"))
        .arg(dir.path())
        .arg(&waiting)
        .output()
        .map_err(|e| format!("could not start the peer: {e}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<Value>(l).ok())
        .ok_or_else(|| {
            format!(
                "the peer printed no result (exit {:?}): {}",
                output.status.code(),
                String::from_utf8_lossy(&output.stderr)
                    .lines()
                    .rev()
                    .take(5)
                    .collect::<Vec<_>>()
                    .join(" | ")
            )
        })
}

fn report(ours: &Measured, peer: &Result<Value, String>) -> String {
    let p = |key: &str| peer.as_ref().ok().and_then(|v| v[key].as_f64());
    let cell =
        |v: Option<f64>, unit: &str| v.map_or("–".to_string(), |v| format!("{v:.1} {unit}"));
    let ratio = |ours: f64, theirs: Option<f64>, higher_is_better: bool| {
        theirs.map_or("–".to_string(), |t| {
            let r = if higher_is_better { ours / t } else { t / ours };
            format!("**{r:.1}×**")
        })
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let ten_k = &ours.waiting[0];
    let mut out =
        String::from("\n## Durable orchestrations (SQLite store), beside DBOS in the same run\n\n");
    match peer {
        Ok(v) => out += &format!(
            "Peer: DBOS {} (Python, SQLite system database), both of its styles measured (async workflows; sync workflows on threads with a queue for the fan-out), the better one quoted. Its waiting workload ran with {} instances.\n\n",
            v["version"].as_str().unwrap_or("?"),
            v["waiting"]
        ),
        Err(why) => out += &format!("Peer not run: {why}\n\n"),
    }
    out += "| workload | agenthost | DBOS | agenthost ahead by | issue target |\n|---|---|---|---|---|\n";
    out += &format!(
        "| 20 × 10-step sequences at once (median of {ROUNDS}) | {:.0} steps/s | {} | {} | ≥ 5,000 steps/s |\n",
        ours.steps_per_s,
        cell(p("sequence_steps_per_s"), "steps/s"),
        ratio(ours.steps_per_s, p("sequence_steps_per_s"), true)
    );
    out += &format!(
        "| one 10-step sequence alone (median of {ALONE}) | {} | {} | {} | ≤ 5 ms |\n",
        fmt(ours.alone),
        cell(p("sequence_alone_ms"), "ms"),
        ratio(ms(ours.alone), p("sequence_alone_ms"), false)
    );
    out += &format!(
        "| 100-way fan-out (median of {FANOUTS}; min {}, max {}) | {} | {} | {} | ≤ 30 ms |\n",
        fmt(ours.fanout_range.0),
        fmt(ours.fanout_range.1),
        fmt(ours.fanout),
        cell(p("fanout_ms"), "ms"),
        ratio(ms(ours.fanout), p("fanout_ms"), false)
    );
    out += &format!(
        "| starts of waiting instances ({} here) | {:.0} starts/s | {} | {} | ≥ 5,000 starts/s |\n",
        ten_k.count,
        ten_k.starts_per_s,
        cell(p("starts_per_s"), "starts/s"),
        ratio(ten_k.starts_per_s, p("starts_per_s"), true)
    );
    out += &format!(
        "| raise-all to completion ({} here) | {:.0} /s | {} | {} | ≥ 5,000 /s |\n",
        ten_k.count,
        ten_k.done_per_s(),
        cell(p("raise_to_done_per_s"), "/s"),
        ratio(ten_k.done_per_s(), p("raise_to_done_per_s"), true)
    );
    out += &format!(
        "| memory per waiting instance | {:.1} KiB | {} | {} | 100,000 in ≤ 200 MiB |\n\n",
        ten_k.kib_each(),
        cell(p("waiting_kib_each"), "KiB"),
        ratio(ten_k.kib_each(), p("waiting_kib_each"), false)
    );
    out += "agenthost's waiting instances, each in a fresh host, 16 HTTP clients:\n\n\
            | instances | RSS idle | start (202s) | until all wait | **RSS waiting** | raise all (202s) | **raise → all done** |\n\
            |---|---|---|---|---|---|---|\n";
    for w in &ours.waiting {
        out += &format!(
            "| {} | {:.0} MiB | {:.1} s ({:.0}/s) | {:.1} s | **{:.0} MiB** ({:.1} KiB each) | {:.1} s | **{:.1} s** ({:.0}/s) |\n",
            w.count,
            w.idle_rss,
            w.count as f64 / w.starts_per_s,
            w.starts_per_s,
            w.until_waiting.as_secs_f64(),
            w.rss,
            w.kib_each(),
            w.raise_time.as_secs_f64(),
            w.raise_to_done.as_secs_f64(),
            w.done_per_s(),
        );
    }
    out += &format!(
        "\nThe sequences' end is watched by one poller (every 1 ms). With each of the 20 clients polling its own \
         instance every 0.5 ms instead, the harness of reports before 2026-11-23: {:.0} steps/s.\n",
        ours.steps_per_s_self_polled
    );
    if let Ok(v) = peer {
        out += &format!("\nPeer raw figures: `{v}`\n");
    }
    out
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
    wait_until_none_every(http, base, statuses, Duration::from_millis(20)).await
}

async fn wait_until_none_every(
    http: &reqwest::Client,
    base: &str,
    statuses: &str,
    every: Duration,
) -> anyhow::Result<()> {
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
        tokio::time::sleep(every).await;
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
            _ => tokio::time::sleep(Duration::from_micros(500)).await,
        }
    }
}
