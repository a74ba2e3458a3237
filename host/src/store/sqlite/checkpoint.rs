//! WAL checkpoints off the writer's thread. SQLite's automatic checkpoint
//! runs inside the commit that crosses 1,000 WAL pages: that commit copies
//! the pages into the database file and syncs it, and every write queued
//! behind it waits (the p99 of a single client's agent runs was 17× its
//! median, one run in sixty paying for everyone's pages). The writer's
//! connection turns it off; this thread, on a connection of its own, runs a
//! passive checkpoint (it never blocks the writer or a reader) a moment
//! after writes came.
//!
//! A passive checkpoint alone does not keep the WAL short under a steady
//! load: the writer starts the WAL over from its beginning only when every
//! frame in it has been copied, and while the thread copied, the writer
//! appended more. Under a steady load the WAL grew by every page written,
//! without end (257 MB after 4,000 agent runs, one client, thirteen
//! seconds; 3.4 GB in the unit test below, thirty seconds), each append
//! extended the file, and every page lookup went through a longer WAL
//! index. So once a passive checkpoint leaves [`RESTART_AT`] frames in the
//! WAL, the writer itself, between two batches, runs a restarting one: it
//! copies what came since the thread's (a few frames: the thread copied
//! the rest), waits at most [`RESTART_WAIT`] for readers on older frames,
//! and its next commit starts the WAL over, cut back to [`WAL_KEPT_BYTES`]
//! if it had grown past that. The writer, not the thread: a checkpoint
//! that restarts holds the writer's lock, and a writer kept waiting on it
//! sleeps in SQLite's coarse steps (1, 2, 5, 10 ms…): one client's p99
//! went from 4 to 12 ms that way.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use rusqlite::Connection;

use crate::store::error::StoreError;

/// How long after a write the checkpoint runs: writes arriving meanwhile
/// share it (a checkpoint syncs the database file once for all of them).
const GATHER: Duration = Duration::from_millis(200);

/// WAL frames (pages) a passive checkpoint leaves past which the WAL is
/// restarted: 64 MiB of 4 KiB pages. Each restart holds the writer up
/// (4–12 ms measured), and the tail pays more than that accounts for:
/// docs/performance.md, "The WAL starts over", has the figures.
const RESTART_AT: i64 = 16_384;

/// [`RESTART_AT`], lowered by tests.
static RESTART_FRAMES: AtomicI64 = AtomicI64::new(RESTART_AT);

/// Passive checkpoints run one after another before the writer restarts
/// the WAL, at most this many, until one found at most
/// [`CATCH_UP_LEFT`] frames come since the one before.
const CATCH_UP_TRIES: usize = 4;
const CATCH_UP_LEFT: i64 = 256;

/// How long the restarting checkpoint waits for readers on older frames;
/// past it, it gives up until the next time.
const RESTART_WAIT: Duration = Duration::from_millis(20);

/// How long the writer waits for a lock otherwise (another process's
/// reader: the file lock keeps out other writers).
pub(super) const WRITER_WAIT: Duration = Duration::from_secs(10);

/// Bytes of a WAL frame: a page and its 24-byte header (SQLite's default
/// page size, which the store keeps).
const FRAME_BYTES: i64 = 4096 + 24;

/// The size a restarted WAL file is cut back to when it grew past it (a
/// long reader held the restart off): the disk is given back. Four times
/// what the WAL holds when a restart is due ([`RESTART_AT`]): more comes
/// while the thread waits to checkpoint and catches up (under 16
/// connections of agent runs the WAL reached 150 MB, 2.2 times that,
/// before the restart), and a WAL restarted on time must never be cut.
/// It was cut before, at 64 MiB: every restart freed the frames past it
/// (on a file system mounted with `discard` the writer waited in
/// `ftruncate` for the disk to discard them), and the next turn allocated
/// them again, each allocation waiting on the checkpoints' syncs. One
/// client's p99 was 6 ms, then 2.3 ms (docs/performance.md, "Agent
/// runs").
pub(super) const WAL_KEPT_BYTES: i64 = 4 * RESTART_AT * FRAME_BYTES;

/// Told after each batch the writer commits.
pub(super) struct Checkpoints {
    wrote: mpsc::SyncSender<()>,
    /// Set by the thread when the WAL is to be restarted; taken by the
    /// writer.
    restart: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Checkpoints {
    /// Starts the thread; the writer's `connection` stops checkpointing.
    pub(super) fn start(path: &Path, writer: &Connection) -> Result<Self, StoreError> {
        let connection = Connection::open(path)?;
        connection.busy_timeout(WRITER_WAIT)?;
        writer.execute_batch(&format!(
            "PRAGMA wal_autocheckpoint = 0; PRAGMA journal_size_limit = {WAL_KEPT_BYTES};"
        ))?;
        let (wrote, writes) = mpsc::sync_channel(1);
        let restart = Arc::new(AtomicBool::new(false));
        let due = restart.clone();
        let thread = std::thread::Builder::new()
            .name("agenthost-checkpoint".into())
            .spawn(move || checkpoint_loop(&connection, &writes, &due))
            .map_err(|e| StoreError::Write(format!("cannot start the WAL checkpointer: {e}")))?;
        Ok(Self {
            wrote,
            restart,
            thread,
        })
    }

    /// A batch was committed: a checkpoint follows shortly.
    pub(super) fn wrote(&self) {
        // Full: one is already due, and covers this batch too.
        let _ = self.wrote.try_send(());
    }

    /// Whether the last checkpoint left the WAL long, to be restarted.
    pub(super) fn restart_due(&self) -> bool {
        self.restart.load(Ordering::Relaxed)
    }

    /// Restarts the WAL (on the `writer`) if the last checkpoint asked.
    pub(super) fn restart_if_due(&self, writer: &Connection) {
        if !self.restart.swap(false, Ordering::Relaxed) {
            return;
        }
        // Busy (a reader held on past the wait) is no failure: the thread
        // asks again after its next checkpoint.
        let restarted = writer
            .busy_timeout(RESTART_WAIT)
            .and_then(|()| checkpoint(writer, "RESTART"));
        let waits = writer.busy_timeout(WRITER_WAIT);
        if let Err(e) = restarted.and(waits) {
            tracing::warn!(error = %e, "could not restart the WAL; tried again after the next checkpoint");
        }
    }

    /// Ends the thread, after the checkpoint due (if one is): the store is
    /// closing, and nothing of it may touch the file after.
    pub(super) fn stop(self) {
        drop(self.wrote);
        let _ = self.thread.join();
    }
}

fn checkpoint_loop(connection: &Connection, writes: &mpsc::Receiver<()>, restart: &AtomicBool) {
    let mut failing = false;
    while writes.recv().is_ok() {
        std::thread::sleep(GATHER);
        while writes.try_recv().is_ok() {}
        // PASSIVE: copies what no reader still needs; the rest waits for
        // the next one. A failure (a full disk) leaves the WAL longer, and
        // the next write tries again; said once, not at every write.
        let checkpointed = checkpoint(connection, "PASSIVE").and_then(|frames| {
            if frames < RESTART_FRAMES.load(Ordering::Relaxed) {
                return Ok(frames);
            }
            // The writer's restart copies what came during the last passive
            // checkpoint, and the writer waits for it: passive ones again,
            // each copying what came during the one before, until that is
            // little.
            let mut last = frames;
            for _ in 0..CATCH_UP_TRIES {
                let now = checkpoint(connection, "PASSIVE")?;
                let came = now - last;
                last = now;
                if came <= CATCH_UP_LEFT {
                    break;
                }
            }
            restart.store(true, Ordering::Relaxed);
            Ok(last)
        });
        match checkpointed {
            Ok(_) if failing => {
                failing = false;
                tracing::info!("WAL checkpoints succeed again");
            }
            Ok(_) => {}
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "WAL checkpoint failed; the WAL grows until one succeeds (tried after each write)");
            }
            Err(_) => {}
        }
    }
}

/// Runs a checkpoint in `mode`; the frames the WAL holds.
fn checkpoint(connection: &Connection, mode: &str) -> rusqlite::Result<i64> {
    // (busy, frames in the WAL, frames copied); -1 frames when not in WAL mode.
    connection.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |row| {
        row.get(1)
    })
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

    /// How many times the WAL started over: the checkpoint sequence number
    /// in its header (bytes 12..16), which each restart counts up.
    fn restarts(wal: &std::path::Path) -> u32 {
        std::fs::read(wal)
            .ok()
            .and_then(|bytes| bytes.get(12..16).map(|b| [b[0], b[1], b[2], b[3]]))
            .map_or(0, u32::from_be_bytes)
    }

    /// Under writes that never pause the WAL still starts over, again and
    /// again, and its file stays within what a restart keeps, never past
    /// it (where a WAL cut back at each restart gave its blocks back and
    /// took them again). With passive checkpoints alone it never started
    /// over: the writer appended while they copied, so the WAL was never
    /// all copied when a commit began.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn under_writes_that_never_pause_the_wal_starts_over_and_stays_short(
    ) -> Result<(), Box<dyn std::error::Error>> {
        super::RESTART_FRAMES.store(1_000, std::sync::atomic::Ordering::Relaxed);
        let (dir, store) = sqlite().await?;
        let wal = dir.path().join("t.db-wal");
        store.start(new("first")).await?.ok_or("not created")?;
        let first = restarts(&wal);
        let store = std::sync::Arc::new(store);
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut writers = Vec::new();
        for w in 0..8 {
            let (store, stop) = (store.clone(), stop.clone());
            writers.push(tokio::spawn(async move {
                let mut i = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    store.start(new(&format!("w{w}-{i}"))).await?;
                    i += 1;
                }
                Ok::<_, crate::store::StoreError>(i)
            }));
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut longest = 0;
        while restarts(&wal) < first + 3 && std::time::Instant::now() < deadline {
            longest = longest.max(std::fs::metadata(&wal)?.len());
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut written = 0;
        for writer in writers {
            written += writer.await??;
        }
        let (after, size) = (restarts(&wal), std::fs::metadata(&wal)?.len());
        assert!(
            after >= first + 3,
            "{written} instances written without a pause: the WAL started over {} times in 30 s and holds {size} bytes",
            after - first
        );
        let kept = super::WAL_KEPT_BYTES.unsigned_abs();
        assert!(
            longest.max(size) <= kept,
            "the WAL held up to {} bytes under {written} instances: past the {kept} kept, it was cut at each restart",
            longest.max(size)
        );
        Ok(())
    }
}
