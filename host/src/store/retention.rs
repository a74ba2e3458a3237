//! Retention: finished instances and run records past `--retain` are
//! deleted in bounded batches, so a sweep never holds the store for long and
//! never touches work that is still under way.

use crate::core::instance::RuntimeStatus;

use super::error::StoreError;
use super::instances::InstanceFilter;
use super::open::Store;

/// Run records deleted in one statement at most.
const RUN_BATCH: i64 = 500;

/// What one sweep deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    pub instances: u64,
    pub runs: u64,
}

impl Store {
    /// Deletes the instances that finished (completed, failed, terminated)
    /// and the runs that ended (completed, failed) at or before `cutoff_ms`,
    /// with their journals, tasks and approval decisions. A run waiting for
    /// a decision, or any unfinished instance, is never deleted.
    pub async fn sweep_finished(&self, cutoff_ms: i64) -> Result<Swept, StoreError> {
        let mut swept = Swept::default();
        let filter = InstanceFilter {
            statuses: vec![
                RuntimeStatus::Completed,
                RuntimeStatus::Failed,
                RuntimeStatus::Terminated,
            ],
            updated_to: Some(cutoff_ms),
            ..InstanceFilter::default()
        };
        loop {
            // Pages of one commit each, a few seconds at most per call.
            let purge = self.purge_matching(&filter).await?;
            swept.instances += purge.deleted;
            if !purge.more {
                break;
            }
        }
        loop {
            let deleted = self.delete_ended_runs(cutoff_ms).await?;
            swept.runs += deleted;
            if deleted < RUN_BATCH as u64 {
                break;
            }
        }
        Ok(swept)
    }

    /// One batch of ended runs and their approval rows, in one transaction.
    async fn delete_ended_runs(&self, cutoff_ms: i64) -> Result<u64, StoreError> {
        let mut tx = self.pool().begin().await?;
        let chosen = "SELECT correlation_id FROM runs WHERE status IN ('completed', 'failed') \
                      AND updated_at <= $1 ORDER BY seq LIMIT $2";
        sqlx::query(&format!(
            "DELETE FROM approvals WHERE correlation_id IN ({chosen})"
        ))
        .bind(cutoff_ms)
        .bind(RUN_BATCH)
        .execute(&mut *tx)
        .await?;
        let deleted = sqlx::query(&format!(
            "DELETE FROM runs WHERE correlation_id IN ({chosen})"
        ))
        .bind(cutoff_ms)
        .bind(RUN_BATCH)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        tx.commit().await?;
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::test_fixtures::sqlite;

    #[tokio::test]
    async fn a_sweep_deletes_what_ended_before_the_cutoff_and_nothing_else(
    ) -> Result<(), crate::store::StoreError> {
        let (_dir, store) = sqlite().await?;
        for (id, status, updated) in [
            ("old-done", "completed", 1_000),
            ("old-failed", "failed", 1_000),
            ("old-running", "running", 1_000),
            ("new-done", "completed", 9_000),
        ] {
            sqlx::query(
                "INSERT INTO runs (correlation_id, agent, session_id, message, status, created_at, updated_at) \
                 VALUES ($1, 'writer', 's', 'hi', $2, $3, $3)",
            )
            .bind(id)
            .bind(status)
            .bind(updated)
            .execute(store.pool())
            .await?;
        }
        let swept = store.sweep_finished(5_000).await?;
        assert_eq!((swept.instances, swept.runs), (0, 2));
        for (id, kept) in [
            ("old-done", false),
            ("old-failed", false),
            ("old-running", true),
            ("new-done", true),
        ] {
            assert_eq!(store.run(id).await?.is_some(), kept, "{id}");
        }
        Ok(())
    }
}
