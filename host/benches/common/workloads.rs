//! The durable workloads, measured through the real binary on whatever a
//! launcher starts (one host on SQLite, one `serve` on PostgreSQL, a front
//! and workers on one hub): `durable.rs` and `shared_hub.rs` share them.
//! - 20 ten-step sequences at once (steps/s, median of [`ROUNDS`]) and one
//!   alone (median latency of [`ALONE`]);
//! - a 100-way fan-out (median of [`FANOUTS`]);
//! - N instances waiting on an external event, each N in a fresh setup:
//!   start rate, resident memory while they wait, raise-all to completion.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{percentile, root, BenchHost};

/// Concurrent HTTP clients that start and raise.
pub const CLIENTS: usize = 16;
/// Sequences run at once.
pub const SEQUENCES: usize = 20;
/// Fan-outs run one after the other; the median is quoted.
pub const FANOUTS: usize = 5;
/// Runs of one sequence alone (after a warm-up); the median is quoted. A
/// lone run's time varies by 2× from one to the next on this VM: five runs
/// made the median swing between reports.
pub const ALONE: usize = 21;
/// Rounds of the 20-sequence workload; the median is quoted.
pub const ROUNDS: usize = 5;

/// The processes of one setup: `base` takes the HTTP requests (a `serve`, or
/// a front), `hosts` are every process of it (their memory is added up).
pub struct Setup {
    pub base: String,
    pub hosts: Vec<BenchHost>,
}

impl Setup {
    /// One process that serves HTTP and runs the work.
    pub fn single(host: BenchHost) -> Self {
        Self {
            base: host.base.clone(),
            hosts: vec![host],
        }
    }

    /// Resident memory of all the processes, in MiB.
    pub fn rss_mib(&self) -> anyhow::Result<f64> {
        self.hosts.iter().map(BenchHost::rss_mib).sum()
    }
}

/// What one run of the workloads measured.
#[derive(Default)]
pub struct Measured {
    pub steps_per_s: f64,
    pub steps_per_s_self_polled: f64,
    pub alone: Duration,
    pub fanout: Duration,
    pub fanout_range: (Duration, Duration),
    pub waiting: Vec<Waiting>,
}

pub struct Waiting {
    pub count: usize,
    pub idle_rss: f64,
    pub starts_per_s: f64,
    pub until_waiting: Duration,
    pub rss: f64,
    pub raise_time: Duration,
    pub raise_to_done: Duration,
}

impl Waiting {
    pub fn kib_each(&self) -> f64 {
        (self.rss - self.idle_rss) * 1024.0 / self.count as f64
    }

    pub fn done_per_s(&self) -> f64 {
        self.count as f64 / self.raise_to_done.as_secs_f64()
    }
}

/// The sequences and the fan-out on one setup, then each count of
/// `waiting` instances on a fresh one. `launch` starts a fresh setup (a fresh
/// store or task hub) with its files in the directory given; its label says
/// what it is for (`main`, `wait2000`), so that a hub can be named after it.
pub async fn run(
    launch: &impl Fn(&Path, &str) -> anyhow::Result<Setup>,
    waiting_counts: &[usize],
) -> anyhow::Result<Measured> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let mut measured = Measured::default();
    {
        let dir = tempfile::tempdir()?;
        let setup = launch(dir.path(), "main")?;
        let base = setup.base.clone();
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
    for &count in waiting_counts {
        measured.waiting.push(waiting(&http, launch, count).await?);
    }
    Ok(measured)
}

/// `count` instances of `wait_event` in a fresh setup: started, waiting,
/// then one event raised at each.
pub async fn waiting(
    http: &reqwest::Client,
    launch: &impl Fn(&Path, &str) -> anyhow::Result<Setup>,
    count: usize,
) -> anyhow::Result<Waiting> {
    let dir = tempfile::tempdir()?;
    let setup = launch(dir.path(), &format!("wait{count}"))?;
    let base = Arc::new(setup.base.clone());
    let idle_rss = setup.rss_mib()?;
    let started = Instant::now();
    let starts = |base: &str, i: usize| format!("{base}/api/orchestrators/wait_event/wait-{i}");
    for_each_concurrently(http, &base, count, starts, None).await?;
    let start_time = started.elapsed();
    wait_until_none(http, &base, "Pending").await?;
    let until_waiting = started.elapsed();
    let rss = setup.rss_mib()?;
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

/// POSTs to `url(base, i)` for i in 0..count from `CLIENTS` concurrent clients.
pub async fn for_each_concurrently(
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
pub async fn wait_until_none(
    http: &reqwest::Client,
    base: &str,
    statuses: &str,
) -> anyhow::Result<()> {
    wait_until_none_every(http, base, statuses, Duration::from_millis(20)).await
}

pub async fn wait_until_none_every(
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

/// Starts an instance and returns the time until it completed, its status
/// polled every half millisecond.
pub async fn run_to_completion(
    http: &reqwest::Client,
    base: &str,
    name: &str,
    input: Value,
) -> anyhow::Result<Duration> {
    run_to_completion_polled(http, base, name, input, Duration::from_micros(500)).await
}

/// [`run_to_completion`], its status polled every `every`.
pub async fn run_to_completion_polled(
    http: &reqwest::Client,
    base: &str,
    name: &str,
    input: Value,
    every: Duration,
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
            _ => tokio::time::sleep(every).await,
        }
    }
}

/// The size of the peer's waiting workload: `AGENTHOST_BENCH_PEER_WAITING`,
/// 2,000 by default (DBOS starts about a hundred waiting workflows a second
/// here on SQLite).
pub fn peer_waiting() -> String {
    std::env::var("AGENTHOST_BENCH_PEER_WAITING").unwrap_or_else(|_| "2000".into())
}

/// Runs the DBOS peer (`peer/dbos_peer.py`) with `waiting` waiting
/// workflows, its system database SQLite in a fresh directory, or the
/// PostgreSQL database `database_url`; `Err` says why it did not run.
pub fn run_peer(waiting: &str, database_url: Option<&str>) -> Result<Value, String> {
    let python = root().join("target/bench-venv/bin/python");
    if !python.exists() {
        return Err("target/bench-venv is missing: run `make bench-peer` (make bench does)".into());
    }
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut command = Command::new(python);
    command
        .arg(root().join("host/benches/peer/dbos_peer.py"))
        .arg(dir.path())
        .arg(waiting);
    if let Some(url) = database_url {
        command.arg(url);
    }
    let output = command
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
