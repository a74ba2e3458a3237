//! `make bench` (fifth part): the activity-sequence workload through the
//! Durable Task Python SDK over gRPC: an orchestration written with the SDK
//! (its code and its activities in a Python worker), and a wasm
//! orchestration started by the same SDK client, on agenthost with SQLite
//! and with PostgreSQL (`AGENTHOST_BENCH_POSTGRES`), beside the same SDK
//! worker against the SDK's in-memory backend (the local emulator's
//! stand-in: everything in memory, nothing durable), in the same run.
//!
//! Appends to `target/bench/report.md`. Nothing here asserts a speed. The
//! SDK runs from `target/durabletask-venv` (`make durabletask-venv`).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{root, BenchHost};
use serde_json::Value;

/// Steps of each sequence, sequences at once, and sequences run alone.
const STEPS: usize = 10;
const CONCURRENT: usize = 20;
const ALONE: usize = 20;

fn python() -> PathBuf {
    root().join("target/durabletask-venv/bin/python")
}

fn script() -> PathBuf {
    root().join("host/benches/peer/durabletask_bench.py")
}

/// A Python process of the bench script, killed on drop; returns once it
/// printed `ready`.
struct Script(Child);

impl Script {
    fn start(args: &[&str], ready: &str) -> anyhow::Result<Self> {
        let mut child = Command::new(python())
            .arg(script())
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut lines = BufReader::new(stdout).lines();
        loop {
            let line = lines
                .next()
                .ok_or_else(|| anyhow::anyhow!("{args:?} exited before it was ready"))??;
            if line.contains(ready) {
                break;
            }
        }
        std::thread::spawn(move || for _ in lines {});
        Ok(Self(child))
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One `drive` of the bench script: its JSON line.
fn drive(address: &str, orchestration: &str) -> anyhow::Result<Value> {
    let output = Command::new(python())
        .arg(script())
        .args([
            "drive",
            address,
            orchestration,
            &STEPS.to_string(),
            &CONCURRENT.to_string(),
            &ALONE.to_string(),
        ])
        .stderr(Stdio::inherit())
        .output()?;
    anyhow::ensure!(output.status.success(), "drive {orchestration} failed");
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .last()
        .ok_or_else(|| anyhow::anyhow!("drive printed nothing"))?;
    Ok(serde_json::from_str(line)?)
}

/// The SDK orchestration and the wasm one on an agenthost started with
/// `store_args`.
fn on_agenthost(dir: &Path, store_args: &[&str]) -> anyhow::Result<(Value, Value)> {
    let mut args = vec!["--grpc", "--grpc-port", "0"];
    args.extend_from_slice(store_args);
    let host = BenchHost::launch(dir, &["orchestration-tests"], "serve", &args)?;
    let address = host
        .grpc
        .clone()
        .ok_or_else(|| anyhow::anyhow!("the host printed no gRPC address"))?;
    let _worker = Script::start(&["worker", &address], "worker started")?;
    let sdk = drive(&address, "sdk_steps")?;
    let wasm = drive(&address, "sequence")?;
    Ok((sdk, wasm))
}

fn on_emulator() -> anyhow::Result<Value> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port()
        .to_string();
    let _emulator = Script::start(&["emulator", &port], "emulator started")?;
    let address = format!("127.0.0.1:{port}");
    let _worker = Script::start(&["worker", &address], "worker started")?;
    drive(&address, "sdk_steps")
}

fn main() -> anyhow::Result<()> {
    anyhow::ensure!(
        python().exists(),
        "{} is missing: run `make durabletask-venv`",
        python().display()
    );
    let sqlite_dir = tempfile::tempdir()?;
    let store = format!("sqlite://{}", sqlite_dir.path().join("bench.db").display());
    let sqlite = on_agenthost(sqlite_dir.path(), &["--store", &store]);
    let postgres = match std::env::var("AGENTHOST_BENCH_POSTGRES") {
        Ok(url) if !url.is_empty() => {
            let dir = tempfile::tempdir()?;
            let hub = format!("sdkbench{}", std::process::id());
            Some(on_agenthost(
                dir.path(),
                &["--store", &url, "--taskhub", &hub],
            ))
        }
        _ => None,
    };
    let emulator = on_emulator();
    common::report(&report(&sqlite, postgres.as_ref(), &emulator), false)
}

type Pair = anyhow::Result<(Value, Value)>;

fn sdk(pair: Option<&Pair>) -> Option<&Value> {
    pair.and_then(|p| p.as_ref().ok()).map(|(s, _)| s)
}

fn wasm(pair: Option<&Pair>) -> Option<&Value> {
    pair.and_then(|p| p.as_ref().ok()).map(|(_, w)| w)
}

fn report(sqlite: &Pair, postgres: Option<&Pair>, emulator: &anyhow::Result<Value>) -> String {
    let cell = |v: Option<&Value>, key: &str, unit: &str| {
        v.and_then(|v| v[key].as_f64())
            .map_or("–".to_string(), |x| format!("{x:.1} {unit}"))
    };
    let emu = emulator.as_ref().ok();
    let mut out = format!(
        "\n## The Durable Task Python SDK over gRPC: {STEPS}-step activity sequences\n\n\
         {CONCURRENT} sequences at once (steps/s) and {ALONE} one after the other \
         (median, created → completed as the backend reports it), started by the SDK's \
         client. \"SDK\": the orchestration and its activities run in a Python SDK \
         worker; \"wasm\": the orchestration-tests component's `sequence`, started by the \
         same client. The emulator column is the SDK's own in-memory backend \
         (`durabletask.testing`), nothing durable.\n\n\
         | workload | agenthost, SQLite | agenthost, PostgreSQL | in-memory backend |\n\
         |---|---|---|---|\n"
    );
    let pg = postgres;
    out += &format!(
        "| SDK sequence, {CONCURRENT} at once | {} | {} | {} |\n",
        cell(sdk(Some(sqlite)), "steps_per_s", "steps/s"),
        cell(sdk(pg), "steps_per_s", "steps/s"),
        cell(emu, "steps_per_s", "steps/s"),
    );
    out += &format!(
        "| SDK sequence, alone | {} | {} | {} |\n",
        cell(sdk(Some(sqlite)), "alone_median_ms", "ms"),
        cell(sdk(pg), "alone_median_ms", "ms"),
        cell(emu, "alone_median_ms", "ms"),
    );
    out += &format!(
        "| wasm sequence, {CONCURRENT} at once | {} | {} | – |\n",
        cell(wasm(Some(sqlite)), "steps_per_s", "steps/s"),
        cell(wasm(pg), "steps_per_s", "steps/s"),
    );
    out += &format!(
        "| wasm sequence, alone | {} | {} | – |\n",
        cell(wasm(Some(sqlite)), "alone_median_ms", "ms"),
        cell(wasm(pg), "alone_median_ms", "ms"),
    );
    for (what, result) in [
        ("SQLite", sqlite.as_ref().err()),
        ("PostgreSQL", postgres.and_then(|p| p.as_ref().err())),
        ("the in-memory backend", emulator.as_ref().err()),
    ] {
        if let Some(e) = result {
            out += &format!("\n{what}: not measured: {e}\n");
        }
    }
    if postgres.is_none() {
        out += "\nPostgreSQL: not measured (AGENTHOST_BENCH_POSTGRES unset).\n";
    }
    out
}
