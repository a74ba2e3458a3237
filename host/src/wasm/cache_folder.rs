//! Where compiled code is kept between runs: one folder shared by `serve`
//! and the one-component commands (`build`, `compile`, `inspect`, `tool
//! call`), so that only the first of them pays a component's compile
//! (seconds for a Python or JavaScript one) and a host serving the folder
//! `agenthost build --into` dropped a component into loads it without
//! compiling, with no opt-in: the host trusts its own user's cache.
//!
//! The folder is the operator's (`serve --cache-dir`, `AGENTHOST_CACHE_DIR`),
//! else the user's cache folder (`$XDG_CACHE_HOME/agenthost/compiled`, else
//! `~/.cache/agenthost/compiled`), made private (0700) when new: never the
//! working folder, which may be a cloned or downloaded folder carrying
//! someone else's native code. A folder [`super::trust`] does not trust is
//! neither read nor written (writing would make it look like ours): this
//! process keeps what it compiles in a private folder of its own, removed
//! when it is done, and says so once.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{trust, LoadError};

/// Artifacts untouched this long are removed when the user's cache is opened.
const KEEP_FOR: Duration = Duration::from_secs(30 * 24 * 3600);
/// Past this, the oldest artifacts are removed until the cache is under it.
const KEEP_AT_MOST: u64 = 2 << 30;

/// The folder compiled code is kept in by this process.
#[derive(Debug)]
pub(crate) struct CacheFolder {
    /// `None`: nowhere (no trusted folder at all): each load compiles.
    dir: Option<PathBuf>,
    /// Made for this process alone, removed when it is dropped.
    throwaway: bool,
}

impl CacheFolder {
    /// `configured` (`--cache-dir`, `AGENTHOST_CACHE_DIR`), else the user's
    /// cache folder, when [`trust`] trusts it; else a new private folder of
    /// this process's. A configured folder that cannot be made is an error
    /// (the operator named it); anything else falls back, logged.
    pub(crate) fn choose(configured: Option<&Path>) -> Result<Self, LoadError> {
        let dir = match configured {
            // A relative path is read from the working folder, which may be a
            // cloned folder's: its `.agenthost/cache` would be loaded as this
            // host's own native code (an `AGENTHOST_CACHE_DIR` left set from
            // before the cache moved out of the working folder, say).
            Some(dir) if dir.is_relative() => {
                return Err(LoadError::Cache {
                    path: dir.to_path_buf(),
                    reason: std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        "a relative path names a folder of whatever folder the host is started in; \
                         give --cache-dir (AGENTHOST_CACHE_DIR) as an absolute path",
                    ),
                });
            }
            Some(dir) => {
                make_private(dir).map_err(|reason| LoadError::Cache {
                    path: dir.to_path_buf(),
                    reason,
                })?;
                dir.to_path_buf()
            }
            None => {
                let Some(dir) = user_folder() else {
                    tracing::info!("neither XDG_CACHE_HOME nor HOME names an absolute folder: compiled components are kept for this run only");
                    return Ok(Self::throwaway());
                };
                if let Err(e) = make_private(&dir) {
                    tracing::warn!(folder = %dir.display(), error = %e, "cannot make the user's cache folder: compiled components are kept for this run only");
                    return Ok(Self::throwaway());
                }
                dir
            }
        };
        if let Err(reason) = trust::folder(&dir) {
            tracing::warn!(folder = %dir.display(), %reason, "not using this folder for compiled components (neither read nor written): its code would run as native code of this host, outside the sandbox; they are kept for this run only instead");
            return Ok(Self::throwaway());
        }
        if configured.is_none() {
            prune(&dir, SystemTime::now());
        }
        Ok(Self {
            dir: Some(dir),
            throwaway: false,
        })
    }

    /// The folder, if there is one.
    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// A new folder of a random name, this user's alone: a folder someone
    /// else made first (a predictable name) could hold compiled code that
    /// would then be run as this user's. Where none can be made and
    /// trusted, none: each load compiles.
    fn throwaway() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "agenthost-compiled-{}",
            uuid::Uuid::new_v4().simple()
        ));
        let made = private_folder().create(&dir);
        if made.is_ok() && trust::folder(&dir).is_ok() {
            return Self {
                dir: Some(dir),
                throwaway: true,
            };
        }
        if made.is_ok() {
            let _ = std::fs::remove_dir(&dir);
        }
        tracing::warn!(temp = %std::env::temp_dir().display(), "no private temporary folder either: each component is compiled when it loads, its code kept in memory only");
        Self {
            dir: None,
            throwaway: false,
        }
    }
}

impl Drop for CacheFolder {
    fn drop(&mut self) {
        if let (true, Some(dir)) = (self.throwaway, &self.dir) {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// `$XDG_CACHE_HOME/agenthost/compiled`, else `~/.cache/agenthost/compiled`.
fn user_folder() -> Option<PathBuf> {
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
    Some(base.join("agenthost").join("compiled"))
}

/// Makes `dir` and the folders above it that are missing, private to this
/// user (0700).
fn make_private(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    private_folder().recursive(true).create(dir)
}

/// Removes artifacts untouched for [`KEEP_FOR`], then the oldest past
/// [`KEEP_AT_MOST`], and compile locks and half-written files a killed
/// process left a day ago or more. Best effort: a file another process
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

    #[cfg(unix)]
    #[test]
    fn a_configured_folder_others_may_write_to_is_replaced_by_a_private_one_removed_after() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let open = root.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let chosen = CacheFolder::choose(Some(&open)).unwrap();
        let used = chosen.dir().unwrap().to_path_buf();
        assert_ne!(used, open);
        assert!(trust::folder(&used).is_ok());
        drop(chosen);
        assert!(!used.exists(), "the private folder is removed after");
        // A new configured folder is made private, and used.
        let new = root.path().join("new/cache");
        let chosen = CacheFolder::choose(Some(&new)).unwrap();
        assert_eq!(chosen.dir(), Some(new.as_path()));
        let mode = std::fs::metadata(&new).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        drop(chosen);
        assert!(new.exists(), "a lasting folder is kept");
    }
}
