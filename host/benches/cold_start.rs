//! `make bench` (cold start): how long a host takes from `exec` to its first
//! answered agent run, and to its first completed orchestration (started
//! as soon as the host takes it, then polled), on SQLite and on PostgreSQL,
//! serving 6 and 50 components, with the compiled-component cache warm (a
//! host ran before on the same cache folder) and cold (an empty folder:
//! every component compiles). The components are copies of the `numbered`
//! test guest, each with its own names and bytes (see its lib.rs). The
//! store is one a host has already migrated, as a restarted instance's.
//!
//! Then Python and JavaScript (the `weather` samples): a fresh host on an
//! empty cache, with and without the compiled code `agenthost compile`
//! puts beside the components (`.compiled/`), and a component dropped into
//! a running host (compiled beside it, and not).
//!
//! Beside them, `wasmtime serve` (the CLI of the wasmtime this host embeds,
//! `make wasmtime-cli`) on a wasi:http hello component: exec to its first
//! answer, its own cache on and warm. Samples are medians of
//! [`SAMPLES`] launches. Appends to `target/bench/report.md`; asserts
//! nothing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SAMPLES: usize = 5;
/// The mark `numbered` is named by, rewritten in each copy.
const MARK: &[u8] = b"numbered-agent-0000";
/// Longest a launch may take to answer before the bench gives up on it.
const GIVE_UP: Duration = Duration::from_secs(180);

fn main() -> anyhow::Result<()> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let scratch = tempfile::tempdir()?;
    let binary = host_binary();
    let mut stores = vec![("SQLite", None)];
    match std::env::var("AGENTHOST_BENCH_POSTGRES")
        .ok()
        .filter(|u| !u.is_empty())
    {
        Some(url) => stores.push(("PostgreSQL", Some(url))),
        None => eprintln!("cold start on PostgreSQL not run: set AGENTHOST_BENCH_POSTGRES"),
    }
    let mut out = String::from(
        "\n## Cold start\n\nFrom `exec` of the host to its first answered agent run (`POST /api/agents/NAME/run`, the \
         offline model), and to its first completed orchestration (one agent call), on a store a host already migrated. \
         Components: copies of the `numbered` test guest, each its own names and bytes. Cache: the compiled-component \
         folder warm (a host ran on it before) or empty (every component compiles). Medians of 5 launches.\n\n\
         | store | components | cache | exec → first answer | exec → first orchestration done |\n|---|---|---|---|---|\n",
    );
    for (store_name, postgres) in &stores {
        for count in [6, 50] {
            let dir = scratch.path().join(format!("{store_name}-{count}"));
            let components = dir.join("components");
            numbered_copies(&components, count)?;
            let store = match postgres {
                Some(url) => url.clone(),
                None => format!("sqlite://{}", dir.join("store.db").display()),
            };
            let warm_cache = dir.join("cache");
            // One launch migrates the store and fills the warm cache.
            tokio.block_on(launch_until_answer(
                &binary,
                &components,
                &store,
                &warm_cache,
                "numbered-agent-0000",
            ))?;
            for warm in [true, false] {
                let mut answers = Vec::new();
                let mut flows = Vec::new();
                // Each cold launch on a folder of its own, empty.
                let cache = |launch: &str| match warm {
                    true => warm_cache.clone(),
                    false => dir.join(format!("cold-cache-{launch}")),
                };
                for sample in 0..SAMPLES {
                    let cache_for_answer = cache(&format!("answer-{sample}"));
                    answers.push(tokio.block_on(launch_until_answer(
                        &binary,
                        &components,
                        &store,
                        &cache_for_answer,
                        "numbered-agent-0000",
                    ))?);
                    flows.push(tokio.block_on(launch_until_orchestration(
                        &binary,
                        &components,
                        &store,
                        &cache(&format!("flow-{sample}")),
                        sample,
                    ))?);
                }
                out += &format!(
                    "| {store_name} | {count} | {} | {} | {} |\n",
                    if warm { "warm" } else { "empty" },
                    common::fmt(median(&mut answers)),
                    common::fmt(median(&mut flows)),
                );
            }
        }
    }
    out += &tokio.block_on(languages(&binary, scratch.path()))?;
    out += &tokio.block_on(wasmtime_serve(scratch.path()))?;
    common::report(&out, false)
}

/// The release host, or `AGENTHOST_BENCH_BINARY`'s (an A/B).
fn host_binary() -> PathBuf {
    std::env::var_os("AGENTHOST_BENCH_BINARY")
        .map_or_else(|| env!("CARGO_BIN_EXE_agenthost").into(), PathBuf::from)
}

fn median(samples: &mut [Duration]) -> Duration {
    common::percentile(samples, 50.0)
}

/// `count` copies of `numbered` in `dir`: `numbered-agent-0000` … each
/// with its mark's digits rewritten (every place the mark is in the bytes).
fn numbered_copies(dir: &Path, count: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    let bytes = std::fs::read(common::component("numbered")?)?;
    for i in 0..count {
        let mark = format!("numbered-agent-{i:04}");
        let mut copy = bytes.clone();
        let mut found = 0;
        let mut at = 0;
        while let Some(offset) = copy[at..].windows(MARK.len()).position(|w| w == MARK) {
            let start = at + offset;
            copy[start..start + MARK.len()].copy_from_slice(mark.as_bytes());
            at = start + MARK.len();
            found += 1;
        }
        anyhow::ensure!(found > 0, "the mark is not in numbered.wasm");
        std::fs::write(dir.join(format!("{mark}.wasm")), copy)?;
    }
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A host process, stopped with SIGTERM (and waited for) on drop, so the
/// next launch finds no lease of its to wait out.
struct Launched(Child);

impl Drop for Launched {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.0.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if matches!(self.0.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_host(
    binary: &Path,
    components: &Path,
    store: &str,
    cache: &Path,
    port: u16,
) -> anyhow::Result<Launched> {
    spawn_host_with(binary, components, store, cache, port, true)
}

/// [`spawn_host`], with `--load-precompiled` or without (a plain `serve`).
fn spawn_host_with(
    binary: &Path,
    components: &Path,
    store: &str,
    cache: &Path,
    port: u16,
    precompiled: bool,
) -> anyhow::Result<Launched> {
    let mut command = Command::new(binary);
    command
        .args(["serve", "--port", &port.to_string(), "--store", store])
        .arg("--components")
        .arg(components)
        .arg("--cache-dir")
        .arg(cache)
        .args(precompiled.then_some("--load-precompiled"))
        .env("AGENTHOST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for key in ["OPENAI_BASE_URL", "OPENAI_API_KEY", "AZURE_OPENAI_ENDPOINT"] {
        command.env_remove(key);
    }
    Ok(Launched(command.spawn()?))
}

/// Posts to `url` until it answers `want` (connection refused and 404
/// while the host starts and loads); the answer's body.
async fn until_status(
    client: &reqwest::Client,
    url: &str,
    body: &str,
    want: u16,
    since: Instant,
    host: &mut Launched,
) -> anyhow::Result<String> {
    loop {
        if let Some(status) = host.0.try_wait()? {
            anyhow::bail!("the host exited ({status}) before {url} answered {want}");
        }
        let sent = client
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await;
        if let Ok(response) = sent {
            if response.status().as_u16() == want {
                return Ok(response.text().await?);
            }
        }
        anyhow::ensure!(since.elapsed() < GIVE_UP, "{url} did not answer {want}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// GETs `url` until it answers 2xx, while the process serving it runs.
async fn until_get_ok(
    client: &reqwest::Client,
    url: &str,
    since: Instant,
    process: &mut Launched,
) -> anyhow::Result<()> {
    loop {
        if let Some(status) = process.0.try_wait()? {
            anyhow::bail!("the process exited ({status}) before {url} answered");
        }
        if client
            .get(url)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            return Ok(());
        }
        anyhow::ensure!(since.elapsed() < GIVE_UP, "{url} never answered");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap_or_default()
}

/// Exec → the first 200 of `agent`'s run route.
async fn launch_until_answer(
    binary: &Path,
    components: &Path,
    store: &str,
    cache: &Path,
    agent: &str,
) -> anyhow::Result<Duration> {
    let port = free_port()?;
    let started = Instant::now();
    let mut host = spawn_host(binary, components, store, cache, port)?;
    let url = format!("http://127.0.0.1:{port}/api/agents/{agent}/run");
    until_status(
        &client(),
        &url,
        r#"{"message":"hello"}"#,
        200,
        started,
        &mut host,
    )
    .await?;
    Ok(started.elapsed())
}

/// Exec → the first orchestration started at once reads Completed.
async fn launch_until_orchestration(
    binary: &Path,
    components: &Path,
    store: &str,
    cache: &Path,
    sample: usize,
) -> anyhow::Result<Duration> {
    let port = free_port()?;
    let started = Instant::now();
    let mut host = spawn_host(binary, components, store, cache, port)?;
    let client = client();
    let id = format!("cold-{}-{sample}", uuid::Uuid::new_v4().simple());
    let base = format!("http://127.0.0.1:{port}");
    until_status(
        &client,
        &format!("{base}/api/orchestrators/numbered-agent-0000-flow/{id}"),
        "{}",
        202,
        started,
        &mut host,
    )
    .await?;
    let status = format!("{base}/runtime/webhooks/durabletask/instances/{id}");
    loop {
        let read = match client.get(&status).send().await {
            Ok(answer) => answer.json::<serde_json::Value>().await.unwrap_or_default(),
            Err(_) => serde_json::Value::Null,
        };
        match read["runtimeStatus"].as_str() {
            Some("Completed") => return Ok(started.elapsed()),
            Some("Failed" | "Terminated") => anyhow::bail!("{read}"),
            _ => {}
        }
        anyhow::ensure!(started.elapsed() < GIVE_UP, "{id} did not complete");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Python's and JavaScript's `weather`: a fresh host (empty cache) with and
/// without the compiled code beside it, and a drop into a running host.
async fn languages(binary: &Path, scratch: &Path) -> anyhow::Result<String> {
    let mut out = String::from(
        "\n### Cold start in Python and JavaScript\n\n`weather` (componentize-py, componentize-js). A fresh host: an \
         empty cache folder, a migrated SQLite store, exec → first answer. A drop: the file renamed into a running \
         host's components folder → its first answer. \"beside\": `agenthost compile` (as `agenthost build --into` \
         does) put its compiled code in the folder's `.compiled/`; \"none\": the host compiles it; \"the user's cache\": a plain `serve` (no flag) on the cache folder `compile` wrote, \
         as `build --into` and `serve` of one user share it. Medians of 5 \
         (\"none\": 1 launch each).\n\n| language | compiled code | fresh host → first answer | dropped → first answer |\n|---|---|---|---|\n",
    );
    for lang in ["python", "js"] {
        let source = common::component(&format!("{lang}/weather"))?;
        let with = scratch.join(format!("{lang}-beside"));
        let without = scratch.join(format!("{lang}-none"));
        for dir in [&with, &without] {
            std::fs::create_dir_all(dir.join("components"))?;
            std::fs::copy(&source, dir.join("components/weather.wasm"))?;
        }
        let compiled = Command::new(binary)
            .arg("compile")
            .arg(with.join("components"))
            .env("AGENTHOST_CACHE_DIR", scratch.join("command-cache"))
            .output()?;
        anyhow::ensure!(
            compiled.status.success(),
            "agenthost compile: {}",
            String::from_utf8_lossy(&compiled.stderr)
        );
        for (dir, label, samples) in [(&with, "beside", SAMPLES), (&without, "none", 1)] {
            let store = format!("sqlite://{}", dir.join("store.db").display());
            let mut fresh = Vec::new();
            let mut dropped = Vec::new();
            for sample in 0..samples {
                fresh.push(
                    launch_until_answer(
                        binary,
                        &dir.join("components"),
                        &store,
                        &dir.join(format!("cache-{sample}")),
                        "weather",
                    )
                    .await?,
                );
                dropped.push(drop_into_running(binary, dir, sample, None).await?);
            }
            out += &format!(
                "| {lang} | {label} | {} | {} |\n",
                common::fmt(median(&mut fresh)),
                common::fmt(median(&mut dropped)),
            );
        }
        // The dev loop with no flag: `compile` (as `build --into`) wrote the
        // user's cache, and a plain `serve` of that user loads from it.
        let mut dropped = Vec::new();
        for sample in 0..SAMPLES {
            dropped.push(
                drop_into_running(
                    binary,
                    &without,
                    sample,
                    Some(&scratch.join("command-cache")),
                )
                .await?,
            );
        }
        out += &format!(
            "| {lang} | the user's cache, plain `serve` | – | {} |\n",
            common::fmt(median(&mut dropped)),
        );
    }
    Ok(out)
}

/// A host serving an empty folder (its own empty cache); the component and
/// what is beside it (`.compiled/`, when there) moved in, the file last;
/// the time from that rename to the first answer.
///
/// With `user_cache`, the host is a plain `serve` (no `--load-precompiled`)
/// on that cache folder, the one `agenthost build`/`compile` of the same
/// user compiled into: the dev loop, which loads from the cache.
async fn drop_into_running(
    binary: &Path,
    from: &Path,
    sample: usize,
    user_cache: Option<&Path>,
) -> anyhow::Result<Duration> {
    let dir = from.join(format!(
        "drop-{}{sample}",
        if user_cache.is_some() { "plain-" } else { "" }
    ));
    let components = dir.join("components");
    std::fs::create_dir_all(&components)?;
    let store = format!("sqlite://{}", dir.join("store.db").display());
    let port = free_port()?;
    let started = Instant::now();
    let own_cache = dir.join("cache");
    let mut host = spawn_host_with(
        binary,
        &components,
        &store,
        user_cache.unwrap_or(&own_cache),
        port,
        user_cache.is_none(),
    )?;
    let client = client();
    let health = format!("http://127.0.0.1:{port}/api/health/ready");
    until_get_ok(&client, &health, started, &mut host).await?;
    let shelf = from.join("components").join(".compiled");
    let beside = user_cache.is_none() && shelf.exists();
    if beside {
        copy_folder(&shelf, &components.join(".compiled"))?;
    }
    let staged = dir.join("weather.wasm");
    std::fs::copy(from.join("components/weather.wasm"), &staged)?;
    let dropped = Instant::now();
    std::fs::rename(&staged, components.join("weather.wasm"))?;
    let url = format!("http://127.0.0.1:{port}/api/agents/weather/run");
    until_status(
        &client,
        &url,
        r#"{"message":"hello"}"#,
        200,
        dropped,
        &mut host,
    )
    .await?;
    let served = dropped.elapsed();
    // A row that says "beside" measured a load of what is beside, not a
    // compile.
    let listed: serde_json::Value = client
        .get(format!("http://127.0.0.1:{port}/api/components"))
        .send()
        .await?
        .json()
        .await?;
    let artifact = listed["components"][0]["artifact"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let expected = match (user_cache, beside) {
        (Some(_), _) => "cache",
        (None, true) => "precompiled",
        (None, false) => "compiled",
    };
    anyhow::ensure!(
        artifact == expected,
        "loaded from {artifact}, not {expected}: {listed}"
    );
    Ok(served)
}

fn copy_folder(from: &Path, to: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_folder(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// `wasmtime serve` on the hello component, its cache on and warmed by one
/// launch: exec → first answer.
async fn wasmtime_serve(scratch: &Path) -> anyhow::Result<String> {
    let wasmtime = common::root().join("target/wasmtime-cli/bin/wasmtime");
    let hello = common::component("hello-http");
    let (Ok(hello), true) = (hello, wasmtime.exists()) else {
        return Ok(
            "\n`wasmtime serve` not measured: run `make wasmtime-cli test-components` first.\n"
                .into(),
        );
    };
    let config = scratch.join("wasmtime-cache.toml");
    std::fs::write(
        &config,
        format!(
            "[cache]\ndirectory = \"{}\"\n",
            scratch.join("wasmtime-cache").display()
        ),
    )?;
    let version = Command::new(&wasmtime).arg("--version").output()?;
    let mut samples = Vec::new();
    for sample in 0..=SAMPLES {
        let port = free_port()?;
        let started = Instant::now();
        let child = Command::new(&wasmtime)
            .arg("serve")
            .arg("--addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("-C")
            .arg(format!("cache=y,cache-config={}", config.display()))
            .arg(&hello)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let mut serving = Launched(child);
        let url = format!("http://127.0.0.1:{port}/");
        until_get_ok(&client(), &url, started, &mut serving).await?;
        // The first launch fills wasmtime's cache.
        if sample > 0 {
            samples.push(started.elapsed());
        }
    }
    Ok(format!(
        "\n`{}` serve on a wasi:http hello component (its cache warm): exec → first answer **{}** (median of {SAMPLES}).\n",
        String::from_utf8_lossy(&version.stdout).trim(),
        common::fmt(median(&mut samples))
    ))
}
