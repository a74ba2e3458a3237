//! The remote A2A calls of orchestrations (`call-remote-agent`): the
//! message's id is written before it is sent, the remote task's id as soon
//! as the remote host names it, so a call that a crash interrupted goes on by
//! `GetTask` (or sends again with the same message id) instead of starting a
//! second task. Plain SQL on the pool: a few writes in a call's life, never
//! on the hot path; rows are deleted with their instance.

use sqlx::Row;

use super::clock::now_ms;
use super::error::StoreError;
use super::open::Store;

/// What is stored of one remote call (by its correlation id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteCallRow {
    /// The `messageId` the call sends, the same on every send of it.
    pub message_id: String,
    /// The remote task, once the remote host named it: the JSON-RPC
    /// endpoint it lives at and its id.
    pub task: Option<(String, String)>,
    /// Its request for input shows as the instance's custom status.
    pub shown: bool,
}

impl Store {
    /// The call `correlation_id` of `instance_id` as stored; a new one is
    /// stored first with `message_id` (a second writer finds the first's).
    pub async fn remote_call(
        &self,
        correlation_id: &str,
        instance_id: &str,
        message_id: &str,
    ) -> Result<RemoteCallRow, StoreError> {
        sqlx::query(
            "INSERT INTO remote_tasks (correlation_id, instance_id, message_id, created_at) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (correlation_id) DO NOTHING",
        )
        .bind(correlation_id)
        .bind(instance_id)
        .bind(message_id)
        .bind(now_ms())
        .execute(self.pool())
        .await?;
        let row = sqlx::query(
            "SELECT message_id, endpoint, task_id, shown_status FROM remote_tasks \
             WHERE correlation_id = $1",
        )
        .bind(correlation_id)
        .fetch_one(self.pool())
        .await?;
        let endpoint: Option<String> = row.try_get("endpoint")?;
        let task_id: Option<String> = row.try_get("task_id")?;
        let shown: i64 = row.try_get("shown_status")?;
        Ok(RemoteCallRow {
            message_id: row.try_get("message_id")?,
            task: endpoint.zip(task_id),
            shown: shown != 0,
        })
    }

    /// Stores the remote task the call started.
    pub async fn remote_task_started(
        &self,
        correlation_id: &str,
        endpoint: &str,
        task_id: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE remote_tasks SET endpoint = $1, task_id = $2 \
             WHERE correlation_id = $3 AND task_id IS NULL",
        )
        .bind(super::sessions::storable(endpoint))
        .bind(super::sessions::storable(task_id))
        .bind(correlation_id)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    /// Shows `status` (JSON text) as the instance's custom status while the
    /// call's remote task waits for input; the status it replaces is kept
    /// to put back ([`Self::unshow_remote_input`]).
    pub async fn show_remote_input(
        &self,
        correlation_id: &str,
        instance_id: &str,
        status: &str,
    ) -> Result<(), StoreError> {
        let status = super::sessions::storable(status);
        let mut tx = self.pool().begin().await?;
        // Only the first showing keeps what was there: a second would keep
        // this call's own status.
        sqlx::query(
            "UPDATE remote_tasks SET shown_status = 1, \
             status_before = (SELECT custom_status FROM instances WHERE id = $1) \
             WHERE correlation_id = $2 AND shown_status = 0",
        )
        .bind(instance_id)
        .bind(correlation_id)
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE remote_tasks SET status_shown = $1 WHERE correlation_id = $2")
            .bind(&status)
            .bind(correlation_id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("UPDATE instances SET custom_status = $1, updated_at = $2 WHERE id = $3")
            .bind(&status)
            .bind(now_ms())
            .bind(instance_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Puts back the custom status the instance had before the call's
    /// remote task asked for input, unless the code (another branch of it)
    /// set a status of its own meanwhile: that one stays.
    pub async fn unshow_remote_input(
        &self,
        correlation_id: &str,
        instance_id: &str,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool().begin().await?;
        sqlx::query(
            "UPDATE instances SET \
             custom_status = (SELECT status_before FROM remote_tasks WHERE correlation_id = $1), \
             updated_at = $2 \
             WHERE id = $3 AND custom_status = \
             (SELECT status_shown FROM remote_tasks WHERE correlation_id = $4 AND shown_status = 1)",
        )
        .bind(correlation_id)
        .bind(now_ms())
        .bind(instance_id)
        .bind(correlation_id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE remote_tasks SET shown_status = 0, status_shown = NULL, status_before = NULL \
             WHERE correlation_id = $1",
        )
        .bind(correlation_id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }
}
