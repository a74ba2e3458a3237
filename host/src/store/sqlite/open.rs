//! Opening a SQLite store: the file that holds the hub, locked for this
//! process before anything touches it, migrated, and the pool of plain-query
//! connections on it. The writer opens its own connection to the same file
//! ([`super::commit`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{AnyPool, Executor};

use super::file_lock::{self, StoreLock};
use crate::store::error::StoreError;
use crate::store::hub::TaskHub;
use crate::store::migrations;

/// The pool (of `connections`) on the file that holds task hub `hub` of the
/// store at `url`, migrated, with the file's path and its lock.
pub(in crate::store) async fn open(
    url: &str,
    hub: &TaskHub,
    connections: u32,
) -> Result<(AnyPool, PathBuf, StoreLock), StoreError> {
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .filter(|p| !p.is_empty())
        .ok_or_else(|| StoreError::UnsupportedUrl(url.to_string()))?;
    // A durable store is a file: the pool and the committer's own connection
    // must open the same one.
    if path.starts_with(":memory:") || path.starts_with("memory:") || path.starts_with("file:") {
        return Err(StoreError::UnsupportedUrl(url.to_string()));
    }
    let path = hub.sqlite_file(Path::new(path));
    // Before anything touches the file: a second host must not even migrate.
    let lock = match file_lock::lock(&path) {
        // A missing or read-only directory: the remedy of an unreachable store.
        Err(StoreError::Write(e)) => {
            return Err(StoreError::Connect {
                address: path.display().to_string(),
                source: sqlx::Error::Configuration(e.into()),
            })
        }
        other => other?,
    };
    let open_error = |source| StoreError::Connect {
        address: path.display().to_string(),
        source,
    };
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(10))
        .foreign_keys(true);
    {
        let migrations = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(open_error)?;
        migrations::SQLITE
            .migrator()
            .await?
            .run(&migrations)
            .await?;
        migrations.close().await;
    }
    let pool = AnyPoolOptions::new()
        .max_connections(connections)
        .after_connect(|connection, _| {
            Box::pin(async move {
                connection
                    .execute(
                        "PRAGMA busy_timeout = 10000; PRAGMA synchronous = NORMAL; \
                         PRAGMA foreign_keys = ON;",
                    )
                    .await
                    .map(|_| ())
            })
        })
        .connect(&format!("sqlite://{}", path.display()))
        .await
        .map_err(open_error)?;
    Ok((pool, path, lock))
}
