//! Writing the app folder all or nothing: everything is written into a
//! folder of its own beside the destination (same file system), then
//! renamed into place. A failure before that leaves nothing: the staging
//! folder is removed when dropped; a rename that fails takes back the ones
//! made before it.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// A folder being filled, removed when dropped unless installed.
pub(crate) struct Staging {
    path: PathBuf,
}

impl Staging {
    /// A new, empty folder in `beside` (which exists).
    pub(crate) fn new_in(beside: &Path) -> anyhow::Result<Self> {
        let path = beside.join(format!(".agenthost-init-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir(&path).with_context(|| format!("cannot create {}", path.display()))?;
        Ok(Self { path })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Moves what was written to `dir`: the folder itself when `dir` does
    /// not exist, else each entry (none of which `dir` holds, but
    /// `components` when it is the folder the components came from: then
    /// only what it lacks, `.compiled/` replaced).
    pub(crate) fn install(self, dir: &Path, same_components: bool) -> anyhow::Result<()> {
        if !dir.exists() {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
            }
            return std::fs::rename(&self.path, dir).with_context(|| {
                format!("cannot rename {} to {}", self.path.display(), dir.display())
            });
        }
        let mut moved = Vec::new();
        let result = self.move_entries(dir, same_components, &mut moved);
        if result.is_err() {
            for path in moved.iter().rev() {
                let _ = std::fs::remove_dir_all(path).or_else(|_| std::fs::remove_file(path));
            }
        }
        result
    }

    fn move_entries(
        &self,
        dir: &Path,
        same_components: bool,
        moved: &mut Vec<PathBuf>,
    ) -> anyhow::Result<()> {
        for entry in std::fs::read_dir(&self.path)? {
            let entry = entry?;
            let target = dir.join(entry.file_name());
            if same_components && entry.file_name() == "components" {
                merge_components(&entry.path(), &target, moved)?;
                continue;
            }
            if target.symlink_metadata().is_ok() {
                bail!("{} appeared while init ran", target.display());
            }
            std::fs::rename(entry.path(), &target)
                .with_context(|| format!("cannot write {}", target.display()))?;
            moved.push(target);
        }
        Ok(())
    }
}

/// Into the components folder the copies were made from: the files it
/// holds stay as they are (the copies are of them); the compiled code
/// replaces what was there.
fn merge_components(from: &Path, to: &Path, moved: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_name() == crate::wasm::PRECOMPILED {
            if target.is_dir() {
                std::fs::remove_dir_all(&target)
                    .with_context(|| format!("cannot replace {}", target.display()))?;
            }
        } else if target.symlink_metadata().is_ok() {
            continue;
        }
        std::fs::rename(entry.path(), &target)
            .with_context(|| format!("cannot write {}", target.display()))?;
        moved.push(target);
    }
    Ok(())
}

impl Drop for Staging {
    fn drop(&mut self) {
        if self.path.exists() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}
