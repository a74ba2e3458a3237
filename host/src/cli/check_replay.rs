//! `agenthost check-replay NEW.wasm --store URL`: the replay check a host
//! runs when it loads a new version, run from a shell against a store
//! before the deploy (a step of a team's own pipeline). The store is only
//! read, on a read-only connection of its own, so it may be a running
//! host's; nothing is written and no activity, agent or model is called.
//! Prints the report as JSON and exits 0 only when every instance found
//! was replayed and none diverged.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::durable::{check_version, CheckLimits, Moved, OnNewVersion};
use crate::store::{ReadOnlyHub, TaskHub};
use crate::wasm::ComponentFiles;

#[derive(Debug, Clone, Args)]
pub(crate) struct CheckReplayArgs {
    /// The new version's `.wasm` file (its grants, NAME.toml, beside it).
    pub file: PathBuf,
    /// The store the instances are in (as `serve --store`).
    #[arg(long, env = "AGENTHOST_STORE", default_value = "sqlite://agenthost.db")]
    pub store: String,
    /// The task hub.
    #[arg(long, env = "TASKHUB_NAME", default_value = "default")]
    pub taskhub: String,
    /// The component's name in the store (default: the file's stem, as a
    /// host serving the file names it).
    #[arg(long)]
    pub name: Option<String>,
    /// Time the check may take; instances past it are unchecked (and the
    /// exit code is non-zero).
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration)]
    pub budget: Duration,
    /// Most instances checked.
    #[arg(long, default_value_t = 1_000_000)]
    pub max_instances: usize,
}

/// Runs the check and prints its report; `Ok(false)` when any instance
/// diverged or was not checked.
pub(crate) async fn check_replay(args: &CheckReplayArgs) -> anyhow::Result<bool> {
    let hub = TaskHub::new(&args.taskhub)?;
    let runtime = crate::server::local_runtime()?;
    let files = ComponentFiles::read(&args.file)
        .await
        .with_context(|| format!("{} cannot be read", args.file.display()))?;
    let name = args.name.clone().unwrap_or_else(|| files.name.clone());
    let grants = runtime
        .grants(&name, files.grants_source.as_deref())
        .with_context(|| format!("the grants beside {} do not load", args.file.display()))?;
    let component = Arc::new(
        runtime
            .load_bytes(&name, &args.file, files.bytes, grants)
            .await
            .with_context(|| format!("{} does not load", args.file.display()))?,
    );
    if component.manifest.orchestrations.is_empty() {
        anyhow::bail!(
            "{} has no orchestration: there is nothing to replay",
            args.file.display()
        );
    }
    let reader = ReadOnlyHub::open(&args.store, &hub)
        .await
        .with_context(|| format!("could not read the store {}", args.store))?;
    match reader.check_reads().knows_component(&name).await {
        Ok(true) => {}
        Ok(false) => {
            reader.close().await;
            anyhow::bail!(
                "task hub '{}' holds no version of component '{name}': no host served it there \
                 (the name is the file's stem unless --name says otherwise)",
                args.taskhub
            );
        }
        Err(e) => {
            reader.close().await;
            return Err(e).context("could not read the store's component versions");
        }
    }
    let limits = CheckLimits {
        budget: args.budget,
        max_instances: args.max_instances,
        replay_timeout: Duration::from_secs(30),
    };
    let report = check_version(
        &runtime,
        &reader.check_reads(),
        &component,
        &limits,
        OnNewVersion::Report,
        |_| async { Moved::No },
    )
    .await;
    reader.close().await;
    println!("{}", serde_json::to_string_pretty(&report)?);
    if let Some(error) = &report.error {
        anyhow::bail!("the check could not finish: {error}");
    }
    Ok(report.all_compatible())
}
