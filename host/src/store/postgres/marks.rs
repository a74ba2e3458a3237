//! A batch's mark on PostgreSQL, and what settles a batch in doubt. Every
//! batch writes its id (`commits`, with what its statement answered) in the
//! same statement or transaction as its rows, so that when a COMMIT's answer
//! is lost the writer can ask the database whether that id is there; and
//! before it asks, it ends the server process that had the batch, so that
//! nothing of it still on its way can commit after the answer.

use std::time::Duration;

use sqlx::{Connection, PgConnection};

use crate::store::error::StoreError;

/// Batch ids older than this are pruned (an ambiguous commit is resolved
/// within seconds).
const KEEP_BATCH_IDS_MS: i64 = 600_000;

/// A server process, named by its id and its start: an id alone may be
/// another process's by the time it is used (ids are reused), and ending
/// that one would cut someone else's session, or fail for want of the
/// right and stop the writer asking.
#[derive(Debug, Clone)]
pub(super) struct Backend {
    pub(super) pid: i32,
    started: String,
}

impl Backend {
    /// The server process at the other end of `connection`.
    pub(super) async fn of(connection: &mut PgConnection) -> Result<Self, StoreError> {
        let (pid, started): (i32, String) = sqlx::query_as(
            "SELECT pid, backend_start::TEXT FROM pg_stat_activity WHERE pid = pg_backend_pid()",
        )
        .fetch_one(connection)
        .await?;
        Ok(Self { pid, started })
    }

    /// Ends this server process (the other end of a connection given up
    /// on), from `connection`, and waits until it has exited: what it
    /// committed is then all it will ever commit. One that is gone already
    /// is left alone, and so is a later process that was given its id.
    pub(super) async fn end(&self, connection: &mut PgConnection) -> Result<(), StoreError> {
        sqlx::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE pid = $1 AND backend_start::TEXT = $2",
        )
        .bind(self.pid)
        .bind(&self.started)
        .execute(&mut *connection)
        .await?;
        let mut pause = Duration::from_millis(5);
        loop {
            let alive: Option<i32> = sqlx::query_scalar(
                "SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND backend_start::TEXT = $2",
            )
            .bind(self.pid)
            .bind(&self.started)
            .fetch_optional(&mut *connection)
            .await?;
            if alive.is_none() {
                return Ok(());
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }
}

/// Whether `batch` committed: `Some` with what its statement answered if
/// it did, `None` if not. Not a plain read: the server may still be
/// finishing that COMMIT, and a read would not see its mark yet. Inserting
/// the same id waits for the transaction that holds it to end, then
/// conflicts if it committed. Rolled back either way.
pub(super) async fn committed_answers(
    connection: &mut PgConnection,
    batch: &str,
) -> Result<Option<Option<String>>, StoreError> {
    let mut tx = connection.begin().await?;
    let inserted =
        sqlx::query("INSERT INTO commits (id, at) VALUES ($1, 0) ON CONFLICT (id) DO NOTHING")
            .bind(batch)
            .execute(&mut *tx)
            .await?
            .rows_affected();
    let answers: Option<Option<String>> = match inserted {
        0 => {
            sqlx::query_scalar("SELECT answers FROM commits WHERE id = $1")
                .bind(batch)
                .fetch_optional(&mut *tx)
                .await?
        }
        _ => None,
    };
    tx.rollback().await?;
    Ok((inserted == 0).then(|| answers.flatten()))
}

/// Prunes the ids of batches old enough that none is still in doubt.
pub(super) async fn prune_marks(tx: &mut PgConnection, now: i64) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM commits WHERE at < $1")
        .bind(now - KEEP_BATCH_IDS_MS)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Writes the batch's id in its transaction.
pub(super) async fn mark(tx: &mut PgConnection, batch: &str, now: i64) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO commits (id, at) VALUES ($1, $2)")
        .bind(batch)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    Ok(())
}
