//! WAL checkpoints off the writer's thread. SQLite's automatic checkpoint
//! runs inside the commit that crosses 1,000 WAL pages: that commit copies
//! the pages into the database file and syncs it, and every write queued
//! behind it waits (the p99 of a single client's agent runs was 17× its
//! median, one run in sixty paying for everyone's pages). The writer's
//! connection turns it off; this thread, on a connection of its own, runs a
//! passive checkpoint (it never blocks the writer or a reader) a moment
//! after writes came, so the WAL stays as short as before without a commit
//! ever paying for it.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use rusqlite::Connection;

use crate::store::error::StoreError;

/// How long after a write the checkpoint runs: writes arriving meanwhile
/// share it (a checkpoint syncs the database file once for all of them).
const GATHER: Duration = Duration::from_millis(200);

/// Told after each batch the writer commits.
pub(super) struct Checkpoints {
    wrote: mpsc::SyncSender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpoints {
    /// Starts the thread; the writer's `connection` stops checkpointing.
    pub(super) fn start(path: &Path, writer: &Connection) -> Result<Self, StoreError> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(Duration::from_secs(10))?;
        writer.execute_batch("PRAGMA wal_autocheckpoint = 0;")?;
        let (wrote, writes) = mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("agenthost-checkpoint".into())
            .spawn(move || checkpoint_loop(&connection, &writes))
            .map_err(|e| StoreError::Write(format!("cannot start the WAL checkpointer: {e}")))?;
        Ok(Self { wrote, thread })
    }

    /// A batch was committed: a checkpoint follows shortly.
    pub(super) fn wrote(&self) {
        // Full: one is already due, and covers this batch too.
        let _ = self.wrote.try_send(());
    }

    /// Ends the thread, after the checkpoint due (if one is): the store is
    /// closing, and nothing of it may touch the file after.
    pub(super) fn stop(self) {
        drop(self.wrote);
        let _ = self.thread.join();
    }
}

fn checkpoint_loop(connection: &Connection, writes: &mpsc::Receiver<()>) {
    let mut failing = false;
    while writes.recv().is_ok() {
        std::thread::sleep(GATHER);
        while writes.try_recv().is_ok() {}
        // PASSIVE: copies what no reader still needs; the rest waits for
        // the next one. A failure (a full disk) leaves the WAL longer, and
        // the next write tries again; said once, not at every write.
        match connection.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            Ok(()) if failing => {
                failing = false;
                tracing::info!("WAL checkpoints succeed again");
            }
            Ok(()) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "WAL checkpoint failed; the WAL grows until one succeeds (tried after each write)");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::store::test_fixtures::{new, sqlite};

    /// The writer's commits never checkpoint, yet what they write reaches the
    /// database file shortly after (copied there by the thread: the file
    /// grows while nothing else checkpoints), and the close ends the thread.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_reach_the_database_file_without_a_commit_copying_them(
    ) -> Result<(), Box<dyn std::error::Error>> {
        let (dir, store) = sqlite().await?;
        let file = dir.path().join("t.db");
        let len = || std::fs::metadata(&file).map(|m| m.len());
        let before = len()?;
        for i in 0..300 {
            store
                .start(new(&format!("instance-{i:04}")))
                .await?
                .ok_or("not created")?;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while len()? <= before {
            assert!(
                std::time::Instant::now() < deadline,
                "300 instances written, the database file still {before} bytes: no checkpoint ran"
            );
            tokio::time::sleep(super::GATHER).await;
        }
        store.close().await;
        Ok(())
    }
}
