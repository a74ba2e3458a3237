//! Whether native code on disk may be loaded: the one rule every door to it
//! goes through (the host's own cache, the code made ahead of time beside
//! the components in `.compiled/`, the commands' cache, which is the same
//! folder as the host's by default).
//!
//! A compiled artifact is native code that `Component::deserialize_file`
//! loads without a check of its own: whoever can write the folder, or swap a
//! folder on its path, runs code as this host's user, outside the sandbox.
//! A folder is trusted when every folder on its path (as named, and as its
//! links resolve) is this user's or root's and nobody else may write it; a
//! sticky folder such as /tmp may stand above a folder of this user's, since
//! others can then neither rename nor remove it. An artifact is trusted when
//! its folder is and it is a plain file (not a link), this user's or root's,
//! that nobody else may write.

use std::path::{Path, PathBuf};

/// Why compiled code at a path is not loaded (or a folder not used for it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    #[error("{}, or a folder above it, belongs to another user than this host's or root, or another user may write to it (or swap it)", .0.display())]
    Folder(PathBuf),
    #[error("{} is not a plain file (a link?)", .0.display())]
    NotAFile(PathBuf),
    #[error("{} belongs to another user than this host's or root, or another user may write to it", .0.display())]
    File(PathBuf),
}

/// The rule: the artifact at `path` may be loaded as native code. Checked
/// right before every load of one ([`super::cache`]), wherever it is.
pub(crate) fn artifact(path: &Path) -> Result<(), Untrusted> {
    let me = uid_of_process();
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    if !folder_of(parent, me) {
        return Err(Untrusted::Folder(parent.to_path_buf()));
    }
    file(path, me)
}

/// Whether compiled code may be kept in (and loaded from) `dir`.
pub(crate) fn folder(dir: &Path) -> Result<(), Untrusted> {
    if folder_of(dir, uid_of_process()) {
        Ok(())
    } else {
        Err(Untrusted::Folder(dir.to_path_buf()))
    }
}

/// This process's effective user.
#[cfg(unix)]
fn uid_of_process() -> u32 {
    rustix::process::geteuid().as_raw()
}

#[cfg(unix)]
fn folder_of(dir: &Path, me: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    // A relative path (`components/.compiled/x`) is checked up to the root,
    // through the working folder.
    let (Ok(named), Ok(real)) = (std::path::absolute(dir), dir.canonicalize()) else {
        return false;
    };
    // Both the path as named and the one its links lead to: a link is only
    // as safe as the folder it stands in.
    let mine_or_root = |uid: u32| uid == me || uid == 0;
    for path in [named.as_path(), real.as_path()] {
        // Whether the entry just below (as it stands in this folder: a
        // link is its own entry) is this user's or root's.
        let mut below_ours = true;
        for (depth, folder) in path.ancestors().enumerate() {
            let (Ok(meta), Ok(entry)) =
                (std::fs::metadata(folder), std::fs::symlink_metadata(folder))
            else {
                return false;
            };
            // A link on the path is re-pointed at will by whoever owns it,
            // whatever the folder it stands in allows (another user's link
            // in /tmp).
            if entry.file_type().is_symlink() && !mine_or_root(entry.uid()) {
                return false;
            }
            let owner_ok = mine_or_root(meta.uid());
            let others_write = meta.mode() & 0o022 != 0;
            let sticky = meta.mode() & 0o1000 != 0;
            // The folder itself: nobody else's to write.
            if depth == 0 && (!owner_ok || others_write) {
                return false;
            }
            // Above it: written by nobody else, or sticky above an entry of
            // this user's or root's (others can neither rename nor remove it).
            if !owner_ok || (others_write && !(sticky && below_ours)) {
                return false;
            }
            below_ours = mine_or_root(entry.uid());
        }
    }
    true
}

/// A file in a trusted folder: itself, not a link, and nobody else's to write.
#[cfg(unix)]
fn file(path: &Path, me: u32) -> Result<(), Untrusted> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.is_file() => Err(Untrusted::NotAFile(path.to_path_buf())),
        Ok(meta) if (meta.uid() == me || meta.uid() == 0) && meta.mode() & 0o022 == 0 => Ok(()),
        _ => Err(Untrusted::File(path.to_path_buf())),
    }
}

/// Elsewhere nothing here can tell who may write a file: nothing is trusted.
#[cfg(not(unix))]
fn uid_of_process() -> u32 {
    u32::MAX
}

#[cfg(not(unix))]
fn folder_of(_dir: &Path, _me: u32) -> bool {
    false
}

#[cfg(not(unix))]
fn file(path: &Path, _me: u32) -> Result<(), Untrusted> {
    Err(Untrusted::File(path.to_path_buf()))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    /// Run as root (as the tests here are), another user's folders and
    /// links are made with chown; elsewhere the case is passed over.
    #[test]
    fn another_users_link_on_the_path_is_not_trusted_and_roots_folder_in_a_sticky_one_is() {
        use std::os::unix::fs::{lchown, symlink};
        if uid_of_process() != 0 {
            return;
        }
        let other = 65_534;
        let root = tempfile::tempdir().unwrap();
        let sticky = root.path().join("sticky");
        std::fs::create_dir(&sticky).unwrap();
        mode(&sticky, 0o1777);
        let target = root.path().join("target");
        std::fs::create_dir(&target).unwrap();
        mode(&target, 0o700);
        let link = sticky.join("cache");
        symlink(&target, &link).unwrap();
        assert!(folder_of(&link, 0), "root's own link to root's folder");
        // Another user's link in a sticky folder: that user re-points it.
        lchown(&link, Some(other), Some(other)).unwrap();
        assert!(!folder_of(&link, 0), "another user's link on the path");
        // A user's private folder below a folder of root's in a sticky one
        // (/tmp/work/home): nobody else can rename or remove root's.
        let user = 12_345;
        let roots = sticky.join("roots");
        std::fs::create_dir(&roots).unwrap();
        mode(&roots, 0o755);
        let home = roots.join("home");
        std::fs::create_dir(&home).unwrap();
        mode(&home, 0o700);
        std::os::unix::fs::chown(&home, Some(user), Some(user)).unwrap();
        assert!(folder_of(&home, user), "root's folder in a sticky one");
        // ...but not below another user's folder there.
        let theirs = sticky.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        mode(&theirs, 0o755);
        std::os::unix::fs::chown(&theirs, Some(other), Some(other)).unwrap();
        let inside = theirs.join("home");
        std::fs::create_dir(&inside).unwrap();
        std::os::unix::fs::chown(&inside, Some(user), Some(user)).unwrap();
        assert!(!folder_of(&inside, user), "another user's folder above");
    }

    #[test]
    fn a_folder_others_may_write_to_or_swap_is_not_trusted() {
        let root = tempfile::tempdir().unwrap();
        // tempdir's parent (/tmp) is sticky, and the folder is this user's.
        let mine = root.path().join("cache");
        std::fs::create_dir(&mine).unwrap();
        mode(&mine, 0o700);
        assert_eq!(folder(&mine), Ok(()), "a private folder of this user's");
        mode(&mine, 0o777);
        assert!(folder(&mine).is_err(), "a folder anyone may write to");
        mode(&mine, 0o755);
        // A folder of this user's inside a folder anyone may write to (not
        // sticky): the inner folder could be swapped.
        let open = root.path().join("open");
        std::fs::create_dir(&open).unwrap();
        mode(&open, 0o777);
        let inner = open.join("cache");
        std::fs::create_dir(&inner).unwrap();
        assert!(folder(&inner).is_err(), "its parent lets others swap it");
        // A link to a trusted folder, standing in one others may write to.
        let link = open.join("link");
        std::os::unix::fs::symlink(&mine, &link).unwrap();
        assert!(folder(&link).is_err(), "the link could be swapped");
        // A relative path is the folder it names from the working folder.
        let here = std::env::current_dir().unwrap();
        assert_eq!(folder(Path::new(".")).is_ok(), folder(&here).is_ok());
        // Root's folders are trusted.
        assert_eq!(folder(Path::new("/")), Ok(()));
    }

    #[test]
    fn an_artifact_others_may_write_or_a_link_or_one_in_an_open_folder_is_not_trusted() {
        let root = tempfile::tempdir().unwrap();
        let artifact = root.path().join("a.cwasm");
        std::fs::write(&artifact, b"x").unwrap();
        mode(&artifact, 0o644);
        assert_eq!(super::artifact(&artifact), Ok(()));
        mode(&artifact, 0o666);
        assert_eq!(
            super::artifact(&artifact),
            Err(Untrusted::File(artifact.clone()))
        );
        mode(&artifact, 0o644);
        let link = root.path().join("b.cwasm");
        std::os::unix::fs::symlink(&artifact, &link).unwrap();
        assert_eq!(
            super::artifact(&link),
            Err(Untrusted::NotAFile(link.clone()))
        );
        mode(root.path(), 0o777);
        assert_eq!(
            super::artifact(&artifact),
            Err(Untrusted::Folder(root.path().to_path_buf()))
        );
        mode(root.path(), 0o700);
    }
}
