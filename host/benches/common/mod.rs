//! Shared by the benchmarks: the real host binary on a free port,
//! percentiles, and the durable workloads (`workloads`).

#![allow(dead_code)]

pub mod workloads;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The workspace root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A built component: `target/components/NAME.wasm` or
/// `target/test-components/NAME.wasm`; `python/NAME` and `js/NAME` in
/// `target/components-python` and `target/components-js`.
pub fn component(name: &str) -> anyhow::Result<PathBuf> {
    if let Some((lang, name)) = name.split_once('/') {
        let path = root()
            .join(format!("target/components-{lang}"))
            .join(format!("{name}.wasm"));
        anyhow::ensure!(
            path.exists(),
            "{} is missing: run `make language-components` first",
            path.display()
        );
        return Ok(path);
    }
    for dir in ["target/components", "target/test-components"] {
        let path = root().join(dir).join(format!("{name}.wasm"));
        if path.exists() {
            return Ok(path);
        }
    }
    anyhow::bail!("{name}.wasm is missing: run `make components test-components` first")
}

/// The release host, serving `components` from a fresh store in `dir`, with
/// the offline model. Killed on drop.
pub struct BenchHost {
    child: Child,
    pub base: String,
    /// `host:port` of the gRPC endpoint, when served (`--grpc`).
    pub grpc: Option<String>,
}

impl BenchHost {
    /// `agenthost serve` on a fresh SQLite store in `dir`.
    pub fn start(dir: &Path, components: &[&str]) -> anyhow::Result<Self> {
        let store = format!("sqlite://{}", dir.join("bench.db").display());
        Self::launch(dir, components, "serve", &["--store", &store])
    }

    /// `agenthost MODE` (`serve` or `worker`) with `args`, serving
    /// `components` from `dir`; returns once it listens (serve) or says what
    /// it serves (worker, whose `base` is empty).
    pub fn launch(
        dir: &Path,
        components: &[&str],
        mode: &str,
        args: &[&str],
    ) -> anyhow::Result<Self> {
        Self::launch_with_env(dir, components, mode, args, &[])
    }

    /// [`Self::launch`] with environment variables (a model endpoint, Redis).
    pub fn launch_with_env(
        dir: &Path,
        components: &[&str],
        mode: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let component_dir = dir.join("components");
        std::fs::create_dir_all(&component_dir)?;
        for name in components {
            let file = name.rsplit('/').next().unwrap_or(name);
            let target = component_dir.join(format!("{file}.wasm"));
            if !target.exists() {
                std::fs::copy(component(name)?, target)?;
            }
        }
        // `AGENTHOST_BENCH_BINARY`: another build of the host (an earlier
        // commit's) measured by the same harness, for an A/B.
        let binary = std::env::var_os("AGENTHOST_BENCH_BINARY").map_or_else(
            || env!("CARGO_BIN_EXE_agenthost").into(),
            std::path::PathBuf::from,
        );
        let mut command = Command::new(binary);
        command.arg(mode);
        if mode == "serve" {
            command.args(["--port", "0"]);
        }
        command
            .arg("--components")
            .arg(&component_dir)
            .args(args)
            .arg("--cache-dir")
            .arg(dir.join("cache"))
            .env("AGENTHOST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        for key in [
            "OPENAI_BASE_URL",
            "OPENAI_API_KEY",
            "AZURE_OPENAI_ENDPOINT",
            "REDIS_CONNECTION_STRING",
        ] {
            command.env_remove(key);
        }
        command.envs(env.iter().copied());
        let mut child = command.spawn()?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
        let mut lines = BufReader::new(stdout).lines();
        let mut grpc = None;
        let base = loop {
            let line = lines
                .next()
                .ok_or_else(|| anyhow::anyhow!("host exited before it was ready"))??;
            if let Some(url) = line.strip_prefix("agenthost gRPC listening on http://") {
                grpc = Some(url.to_string());
            }
            if let Some(url) = line.strip_prefix("agenthost listening on ") {
                break url.to_string();
            }
            if line.starts_with("agenthost worker serving") {
                break String::new();
            }
        };
        // Keep draining stdout so the host never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Ok(Self { child, base, grpc })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, now.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// CPU time the host process has used so far (user and system), in ms.
    pub fn cpu_ms(&self) -> anyhow::Result<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id()))?;
        // The fields after the command name, which may hold spaces: state
        // first, utime and stime the 12th and 13th.
        let after_name = stat
            .rsplit_once(')')
            .map(|(_, rest)| rest)
            .ok_or_else(|| anyhow::anyhow!("no command name in /proc/PID/stat"))?;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks = |i: usize| -> anyhow::Result<f64> {
            Ok(fields
                .get(i)
                .ok_or_else(|| anyhow::anyhow!("short /proc/PID/stat"))?
                .parse()?)
        };
        Ok((ticks(11)? + ticks(12)?) * 1000.0 / CLOCK_TICKS)
    }

    /// Resident memory of the host process, in MiB.
    pub fn rss_mib(&self) -> anyhow::Result<f64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))?;
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("no VmRSS"))?;
        Ok(kib / 1024.0)
    }
}

impl Drop for BenchHost {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Clock ticks per second of `/proc`'s CPU times: Linux's `USER_HZ`, fixed
/// at 100 for user space whatever the kernel's own tick.
pub const CLOCK_TICKS: f64 = 100.0;

pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let rank = ((p / 100.0) * (samples.len() as f64 - 1.0)).round() as usize;
    samples[rank.min(samples.len() - 1)]
}

pub fn fmt(d: Duration) -> String {
    if d >= Duration::from_millis(100) {
        format!("{:.0} ms", d.as_secs_f64() * 1e3)
    } else if d >= Duration::from_millis(10) {
        // A target such as "≤ 10 ms" is read off this: 10.4 is not 10.
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else if d >= Duration::from_millis(1) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.0} µs", d.as_secs_f64() * 1e6)
    }
}

/// Appends `section` to `target/bench/report.md` (created by the first bench) and prints it.
pub fn report(section: &str, fresh: bool) -> anyhow::Result<()> {
    let out = root().join("target/bench");
    std::fs::create_dir_all(&out)?;
    let path = out.join("report.md");
    let mut text = if fresh {
        String::new()
    } else {
        std::fs::read_to_string(&path).unwrap_or_default()
    };
    text.push_str(section);
    std::fs::write(&path, text)?;
    println!("{section}\n(written to {})", path.display());
    Ok(())
}
