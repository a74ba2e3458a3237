//! Whether a folder of compiled artifacts may be loaded from.
//!
//! A compiled artifact is native code that `Component::deserialize_file`
//! loads without a check of its own: whoever can write the folder, or swap a
//! folder on its path, runs code as this host's user. A folder is trusted
//! when every folder on its path (as named, and as its links resolve) is
//! this user's or root's and nobody else may write it; a sticky folder such
//! as /tmp may stand above a folder of this user's, since others can then
//! neither rename nor remove it.

use std::path::Path;

/// Who may own the folder itself.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// This user only: a cache the host writes.
    Me,
    /// This user or root: artifacts made at image build, read-only here.
    MeOrRoot,
}

/// This process's user, as the owner of a file made now in `writable`.
#[cfg(unix)]
pub(crate) fn uid_by_probe(writable: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let probe = writable.join(format!(".owner-{}", uuid::Uuid::new_v4().simple()));
    let me = std::fs::File::create_new(&probe)
        .and_then(|f| f.metadata())
        .map(|m| m.uid());
    let _ = std::fs::remove_file(&probe);
    me.ok()
}

/// This process's effective user.
#[cfg(unix)]
pub(crate) fn uid_of_process() -> u32 {
    rustix::process::geteuid().as_raw()
}

#[cfg(unix)]
pub(crate) fn folder(dir: &Path, me: u32, owner: Owner) -> bool {
    use std::os::unix::fs::MetadataExt;
    // A relative path (`components/.compiled/x`) is checked up to the root,
    // through the working folder.
    let (Ok(named), Ok(real)) = (std::path::absolute(dir), dir.canonicalize()) else {
        return false;
    };
    // Both the path as named and the one its links lead to: a link is only
    // as safe as the folder it stands in.
    for path in [named.as_path(), real.as_path()] {
        let mut below_owned_by_me = true;
        for (depth, folder) in path.ancestors().enumerate() {
            let Ok(meta) = std::fs::metadata(folder) else {
                return false;
            };
            let owner_ok =
                meta.uid() == me || (meta.uid() == 0 && (depth > 0 || owner == Owner::MeOrRoot));
            let others_write = meta.mode() & 0o022 != 0;
            let sticky = meta.mode() & 0o1000 != 0;
            // The folder itself: nobody else's to write.
            if depth == 0 && (!owner_ok || others_write) {
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

/// A file in a trusted folder: itself, not a link, and nobody else's to write.
#[cfg(unix)]
pub(crate) fn file(path: &Path, me: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).is_ok_and(|meta| {
        meta.is_file() && (meta.uid() == me || meta.uid() == 0) && meta.mode() & 0o022 == 0
    })
}

#[cfg(not(unix))]
pub(crate) fn uid_by_probe(_writable: &Path) -> Option<u32> {
    None
}

#[cfg(not(unix))]
pub(crate) fn uid_of_process() -> u32 {
    u32::MAX
}

#[cfg(not(unix))]
pub(crate) fn folder(_dir: &Path, _me: u32, _owner: Owner) -> bool {
    false
}

#[cfg(not(unix))]
pub(crate) fn file(_path: &Path, _me: u32) -> bool {
    false
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn a_folder_others_may_write_to_or_swap_is_not_trusted() {
        let root = tempfile::tempdir().unwrap();
        let me = uid_by_probe(root.path()).unwrap();
        assert_eq!(uid_of_process(), me);
        // tempdir's parent (/tmp) is sticky, and the folder is this user's.
        let mine = root.path().join("cache");
        std::fs::create_dir(&mine).unwrap();
        mode(&mine, 0o700);
        assert!(
            folder(&mine, me, Owner::Me),
            "a private folder of this user's"
        );
        mode(&mine, 0o777);
        assert!(
            !folder(&mine, me, Owner::Me),
            "a folder anyone may write to"
        );
        mode(&mine, 0o755);
        // A folder of this user's inside a folder anyone may write to (not
        // sticky): the inner folder could be swapped.
        let open = root.path().join("open");
        std::fs::create_dir(&open).unwrap();
        mode(&open, 0o777);
        let inner = open.join("cache");
        std::fs::create_dir(&inner).unwrap();
        assert!(
            !folder(&inner, me, Owner::MeOrRoot),
            "its parent lets others swap it"
        );
        // A relative path is the folder it names from the working folder.
        let here = std::env::current_dir().unwrap();
        assert_eq!(
            folder(Path::new("."), me, Owner::MeOrRoot),
            folder(&here, me, Owner::MeOrRoot)
        );
        // A folder of another user's is trusted only if that user is root.
        assert!(folder(Path::new("/"), me, Owner::MeOrRoot));
        assert_eq!(folder(Path::new("/"), me, Owner::Me), me == 0);
    }

    #[test]
    fn an_artifact_others_may_write_or_a_link_is_not_trusted() {
        let root = tempfile::tempdir().unwrap();
        let me = uid_by_probe(root.path()).unwrap();
        let artifact = root.path().join("a.cwasm");
        std::fs::write(&artifact, b"x").unwrap();
        mode(&artifact, 0o644);
        assert!(file(&artifact, me));
        mode(&artifact, 0o666);
        assert!(!file(&artifact, me));
        mode(&artifact, 0o644);
        let link = root.path().join("b.cwasm");
        std::os::unix::fs::symlink(&artifact, &link).unwrap();
        assert!(!file(&link, me));
    }
}
