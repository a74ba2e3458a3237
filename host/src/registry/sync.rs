//! Brings the registry in line with the components directory: new files are
//! loaded, changed ones reloaded, deleted ones removed.
//!
//! A file that fails to load (truncated, invalid, bad grants) is reported and
//! changes nothing else: the version loaded before it keeps serving. Files
//! are compared by size and modification time (of the `.wasm` and of its
//! `.toml` grants), so a sync with nothing changed costs one directory read.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::{LoadFailure, Registry};
use crate::wasm::{ComponentFiles, LoadError, LoadedComponent};

/// What a file looked like when it was last loaded (or failed to).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    wasm: FileStamp,
    grants: Option<FileStamp>,
}

/// Size, modification time and (on Unix) inode and change time: a file
/// replaced by `mv`, or copied with its mtime kept (`cp -p`, rsync, tar),
/// still gets a new inode or change time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
    changed_ns: i64,
}

impl FileStamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        #[cfg(unix)]
        let (inode, changed_ns) = {
            use std::os::unix::fs::MetadataExt;
            (
                meta.ino(),
                meta.ctime()
                    .saturating_mul(1_000_000_000)
                    .saturating_add(meta.ctime_nsec()),
            )
        };
        #[cfg(not(unix))]
        let (inode, changed_ns) = (0, 0);
        Self {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode,
            changed_ns,
        }
    }
}

/// What one sync changed, for the log.
#[derive(Debug, Default)]
pub struct SyncReport {
    pub loaded: Vec<String>,
    pub removed: Vec<String>,
    pub failed: Vec<String>,
}

impl SyncReport {
    pub fn is_empty(&self) -> bool {
        self.loaded.is_empty() && self.removed.is_empty() && self.failed.is_empty()
    }
}

impl Registry {
    /// Loads, reloads and removes components until the registry matches the
    /// directory. Changed files compile in parallel; they are applied in name
    /// order so the outcome never depends on compile speed.
    pub async fn sync(&self) -> std::io::Result<SyncReport> {
        let mut scanned = self.scanned.lock().await;
        let on_disk = scan(&self.dir)?;
        let removed: Vec<PathBuf> = scanned
            .keys()
            .filter(|path| !on_disk.contains_key(*path))
            .cloned()
            .collect();
        let changed: Vec<PathBuf> = on_disk
            .iter()
            .filter(|(path, print)| scanned.get(*path) != Some(print))
            .map(|(path, _)| path.clone())
            .collect();
        let loads: Vec<_> = changed
            .iter()
            .map(|path| {
                let (runtime, path) = (self.runtime.clone(), path.clone());
                tokio::spawn(async move {
                    let files = ComponentFiles::read(&path).await?;
                    let grants = runtime.grants(&files.name, files.grants_source.as_deref())?;
                    let component = runtime
                        .load_bytes(&files.name, &path, files.bytes.clone(), grants)
                        .await?;
                    Ok::<_, LoadError>((component, files))
                })
            })
            .collect();
        let mut report = SyncReport::default();
        let mut loaded = Vec::new();
        // Files whose failure says nothing about their bytes: tried again at
        // the next sync even if they do not change.
        let mut retry = Vec::new();
        for (path, load) in changed.into_iter().zip(loads) {
            let outcome = match load.await {
                Ok(Ok((component, read))) => self.keep_version(&component, &read).await,
                // One line: parsers' errors span several (byte arrays).
                Ok(Err(e)) => Err((one_line(&e.to_string()), e.is_transient())),
                Err(e) => Err((format!("the load task failed: {e}"), true)),
            };
            match outcome {
                Ok(component) => loaded.push(component),
                Err((error, transient)) => {
                    if transient {
                        retry.push(path.clone());
                    }
                    tracing::error!(file = %path.display(), %error, "component failed to load; the previous version, if any, keeps serving");
                    crate::metrics::component_loaded(std::time::Duration::ZERO, false);
                    report.failed.push(path.display().to_string());
                    self.with_entries(|entries| {
                        entries.failures.insert(
                            path.clone(),
                            LoadFailure {
                                file: path.clone(),
                                error,
                            },
                        );
                    });
                }
            }
        }
        // The new versions serve only once the activity set they form is
        // kept: an instance that starts on them can then always pin it.
        let mut replaced = Vec::new();
        if !loaded.is_empty() || !removed.is_empty() {
            let mut next = self
                .entries
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            for component in &loaded {
                next.failures.remove(&component.path);
                replaced.extend(
                    next.components
                        .insert(component.path.clone(), component.clone()),
                );
            }
            for path in &removed {
                next.failures.remove(path);
                replaced.extend(next.components.remove(path));
            }
            next.rebuild();
            if let Err(e) = self.keep_activity_set(&mut next).await {
                let error = format!("could not keep the activity set in the store ({e}); tried again at the next sync");
                tracing::error!(%error, "components not served yet; the previous versions, if any, keep serving");
                self.with_entries(|entries| {
                    for component in &loaded {
                        entries.failures.insert(
                            component.path.clone(),
                            LoadFailure {
                                file: component.path.clone(),
                                error: error.clone(),
                            },
                        );
                    }
                });
                // Every change is seen again by the next sync.
                let gone: Vec<_> = removed
                    .iter()
                    .filter_map(|p| scanned.get(p).map(|f| (p.clone(), f.clone())))
                    .collect();
                *scanned = on_disk;
                for component in &loaded {
                    scanned.remove(&component.path);
                    report.failed.push(component.path.display().to_string());
                }
                for path in retry {
                    scanned.remove(&path);
                }
                scanned.extend(gone);
                return Ok(report);
            }
            self.with_entries(|entries| *entries = next);
        }
        // Instances started on a replaced or removed version still replay on it.
        for old in replaced {
            self.versions.retire(old);
        }
        for component in &loaded {
            tracing::info!(
                component = %component.name,
                digest = %component.digest,
                from_cache = component.from_cache(),
                load_ms = component.load_time.as_millis() as u64,
                agents = ?component.manifest.agents.iter().map(|a| &a.name).collect::<Vec<_>>(),
                orchestrations = ?component.manifest.orchestrations.iter().map(|o| &o.name).collect::<Vec<_>>(),
                "component loaded"
            );
            crate::metrics::component_loaded(component.load_time, true);
            if !component.manifest.orchestrations.is_empty() {
                // Nobody listening (a front, a start) is fine.
                let _ = self.began_serving.send(component.clone());
            }
            crate::metrics::activities_served(
                component
                    .manifest
                    .activities
                    .iter()
                    .map(|a| a.name.as_str()),
            );
            report.loaded.push(component.name.clone());
        }
        for path in &removed {
            tracing::info!(file = %path.display(), "component removed");
            report.removed.push(path.display().to_string());
        }
        *scanned = on_disk;
        for path in retry {
            scanned.remove(&path);
        }
        Ok(report)
    }

    /// Keeps the bytes of a component with orchestrations or activities in
    /// the store before it serves, so every instance it starts (or that
    /// pins its activities) can run after a restart even if its file is gone
    /// by then.
    async fn keep_version(
        &self,
        component: &Arc<LoadedComponent>,
        read: &ComponentFiles,
    ) -> Result<Arc<LoadedComponent>, (String, bool)> {
        if !component.is_versioned() {
            return Ok(component.clone());
        }
        self.store
            .save_component_version(
                &component.digest,
                &component.name,
                &read.bytes,
                read.grants_source.as_deref(),
            )
            .await
            .map_err(|e| {
                let error = format!("could not keep the component version in the store: {e}");
                (error, true)
            })?;
        Ok(component.clone())
    }

    fn with_entries<R>(&self, f: impl FnOnce(&mut super::Entries) -> R) -> R {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        f(&mut entries)
    }
}

/// Every `*.wasm` file of `dir` with its fingerprint.
fn scan(dir: &Path) -> std::io::Result<BTreeMap<PathBuf, Fingerprint>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let path = entry.path();
        if path.extension().is_none_or(|x| x != "wasm") {
            continue;
        }
        let Ok(meta) = std::fs::metadata(&path) else {
            continue; // deleted while scanning: the next sync sees it gone
        };
        if !meta.is_file() {
            continue;
        }
        let grants = std::fs::metadata(path.with_extension("toml"))
            .ok()
            .map(|m| FileStamp::of(&m));
        files.insert(
            path,
            Fingerprint {
                wasm: FileStamp::of(&meta),
                grants,
            },
        );
    }
    Ok(files)
}

/// `text` with every run of whitespace (newlines too) as one space: a load
/// error is one log line and one entry of `/api/components`.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
