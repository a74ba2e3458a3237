//! Where a one-component command (`build`, `inspect`, `tool call`) keeps
//! what it compiles, so that only the first command on a component pays its
//! compile (seconds for a Python or JavaScript one) and a host sharing the
//! folder loads it without compiling.
//!
//! Compiled artifacts are native code loaded without a check of their own,
//! so the user's cache is used only when [`super::trust`] trusts it;
//! otherwise the command compiles into a throw-away folder
//! of its own, as it did before there was a cache. `AGENTHOST_CACHE_DIR` is
//! the operator's choice, trusted as `serve --cache-dir` is.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Artifacts untouched this long are removed when a command opens the cache.
const KEEP_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
/// Past this, the oldest artifacts are removed until the cache is under it.
const KEEP_AT_MOST: u64 = 2 << 30;

/// The artifact cache of a one-component command.
pub(crate) struct CommandCache {
    dir: PathBuf,
    throwaway: bool,
}

impl CommandCache {
    /// `AGENTHOST_CACHE_DIR`, else the user's cache folder
    /// (`$XDG_CACHE_HOME/agenthost/compiled`, else
    /// `~/.cache/agenthost/compiled`) when it can be trusted, else a new
    /// private folder removed by [`CommandCache::done`].
    pub(crate) fn open() -> std::io::Result<Self> {
        if let Some(dir) = std::env::var_os("AGENTHOST_CACHE_DIR").filter(|v| !v.is_empty()) {
            return Ok(Self {
                dir: dir.into(),
                throwaway: false,
            });
        }
        if let Some(dir) = user_dir() {
            prune(&dir, SystemTime::now());
            return Ok(Self {
                dir,
                throwaway: false,
            });
        }
        // A new folder of a random name, this user's alone: a folder someone
        // else made first (a predictable name) could hold compiled code that
        // would then be run as this user's.
        let dir =
            std::env::temp_dir().join(format!("agenthost-local-{}", uuid::Uuid::new_v4().simple()));
        private_folder().create(&dir)?;
        Ok(Self {
            dir,
            throwaway: true,
        })
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes a throw-away folder; a lasting cache is kept.
    pub(crate) fn done(self) {
        if self.throwaway {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The user's cache folder, made private if new, if it can be trusted.
fn user_dir() -> Option<PathBuf> {
    // XDG: a relative XDG_CACHE_HOME is to be ignored.
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|home| home.join(".cache"))
        })?;
    let dir = base.join("agenthost").join("compiled");
    if !dir.is_dir() {
        private_folder().recursive(true).create(&dir).ok()?;
    }
    trusted(&dir).then_some(dir)
}

/// The folder, if this user may load what it holds ([`super::trust`]).
fn trusted(dir: &Path) -> bool {
    super::trust::uid_by_probe(dir)
        .is_some_and(|me| super::trust::folder(dir, me, super::trust::Owner::Me))
}

/// Removes artifacts untouched for [`KEEP_FOR`], then the oldest past
/// [`KEEP_AT_MOST`], and compile locks and half-written files a killed
/// command left a day ago or more. Best effort: a file another command
/// removed first, or one that cannot be read, is passed over.
fn prune(dir: &Path, now: SystemTime) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let age = |modified: SystemTime| now.duration_since(modified).unwrap_or_default();
    let mut artifacts = Vec::new();
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        let Ok(modified) = meta.modified() else {
            continue;
        };
        let path = entry.path();
        let is_artifact = path.extension().is_some_and(|e| e == "cwasm");
        if is_artifact && age(modified) < KEEP_FOR {
            artifacts.push((modified, meta.len(), path));
        } else if is_artifact || age(modified) > Duration::from_secs(24 * 3600) {
            let _ = std::fs::remove_file(&path);
        }
    }
    artifacts.sort();
    let mut total: u64 = artifacts.iter().map(|(_, len, _)| len).sum();
    for (_, len, path) in artifacts {
        if total <= KEEP_AT_MOST {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            total = total.saturating_sub(len);
        }
    }
}

fn private_folder() -> std::fs::DirBuilder {
    #[allow(unused_mut)]
    let mut folder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut folder, 0o700);
    folder
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_artifacts_and_stale_leftovers_are_pruned_and_recent_ones_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = |name: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, b"x").unwrap();
            path
        };
        let recent = file("a-1.cwasm");
        let old = file("b-1.cwasm");
        let lock = file("c-1.lock");
        let fresh_lock = file("d-1.lock");
        let set = |path: &Path, ago: Duration| {
            let when = SystemTime::now() - ago;
            std::fs::File::options()
                .write(true)
                .open(path)
                .unwrap()
                .set_modified(when)
                .unwrap();
        };
        set(&old, KEEP_FOR + Duration::from_secs(60));
        set(&lock, Duration::from_secs(2 * 24 * 3600));
        prune(dir.path(), SystemTime::now());
        assert!(recent.exists());
        assert!(!old.exists());
        assert!(!lock.exists());
        assert!(fresh_lock.exists());
    }
}
