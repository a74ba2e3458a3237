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

use std::path::Path;
use std::time::Duration;

use common::workloads::{self, peer_waiting, Measured, Setup, ALONE, FANOUTS, ROUNDS};
use common::{fmt, BenchHost};
use serde_json::Value;

const WAITING: [usize; 2] = [10_000, 100_000];

fn main() -> anyhow::Result<()> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    // Each setup is one `serve` on a fresh SQLite store in its directory.
    let launch =
        |dir: &Path, _: &str| BenchHost::start(dir, &["orchestration-tests"]).map(Setup::single);
    let ours = tokio.block_on(workloads::run(&launch, &WAITING))?;
    let peer = workloads::run_peer(&peer_waiting(), None);
    let section = report(&ours, &peer);
    common::report(&section, false)
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
