//! `agenthost dev [DIR]`: builds the component project in DIR, serves it on
//! a local port (its store and components under `DIR/target/agenthost-dev`),
//! and builds it again whenever a source file or its Cargo.toml is saved;
//! the host loads each good build at once (hot reload), and a build that
//! fails leaves the last good one served.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::settings::ServeArgs;

/// Quiet time after the last save before building: an editor writes a file
/// in several steps.
const SETTLE: Duration = Duration::from_millis(300);

/// The serve flags `dev` picks, read as `serve` reads its own (the
/// `AGENTHOST_*` variables of the environment apply too).
#[derive(Debug, Parser)]
struct DevServe {
    #[command(flatten)]
    args: ServeArgs,
}

pub(crate) async fn dev(dir: &Path, port: u16) -> anyhow::Result<()> {
    // A port in use is said before minutes of building, not after.
    if port != 0 {
        drop(
            std::net::TcpListener::bind(("127.0.0.1", port))
                .with_context(|| format!("port {port} is not free: pick another with --port"))?,
        );
    }
    let work = dir.join("target/agenthost-dev");
    let components = work.join("components");
    super::build::build(dir, Some(&components)).await?;
    let store = format!("sqlite://{}", work.join("dev.db").display());
    let port = port.to_string();
    let served = DevServe::try_parse_from([
        "agenthost".as_ref(),
        "--components".as_ref(),
        components.as_os_str(),
        "--store".as_ref(),
        store.as_ref(),
        "--port".as_ref(),
        port.as_ref(),
        // The folder is this command's own: each build puts its compiled
        // code there, replacing what was, so a rebuilt Python or JavaScript
        // component is served without a second compile.
        "--load-precompiled".as_ref(),
        // As the scheduler's emulator: a test harness's per-module hubs
        // are served as they are named.
        "--dynamic-task-hubs".as_ref(),
    ])
    .context("could not make the serve settings")?;
    let rebuilding = tokio::spawn(rebuild_on_save(dir.to_path_buf(), components));
    let result = crate::server::serve(served.args.into()).await;
    rebuilding.abort();
    result
}

/// Builds again after each save of a source file or the manifest.
async fn rebuild_on_save(dir: PathBuf, components: PathBuf) {
    let (saved, mut saves) = mpsc::unbounded_channel();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if let Ok(event) = event {
            if !event.kind.is_access() && event.paths.iter().any(|p| is_source(p)) {
                let _ = saved.send(());
            }
        }
    });
    let mut watcher = match watcher {
        Ok(watcher) => watcher,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the project: it is not built again on save");
            return;
        }
    };
    // The project folder itself (not its Cargo.toml: an editor that saves
    // by renaming a new file over it would end a watch of the file), and
    // its sources; never target/, which every build writes.
    for (watched, mode) in [
        (dir.clone(), RecursiveMode::NonRecursive),
        (dir.join("src"), RecursiveMode::Recursive),
    ] {
        // Python and JavaScript projects keep their sources at the top.
        if !watched.exists() {
            continue;
        }
        if let Err(e) = watcher.watch(&watched, mode) {
            tracing::warn!(path = %watched.display(), error = %e, "cannot watch");
        }
    }
    while saves.recv().await.is_some() {
        // Everything saved within the quiet time is one build.
        while let Ok(Some(())) = tokio::time::timeout(SETTLE, saves.recv()).await {}
        println!("a source changed: building again");
        if let Err(e) = super::build::build(&dir, Some(&components)).await {
            eprintln!("the build failed; the last good build is still served: {e:#}");
        }
    }
}

/// Sources (Rust, Python, JavaScript, TypeScript, WIT) and manifests; not
/// the editors' swap and backup files.
fn is_source(path: &Path) -> bool {
    path.extension().is_some_and(|x| {
        ["rs", "wit", "py", "js", "mjs", "ts", "mts"]
            .iter()
            .any(|s| x == *s)
    }) || path.file_name().is_some_and(|n| {
        ["Cargo.toml", "pyproject.toml", "package.json"]
            .iter()
            .any(|m| n == *m)
    })
}
