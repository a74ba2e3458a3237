//! Where a one-component command (`build`, `inspect`, `tool call`) keeps
//! what it compiles, so that only the first command on a component pays its
//! compile (seconds for a Python or JavaScript one) and a host sharing the
//! folder loads it without compiling.
//!
//! Compiled artifacts are native code loaded without a check of their own
//! (`Component::deserialize_file`): whoever can write the folder, or swap a
//! folder on its path, runs code as this user. So the user's cache is used
//! only when every folder on its path is this user's or root's and nobody
//! else may write it (a sticky folder such as /tmp may stand above a folder
//! of this user's); otherwise the command compiles into a throw-away folder
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

#[cfg(unix)]
fn trusted(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // A file made now is owned by this process's user.
    let probe = dir.join(format!(".owner-{}", uuid::Uuid::new_v4().simple()));
    let me = std::fs::File::create_new(&probe)
        .and_then(|f| f.metadata())
        .map(|m| m.uid());
    let _ = std::fs::remove_file(&probe);
    let Ok(me) = me else {
        return false;
    };
    let Ok(real) = dir.canonicalize() else {
        return false;
    };
    // Both the path as named and the one its links lead to: a link is only
    // as safe as the folder it stands in.
    for path in [dir, real.as_path()] {
        let mut below_owned_by_me = true;
        for (depth, folder) in path.ancestors().enumerate() {
            let Ok(meta) = std::fs::metadata(folder) else {
                return false;
            };
            let owner_ok = meta.uid() == me || (depth > 0 && meta.uid() == 0);
            let others_write = meta.mode() & 0o022 != 0;
            let sticky = meta.mode() & 0o1000 != 0;
            // The cache folder itself: this user's, nobody else's to write.
            if depth == 0 && (meta.uid() != me || others_write) {
                return false;
            }
            // Above it: written by nobody else, or sticky above a folder
            // of this user's (others cannot rename or remove it).
            if !owner_ok || (others_write && !(sticky && below_owned_by_me)) {
                return false;
            }
            below_owned_by_me = meta.uid() == me;
        }
    }
    true
}

#[cfg(not(unix))]
fn trusted(_dir: &Path) -> bool {
    false
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

    #[cfg(unix)]
    #[test]
    fn a_cache_others_may_write_to_or_swap_is_not_trusted() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        // tempdir's parent (/tmp) is sticky, and the folder is this user's.
        let mine = root.path().join("cache");
        private_folder().create(&mine).unwrap();
        assert!(trusted(&mine), "a private folder of this user's");
        std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(!trusted(&mine), "a folder anyone may write to");
        std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o700)).unwrap();
        // A folder of this user's inside a folder anyone may write to (not
        // sticky): the inner folder could be swapped.
        let open = root.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let inner = open.join("cache");
        private_folder().create(&inner).unwrap();
        assert!(!trusted(&inner), "its parent lets others swap it");
    }
}
