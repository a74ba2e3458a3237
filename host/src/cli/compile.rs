//! `agenthost compile DIR`: compiles every component of a components folder
//! ahead of time, into `DIR/.compiled/` ([`crate::wasm::PRECOMPILED`]), so
//! that a host serving the folder on an empty cache (an image's first start,
//! a new instance of a serverless app) loads them without compiling, when it
//! runs with `--load-precompiled`.

use std::path::Path;
use std::time::Instant;

use anyhow::{bail, Context};

pub(crate) async fn compile(dir: &Path) -> anyhow::Result<()> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the components folder {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_file() && path.extension().is_some_and(|x| x == "wasm"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("{} holds no .wasm component", dir.display());
    }
    let runtime = crate::server::local_runtime()?;
    let mut failed = Vec::new();
    for file in &files {
        let started = Instant::now();
        let placed = match runtime.load(file).await {
            Ok(component) => runtime
                .place_beside(&component, file)
                .map_err(anyhow::Error::from),
            Err(e) => Err(anyhow::Error::from(e).context("does not load")),
        };
        match placed {
            Ok(artifact) => {
                println!(
                    "compiled {} in {:.1} s: {}",
                    file.display(),
                    started.elapsed().as_secs_f64(),
                    artifact.display()
                );
                if let Err(reason) = crate::wasm::ArtifactCache::trusted(&artifact) {
                    eprintln!("warning: a host running as this user will not load {}: {reason} (docs/components.md)", artifact.display());
                }
            }
            Err(e) => {
                eprintln!("{}: {e:#}", file.display());
                failed.push(file.display().to_string());
            }
        }
    }
    // What is there for components no longer in the folder.
    let names: Vec<String> = files
        .iter()
        .filter_map(|f| crate::wasm::component_name(f).ok())
        .collect();
    crate::wasm::ArtifactCache::remove_others(dir, &names);
    if !failed.is_empty() {
        bail!(
            "{} of {} components did not compile: {}",
            failed.len(),
            files.len(),
            failed.join(", ")
        );
    }
    Ok(())
}
