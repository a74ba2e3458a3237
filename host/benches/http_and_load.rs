//! `make bench`: measures, on this machine, and writes `target/bench/report.md`:
//! - component load time, cold (Cranelift compile) and warm (artifact cache);
//! - one tool call into a fresh instance (instantiate + call);
//! - `/api/agents/writer/run` with the offline model through the real binary:
//!   sequential latency, and requests/s with p50/p99 under concurrency;
//! - hot reload: from writing a component file into the watched directory to
//!   the first request it serves, with a cold compile and from the cache;
//! - per guest language (Rust, Python, JavaScript): the `weather` twin's
//!   size, load (cold and warm) and tool call into a fresh instance, and one
//!   durable step (a `sequence` of 1 and of 10 activities through the binary).
//!
//! Medians and percentiles over many samples; nothing here asserts a speed.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agenthost::wasm::{Limits, Runtime, RuntimeConfig};
use common::{fmt, percentile, BenchHost};

const COLD_ITERATIONS: usize = 5;
const WARM_ITERATIONS: usize = 20;
const TOOL_CALLS: usize = 500;
const SEQUENTIAL_REQUESTS: usize = 300;
const CONCURRENT_CLIENTS: usize = 16;
const REQUESTS_PER_CLIENT: usize = 150;
const RELOADS: usize = 8;

fn main() -> anyhow::Result<()> {
    let components = common::root().join("target/components");
    for name in ["writer", "weather"] {
        anyhow::ensure!(
            components.join(format!("{name}.wasm")).exists(),
            "run `make components` first"
        );
    }
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut report = String::from("# agenthost benchmark report\n\n");
    report += &format!(
        "Machine: {} cores. Built with the `bench` (release) profile.\n\n",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    report += &tokio.block_on(component_loading(&components))?;
    report += &tokio.block_on(http_runs())?;
    report += &tokio.block_on(hot_reload())?;
    report += &tokio.block_on(guest_languages())?;
    common::report(&report, true)
}

fn runtime(cache: &Path) -> anyhow::Result<Runtime> {
    Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.to_path_buf()),
        load_precompiled: false,
        limits: Limits::default(),
        max_instances: 64,
        describe_timeout: std::time::Duration::from_secs(30),
        episode_cpu_time: std::time::Duration::from_secs(1),
        network: Default::default(),
        guest_runners: None,
    })
    .map_err(|e| anyhow::anyhow!("{e}"))
}

async fn component_loading(components: &Path) -> anyhow::Result<String> {
    let mut out = String::from("## Component load\n\n| component | size | cold (compile) median | warm (cache) median |\n|---|---|---|---|\n");
    for name in ["writer", "weather"] {
        let file = components.join(format!("{name}.wasm"));
        let size = std::fs::metadata(&file)?.len();
        let mut cold = Vec::new();
        for _ in 0..COLD_ITERATIONS {
            let cache = tempfile::tempdir()?;
            let rt = runtime(cache.path())?;
            let start = Instant::now();
            rt.load(&file).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            cold.push(start.elapsed());
        }
        let cache = tempfile::tempdir()?;
        runtime(cache.path())?
            .load(&file)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut warm = Vec::new();
        for _ in 0..WARM_ITERATIONS {
            let rt = runtime(cache.path())?;
            let start = Instant::now();
            let loaded = rt.load(&file).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            warm.push(start.elapsed());
            anyhow::ensure!(loaded.from_cache(), "warm load did not use the cache");
        }
        out += &format!(
            "| {name} | {} KiB | {} | {} |\n",
            size / 1024,
            fmt(percentile(&mut cold, 50.0)),
            fmt(percentile(&mut warm, 50.0))
        );
    }

    let cache = tempfile::tempdir()?;
    let rt = runtime(cache.path())?;
    let weather = rt
        .load(&components.join("weather.wasm"))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut calls = Vec::with_capacity(TOOL_CALLS);
    for _ in 0..TOOL_CALLS {
        let start = Instant::now();
        let result = rt
            .invoke_activity(&weather, "get_weather", r#"{"city":"Paris"}"#, None)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        calls.push(start.elapsed());
        anyhow::ensure!(result.is_ok(), "tool call failed: {result:?}");
    }
    out += &format!(
        "\nInstantiation cost per request: every tool call (and every orchestration episode) gets a fresh \
         instance. A tool call into a fresh instance (`weather.get_weather`: instantiate + call + drop), \
         {TOOL_CALLS} calls: p50 {}, p99 {}.\n\n",
        fmt(percentile(&mut calls, 50.0)),
        fmt(percentile(&mut calls, 99.0))
    );
    Ok(out)
}

async fn http_runs() -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let host = BenchHost::start(dir.path(), &["writer", "weather"])?;
    measure_http(&host.base).await
}

async fn measure_http(base: &str) -> anyhow::Result<String> {
    let url = Arc::new(format!("{base}/api/agents/writer/run"));
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .build()?;
    let run = |http: reqwest::Client, url: Arc<String>| async move {
        let start = Instant::now();
        let response = http
            .post(url.as_str())
            .body("Write a haiku about tea")
            .send()
            .await?;
        anyhow::ensure!(response.status() == 200, "status {}", response.status());
        response.bytes().await?;
        Ok::<_, anyhow::Error>(start.elapsed())
    };
    for _ in 0..50 {
        run(http.clone(), url.clone()).await?;
    }
    let mut sequential = Vec::with_capacity(SEQUENTIAL_REQUESTS);
    for _ in 0..SEQUENTIAL_REQUESTS {
        sequential.push(run(http.clone(), url.clone()).await?);
    }

    let start = Instant::now();
    let clients: Vec<_> = (0..CONCURRENT_CLIENTS)
        .map(|_| {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(REQUESTS_PER_CLIENT);
                for _ in 0..REQUESTS_PER_CLIENT {
                    latencies.push(run(http.clone(), url.clone()).await?);
                }
                Ok::<_, anyhow::Error>(latencies)
            })
        })
        .collect();
    let mut concurrent = Vec::new();
    for client in clients {
        concurrent.extend(client.await??);
    }
    let elapsed = start.elapsed();
    let total = concurrent.len();
    Ok(format!(
        "## `POST /api/agents/writer/run` (offline model, SQLite store, new thread per request)\n\n\
         | load | requests | requests/s | p50 | p99 |\n|---|---|---|---|---|\n\
         | 1 client, sequential | {SEQUENTIAL_REQUESTS} | {:.0} | {} | {} |\n\
         | {CONCURRENT_CLIENTS} concurrent clients | {total} | {:.0} | {} | {} |\n",
        SEQUENTIAL_REQUESTS as f64 / sequential.iter().sum::<Duration>().as_secs_f64(),
        fmt(percentile(&mut sequential, 50.0)),
        fmt(percentile(&mut sequential, 99.0)),
        total as f64 / elapsed.as_secs_f64(),
        fmt(percentile(&mut concurrent, 50.0)),
        fmt(percentile(&mut concurrent, 99.0)),
    ))
}

/// The same component with a custom section appended: valid, with a new
/// digest, so the host cannot find it in its artifact cache.
fn with_marker(wasm: &[u8], marker: usize) -> Vec<u8> {
    let name = b"agenthost-bench";
    let payload = marker.to_le_bytes();
    let size = 1 + name.len() + payload.len();
    let mut out = wasm.to_vec();
    out.push(0); // custom section id
    out.push(u8::try_from(size).unwrap_or(u8::MAX)); // LEB128 of a small size
    out.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(name);
    out.extend_from_slice(&payload);
    out
}

/// Writes `bytes` over the served `weather.wasm` and times until
/// `/api/components` shows the new digest and a run of the agent answers.
async fn write_until_served(
    http: &reqwest::Client,
    base: &str,
    file: &Path,
    bytes: &[u8],
) -> anyhow::Result<Duration> {
    use sha2::Digest;
    let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)));
    let start = Instant::now();
    std::fs::write(file, bytes)?;
    loop {
        anyhow::ensure!(start.elapsed() < Duration::from_secs(30), "never served");
        let listing: serde_json::Value = http
            .get(format!("{base}/api/components"))
            .send()
            .await?
            .json()
            .await?;
        let served = listing["components"]
            .as_array()
            .is_some_and(|c| c.iter().any(|c| c["digest"] == digest.as_str()));
        if served {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let response = http
        .post(format!("{base}/api/agents/weather/run"))
        .body("Weather in Oslo?")
        .send()
        .await?;
    anyhow::ensure!(response.status() == 200, "status {}", response.status());
    response.bytes().await?;
    Ok(start.elapsed())
}

async fn hot_reload() -> anyhow::Result<String> {
    let dir = tempfile::tempdir()?;
    let host = BenchHost::start(dir.path(), &["weather"])?;
    let file = dir.path().join("components/weather.wasm");
    let original = std::fs::read(&file)?;
    let http = reqwest::Client::new();
    let (mut cold, mut cached) = (Vec::new(), Vec::new());
    for i in 0..RELOADS {
        let fresh = with_marker(&original, i);
        cold.push(write_until_served(&http, &host.base, &file, &fresh).await?);
        // Back to a version compiled before: only the cache lookup remains.
        cached.push(write_until_served(&http, &host.base, &file, &original).await?);
    }
    Ok(format!(
        "\n## Hot reload: file written → first request served (`weather`, {RELOADS} times each)\n\n\
         Includes the watcher's 200 ms debounce, loading, and one agent run.\n\n\
         | version written | median | max |\n|---|---|---|\n\
         | new bytes (cold compile) | {} | {} |\n\
         | bytes compiled before (artifact cache) | {} | {} |\n",
        fmt(percentile(&mut cold, 50.0)),
        fmt(percentile(&mut cold, 100.0)),
        fmt(percentile(&mut cached, 50.0)),
        fmt(percentile(&mut cached, 100.0)),
    ))
}

const LANG_COLD: usize = 3;
const LANG_WARM: usize = 10;
const LANG_CALLS: usize = 200;
const LANG_RUNS: usize = 30;

/// The same work in each guest language: what a language costs the host.
async fn guest_languages() -> anyhow::Result<String> {
    let mut out = String::from(
        "## Guest languages\n\n\
         The `weather` twins (sample-agents/weather, python/weather, js/weather) and one durable \
         step (`sequence`: orchestration-tests in Rust, the `clock` test guests in Python and \
         JavaScript; a step is one activity scheduled, run and its result replayed).\n\n\
         | language | size | load cold (compile) | load warm (cache) | tool call, fresh instance p50 / p99 | `sequence` n=1 p50 | n=10 p50 | per step |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for (lang, weather, steps) in [
        ("Rust", "weather", "orchestration-tests"),
        ("Python", "python/weather", "python/clock"),
        ("JavaScript", "js/weather", "js/clock"),
    ] {
        let file = common::component(weather)?;
        let size = std::fs::metadata(&file)?.len();
        let mut cold = Vec::new();
        for _ in 0..LANG_COLD {
            let cache = tempfile::tempdir()?;
            let rt = runtime(cache.path())?;
            let start = Instant::now();
            rt.load(&file).await.map_err(|e| anyhow::anyhow!("{e}"))?;
            cold.push(start.elapsed());
        }
        let cache = tempfile::tempdir()?;
        let rt = runtime(cache.path())?;
        let loaded = rt.load(&file).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut warm = Vec::new();
        for _ in 0..LANG_WARM {
            let again = runtime(cache.path())?;
            let start = Instant::now();
            again
                .load(&file)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            warm.push(start.elapsed());
        }
        let mut calls = Vec::new();
        for _ in 0..LANG_CALLS {
            let start = Instant::now();
            let result = rt
                .invoke_activity(&loaded, "get_weather", r#"{"city":"Paris"}"#, None)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            calls.push(start.elapsed());
            anyhow::ensure!(result.is_ok(), "{lang}: tool call failed: {result:?}");
        }

        let dir = tempfile::tempdir()?;
        let host = BenchHost::start(dir.path(), &[steps])?;
        let http = reqwest::Client::new();
        let timed = |n: u32| {
            let (http, base) = (http.clone(), host.base.clone());
            async move {
                let mut runs = Vec::new();
                for _ in 0..LANG_RUNS {
                    runs.push(
                        common::workloads::run_to_completion(
                            &http,
                            &base,
                            "sequence",
                            serde_json::json!({ "n": n }),
                        )
                        .await?,
                    );
                }
                anyhow::Ok(percentile(&mut runs, 50.0))
            }
        };
        let one = timed(1).await?;
        let ten = timed(10).await?;
        out += &format!(
            "| {lang} | {} KiB | {} | {} | {} / {} | {} | {} | {} |\n",
            size / 1024,
            fmt(percentile(&mut cold, 50.0)),
            fmt(percentile(&mut warm, 50.0)),
            fmt(percentile(&mut calls, 50.0)),
            fmt(percentile(&mut calls, 99.0)),
            fmt(one),
            fmt(ten),
            fmt(ten.saturating_sub(one) / 9)
        );
    }
    out += "\nMedians; cold loads are 3 into fresh cache directories, warm 10 by new runtimes \
            sharing one, tool calls 200 into fresh instances, `sequence` 30 sequential runs \
            (SQLite store, the release binary).\n\n";
    Ok(out)
}
