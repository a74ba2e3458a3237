//! One process per SQLite file. SQLite itself lets two processes open one
//! database, and two hosts on one file would both run its due tasks (the
//! embedded store has no owners or leases: that is what PostgreSQL is for).
//! An OS lock on a file beside the database, held for the process's life,
//! makes the second host stop at start with the holder's pid.
//!
//! The lock is `flock`-style (`std::fs::File::try_lock`): the kernel drops
//! it when the process dies, kill -9 included, so a crash never leaves a
//! stale lock behind. The pid written into the file is only there to name
//! the holder in the error.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::store::error::StoreError;

/// Held for as long as the store is open; dropping it releases the lock.
#[derive(Debug)]
pub(crate) struct StoreLock {
    _file: File,
}

/// Where the lock of the database at `db` lives.
fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    db.with_file_name(name)
}

/// Takes the lock of the database at `db`, or says who holds it.
pub(crate) fn lock(db: &Path) -> Result<StoreLock, StoreError> {
    let path = lock_path(db);
    let io_error = |e: std::io::Error| {
        StoreError::Write(format!(
            "cannot open the store's lock file {}: {e}",
            path.display()
        ))
    };
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io_error)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            // The holder's pid is a courtesy: an unreadable one is "unknown".
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(StoreError::Locked {
                path: db.display().to_string(),
                holder: if holder.is_empty() {
                    "unknown".into()
                } else {
                    holder.to_string()
                },
            });
        }
        Err(TryLockError::Error(e)) => return Err(io_error(e)),
    }
    // Ours now: say who we are for the next one that tries.
    let pid = std::process::id().to_string();
    file.set_len(0)
        .and_then(|()| file.seek(SeekFrom::Start(0)))
        .and_then(|_| file.write_all(pid.as_bytes()))
        .and_then(|()| file.flush())
        .map_err(io_error)?;
    Ok(StoreLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_one_file_names_the_holder() -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Write(e.to_string()))?;
        let db = dir.path().join("agenthost.db");
        let held = lock(&db)?;
        match lock(&db) {
            Err(StoreError::Locked { holder, .. }) => {
                assert_eq!(holder, std::process::id().to_string())
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        drop(held);
        lock(&db).map(|_| ())
    }

    #[test]
    fn the_lock_file_sits_beside_the_database() {
        assert_eq!(
            lock_path(Path::new("/data/agenthost.default.db")),
            PathBuf::from("/data/agenthost.default.db.lock")
        );
    }
}
