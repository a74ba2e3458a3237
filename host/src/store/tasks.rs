//! Tasks (agent calls and activities) waiting to run, and their outcomes.

use sqlx::Row;

use super::instances::{from_json, push_inbox};
use super::{now_ms, Store, StoreError};
use crate::durable::journal::{Call, Event};

/// A task the worker must run.
#[derive(Debug, Clone)]
pub struct TaskRow {
    pub instance_id: String,
    /// The orchestration of the instance, whose component runs its activities.
    pub orchestration: String,
    /// The component version the instance runs on.
    pub component_digest: String,
    pub task: u32,
    pub call: Call,
    pub attempt: u32,
}

impl Store {
    /// Tasks due now.
    pub async fn due_tasks(&self, now: i64, limit: usize) -> Result<Vec<TaskRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT t.instance_id, i.name, i.component_digest, t.task, t.call, t.attempt FROM tasks t JOIN instances i ON i.id = t.instance_id \
             WHERE t.due_at <= ? ORDER BY t.due_at LIMIT ?",
        )
            .bind(now)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|r| {
                Ok(TaskRow {
                    instance_id: r.try_get("instance_id")?,
                    orchestration: r.try_get("name")?,
                    component_digest: r.try_get("component_digest")?,
                    task: u32::try_from(r.try_get::<i64, _>("task")?)
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                    call: from_json(&r.try_get::<String, _>("call")?, "task call")?,
                    attempt: u32::try_from(r.try_get::<i64, _>("attempt")?).unwrap_or(0),
                })
            })
            .collect()
    }

    /// The earliest time after `now` at which a timer fires or a task is due.
    pub async fn next_due_after(&self, now: i64) -> Result<Option<i64>, StoreError> {
        let next: Option<i64> = sqlx::query_scalar(
            "SELECT MIN(t) FROM (SELECT MIN(visible_at) AS t FROM inbox WHERE visible_at > ?1 \
             UNION ALL SELECT MIN(due_at) FROM tasks WHERE due_at > ?1)",
        )
        .bind(now)
        .fetch_one(self.pool())
        .await?;
        Ok(next)
    }

    /// Removes a finished task and delivers its outcome, in one transaction.
    pub async fn complete_task(
        &self,
        instance_id: &str,
        task: u32,
        event: &Event,
    ) -> Result<(), StoreError> {
        let mut tx = self.begin_write().await?;
        let deleted = sqlx::query("DELETE FROM tasks WHERE instance_id = ? AND task = ?")
            .bind(instance_id)
            .bind(task)
            .execute(&mut *tx)
            .await?;
        if deleted.rows_affected() > 0 {
            push_inbox(&mut tx, instance_id, event, now_ms()).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Schedules the next attempt of a failed task.
    pub async fn retry_task(
        &self,
        instance_id: &str,
        task: u32,
        attempt: u32,
        due_at: i64,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE tasks SET attempt = ?, due_at = ? WHERE instance_id = ? AND task = ?")
            .bind(attempt)
            .bind(due_at)
            .bind(instance_id)
            .bind(task)
            .execute(self.pool())
            .await?;
        Ok(())
    }
}
