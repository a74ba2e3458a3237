//! Watches the components directory and syncs the registry when it changes.
//!
//! Events are debounced: a copy shows up as a burst of writes, and loading
//! after the burst settles avoids compiling half a file. A file caught
//! mid-write anyway fails to load, is reported, and is loaded again when the
//! write that completes it arrives. A slow periodic rescan covers events the
//! platform drops (network filesystems, a directory replaced wholesale).

use std::sync::Arc;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Registry;

/// Quiet time after the last event before the directory is synced.
const DEBOUNCE: Duration = Duration::from_millis(200);
/// A directory that never goes quiet is synced at least this often.
const MAX_DEBOUNCE: Duration = Duration::from_secs(2);
/// Rescan even without events this often.
const RESCAN: Duration = Duration::from_secs(10);

/// Only component files and their grants matter; other files in the
/// directory (editors' swap files, a log) must not keep postponing a sync.
fn concerns_components(event: &notify::Event) -> bool {
    event.paths.is_empty()
        || event
            .paths
            .iter()
            .any(|p| p.extension().is_some_and(|x| x == "wasm" || x == "toml"))
}

/// Starts watching the registry's directory until `stop` is cancelled.
pub fn watch(registry: Arc<Registry>, stop: CancellationToken) -> notify::Result<()> {
    let (events, mut changed) = mpsc::unbounded_channel();
    let mut watcher =
        notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
            Ok(event) if event.kind.is_access() || !concerns_components(&event) => {}
            Ok(_) => {
                let _ = events.send(());
            }
            Err(e) => tracing::warn!(error = %e, "components directory watch error"),
        })?;
    watcher.watch(registry.dir(), RecursiveMode::NonRecursive)?;
    tokio::spawn(async move {
        // Owned by the task: dropping the watcher ends the watch.
        let _watcher = watcher;
        let mut rescan = tokio::time::interval(RESCAN);
        rescan.tick().await;
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = rescan.tick() => {}
                event = changed.recv() => {
                    if event.is_none() {
                        break;
                    }
                    let settled_by = tokio::time::Instant::now() + MAX_DEBOUNCE;
                    while tokio::time::Instant::now() < settled_by {
                        match tokio::time::timeout(DEBOUNCE, changed.recv()).await {
                            Ok(Some(())) => continue,
                            Ok(None) | Err(_) => break,
                        }
                    }
                }
            }
            match registry.sync().await {
                Ok(report) if report.is_empty() => {}
                Ok(report) => tracing::info!(
                    loaded = ?report.loaded,
                    removed = ?report.removed,
                    failed = ?report.failed,
                    "components directory changed"
                ),
                Err(e) => tracing::error!(
                    dir = %registry.dir().display(),
                    error = %e,
                    "could not read the components directory"
                ),
            }
        }
    });
    Ok(())
}
