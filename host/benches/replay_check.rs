//! `make bench`: what a replay check of a new orchestration version costs
//! (issue 58). 10,000 `versioned` instances wait for `go` on version 1; a
//! compatible build (`versioned-logged`) is dropped into the host's folder
//! under `--on-new-version upgrade-compatible`, and the host replays it
//! against every journal and moves each instance. Reported: the check's
//! whole time, instances per second, and one replay's median and slowest
//! (as the report gives them). Beside it, in the same run and on the same
//! instances, the engine's own speed at the same kind of work: `go` raised
//! at all 10,000 and each instance's last episode (a replay of the same
//! journal plus its end, committed), as instances finished per second.
//!
//! SQLite always; PostgreSQL when `AGENTHOST_BENCH_POSTGRES` is set (`make
//! bench` sets it). `AGENTHOST_BENCH_REPLAY_INSTANCES` sets the 10,000.
//! Appends to `target/bench/report.md`; asserts nothing.

mod common;

use std::time::{Duration, Instant};

use common::BenchHost;
use serde_json::Value;

const AT_ONCE: usize = 16;

fn main() -> anyhow::Result<()> {
    let instances: usize = std::env::var("AGENTHOST_BENCH_REPLAY_INSTANCES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10_000);
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut rows = vec![tokio.block_on(measure(None, instances))?];
    match std::env::var("AGENTHOST_BENCH_POSTGRES")
        .ok()
        .filter(|u| !u.is_empty())
    {
        Some(url) => rows.push(tokio.block_on(measure(Some(&url), instances))?),
        None => rows.push(
            "| PostgreSQL | not run: set AGENTHOST_BENCH_POSTGRES | – | – | – | – | – |\n".into(),
        ),
    }
    let mut out = format!(
        "\n## Replay check of a new version\n\n{instances} `versioned` instances waiting on version 1; a compatible \
         build dropped in under `--on-new-version upgrade-compatible`: the check replays each journal and moves \
         each instance. Beside it, the same instances' last episode (`go` raised at all, {AT_ONCE} callers), \
         finished per second.\n\n\
         | store | instances | check (replay + move) | checked /s | one replay p50 / max | last episodes /s | check ÷ episodes |\n\
         |---|---|---|---|---|---|---|\n"
    );
    rows.iter().for_each(|r| out += r);
    common::report(&out, false)
}

async fn measure(postgres: Option<&str>, instances: usize) -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components)?;
    std::fs::copy(
        common::component("versioned-v1")?,
        components.join("versioned.wasm"),
    )?;
    let hub = format!("benchreplay{}", std::process::id());
    let store = match postgres {
        Some(url) => url.to_string(),
        None => format!("sqlite://{}", dir.path().join("bench.db").display()),
    };
    let host = BenchHost::launch(
        dir.path(),
        &[],
        "serve",
        &[
            "--store",
            &store,
            "--taskhub",
            &hub,
            "--on-new-version",
            "upgrade-compatible",
        ],
    )?;
    let http = reqwest::Client::new();
    let ids: Vec<String> = (0..instances).map(|i| format!("rc-{i:06}")).collect();
    in_parallel(&ids, |id| {
        let (http, url) = (
            http.clone(),
            format!("{}/api/orchestrators/versioned/{id}", host.base),
        );
        async move {
            let answer = http.post(url).json(&Value::Null).send().await?;
            anyhow::ensure!(answer.status() == 202, "start: {}", answer.status());
            Ok(())
        }
    })
    .await?;
    wait_all_waiting(&http, &host.base, &ids).await?;
    let v1 = served_digest(&http, &host.base).await?;

    // The new version: the check and the moves.
    std::fs::copy(
        common::component("versioned-logged")?,
        components.join("versioned.wasm"),
    )?;
    let report = loop {
        let body: Value = http
            .get(format!("{}/api/components/versioned", host.base))
            .send()
            .await?
            .json()
            .await?;
        let check = &body["replay_check"];
        if check["finishedAt"].is_i64() && check["digest"] != v1.as_str() {
            break check.clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let took = Duration::from_millis(
        u64::try_from(
            report["finishedAt"].as_i64().unwrap_or(0) - report["startedAt"].as_i64().unwrap_or(0),
        )
        .unwrap_or(0),
    );
    anyhow::ensure!(
        report["upgraded"] == instances,
        "not every instance moved: {report}"
    );

    // The engine's own pace at the same journals: each instance's last episode.
    let began = Instant::now();
    in_parallel(&ids, |id| {
        let (http, url) = (
            http.clone(),
            format!(
                "{}/runtime/webhooks/durabletask/instances/{id}/raiseEvent/go",
                host.base
            ),
        );
        async move {
            let answer = http.post(url).json(&Value::Null).send().await?;
            anyhow::ensure!(answer.status() == 202, "raise: {}", answer.status());
            Ok(())
        }
    })
    .await?;
    wait_all(&http, &host.base, &ids, |body| {
        body["runtimeStatus"] == "Completed"
    })
    .await?;
    let episodes = began.elapsed();

    let per_second = |n: usize, d: Duration| n as f64 / d.as_secs_f64().max(1e-9);
    let checked = per_second(instances, took);
    let finished = per_second(instances, episodes);
    let store_name = if postgres.is_some() {
        "PostgreSQL"
    } else {
        "SQLite"
    };
    drop(host);
    Ok(format!(
        "| {store_name} | {instances} | {} | {checked:.0} | {:.2} / {:.1} ms | {finished:.0} | {:.2} |\n",
        common::fmt(took),
        report["replayP50Ms"].as_f64().unwrap_or(0.0),
        report["replayMaxMs"].as_f64().unwrap_or(0.0),
        checked / finished.max(1e-9),
    ))
}

/// Runs `call` for each id, `AT_ONCE` at a time.
async fn in_parallel<F, Fut>(ids: &[String], call: F) -> anyhow::Result<()>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    use futures::stream::{self, StreamExt, TryStreamExt};
    stream::iter(ids.iter().cloned().map(&call))
        .buffer_unordered(AT_ONCE)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// Waits until every instance journaled its wait for `go`.
async fn wait_all_waiting(
    http: &reqwest::Client,
    base: &str,
    ids: &[String],
) -> anyhow::Result<()> {
    let waiting = |body: &Value| {
        body["historyEvents"]
            .as_array()
            .is_some_and(|events| events.iter().any(|e| e["call"] == "wait_for_event"))
    };
    let ids: Vec<String> = ids
        .iter()
        .map(|id| format!("{id}?showHistory=true"))
        .collect();
    wait_all(http, base, &ids, waiting).await
}

/// Polls each instance (in turn, `AT_ONCE` at a time) until `done` holds,
/// for up to ten minutes in all.
async fn wait_all(
    http: &reqwest::Client,
    base: &str,
    ids: &[String],
    done: impl Fn(&Value) -> bool + Copy,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(600);
    in_parallel(ids, |id| {
        let (http, url) = (
            http.clone(),
            format!("{base}/runtime/webhooks/durabletask/instances/{id}"),
        );
        async move {
            loop {
                let body: Value = http.get(&url).send().await?.json().await?;
                if done(&body) {
                    return Ok(());
                }
                anyhow::ensure!(Instant::now() < deadline, "{url} never got there: {body}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    })
    .await
}

async fn served_digest(http: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    let body: Value = http
        .get(format!("{base}/api/components/versioned"))
        .send()
        .await?
        .json()
        .await?;
    body["digest"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("versioned is not served: {body}"))
}
