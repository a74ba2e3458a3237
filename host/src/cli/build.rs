//! `agenthost build [DIR] [--into COMPONENTS]`: builds the Rust component
//! project in DIR for `wasm32-wasip2` (the plain target: a component comes
//! out of `cargo build` directly, with no `cargo component` to install),
//! checks that it loads as a host would load it, and says where it went.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::io::AsyncBufReadExt;

use anyhow::{bail, Context};

const TARGET: &str = "wasm32-wasip2";

pub(crate) async fn build(dir: &Path, into: Option<&Path>) -> anyhow::Result<()> {
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        bail!(
            "{} has no Cargo.toml: `agenthost build` builds Rust component projects (`agenthost new` makes one)",
            dir.display()
        );
    }
    let package = package_name(&manifest)?;
    let built = cargo_build(&manifest).await?;
    let (runtime, cache) = crate::server::local_runtime()?;
    let loaded = runtime.load(&built).await;
    let _ = std::fs::remove_dir_all(&cache);
    let component = loaded.with_context(|| {
        format!(
            "{} was built but does not load as a component",
            built.display()
        )
    })?;
    let names = |v: Vec<&str>| {
        if v.is_empty() {
            "none".to_string()
        } else {
            v.join(", ")
        }
    };
    let manifest = &component.manifest;
    let placed = match into {
        Some(components) => {
            std::fs::create_dir_all(components)
                .with_context(|| format!("cannot create {}", components.display()))?;
            let target = components.join(format!("{package}.wasm"));
            // Written beside it, then renamed: a host watching the folder
            // never loads half a file.
            let partial = components.join(format!(".{package}.wasm.partial"));
            std::fs::copy(&built, &partial)
                .with_context(|| format!("cannot write {}", partial.display()))?;
            std::fs::rename(&partial, &target)
                .with_context(|| format!("cannot write {}", target.display()))?;
            target
        }
        None => built,
    };
    println!("built {}", placed.display());
    println!(
        "  agents: {}",
        names(manifest.agents.iter().map(|a| a.name.as_str()).collect())
    );
    println!(
        "  tools: {}",
        names(
            manifest
                .activities
                .iter()
                .map(|a| a.name.as_str())
                .collect()
        )
    );
    println!(
        "  orchestrations: {}",
        names(
            manifest
                .orchestrations
                .iter()
                .map(|o| o.name.as_str())
                .collect()
        )
    );
    Ok(())
}

fn package_name(manifest: &Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(manifest)
        .with_context(|| format!("cannot read {}", manifest.display()))?;
    let parsed: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not TOML", manifest.display()))?;
    parsed
        .get("package")
        .and_then(|p| p.get("name"))
        .and_then(|n| n.as_str())
        .map(str::to_string)
        .with_context(|| {
            format!(
                "{} names no [package] (a workspace?): pass the folder of the component's own crate",
                manifest.display()
            )
        })
}

/// `cargo build --release --target wasm32-wasip2`, its diagnostics on
/// stderr as usual; the `.wasm` it made, read from its artifact messages
/// (wherever `CARGO_TARGET_DIR` puts them). Dropped before it ends (`dev`
/// stopping mid-build), the build is killed: nothing waits for it.
async fn cargo_build(manifest: &Path) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // In a workspace cargo reports other members' artifacts too: only this
    // manifest's counts.
    let ours = std::fs::canonicalize(manifest)
        .with_context(|| format!("cannot read {}", manifest.display()))?;
    let mut child = tokio::process::Command::new(&cargo)
        .args(["build", "--release", "--target", TARGET])
        .arg("--manifest-path")
        .arg(manifest)
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot run {}", cargo.to_string_lossy()))?;
    let mut wasm = None;
    if let Some(stdout) = child.stdout.take() {
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        while let Some(line) = lines
            .next_line()
            .await
            .context("cannot read cargo's output")?
        {
            let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if message["reason"] != "compiler-artifact" {
                continue;
            }
            let from_here = message["manifest_path"]
                .as_str()
                .and_then(|p| std::fs::canonicalize(p).ok())
                .is_some_and(|p| p == ours);
            if !from_here {
                continue;
            }
            let is_cdylib = message["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "cdylib"));
            let file = message["filenames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str())
                .find(|f| f.ends_with(".wasm"));
            if let (true, Some(file)) = (is_cdylib, file) {
                wasm = Some(PathBuf::from(file));
            }
        }
    }
    let status = child.wait().await.context("cargo did not finish")?;
    if !status.success() {
        bail!(
            "cargo build failed ({status}); if it says the {TARGET} target is missing: rustup target add {TARGET}"
        );
    }
    wasm.context("cargo built no .wasm: the package needs `crate-type = [\"cdylib\"]` in [lib]")
}
