//! Tasks (agent calls and activities) waiting to run.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::durable_records::{from_json, TaskRow};
use super::error::StoreError;
use super::open::{Kind, Store};
use crate::core::fence;

/// One attempt of a task, by its key (bound in this order: instance,
/// execution, task, attempt).
const ATTEMPT: &str = "instance_id = $1 AND execution = $2 AND task = $3 AND attempt = $4";

impl Store {
    /// Tasks due now that this host should run (on a shared hub: its own
    /// and those no live host owns, which it claims), `limit` of them
    /// besides the `running_here` tasks this host already runs: those stay
    /// due until they end (an agent call waiting for a human's approval,
    /// for hours), and a read of only `limit` rows would find nothing else
    /// behind a thousand of them.
    pub async fn due_tasks(
        &self,
        now: i64,
        limit: usize,
        running_here: usize,
    ) -> Result<Vec<DueTask>, StoreError> {
        if let Some(hub) = self.shared() {
            return self.claim_tasks(hub, now, limit, running_here).await;
        }
        let limit = limit.saturating_add(running_here);
        let rows = sqlx::query(
            "SELECT t.instance_id, t.execution, i.name, i.component_digest, t.task, t.call, t.attempt \
             FROM tasks t JOIN instances i ON i.id = t.instance_id AND i.execution = t.execution \
             WHERE t.due_at <= $1 ORDER BY t.due_at LIMIT $2",
        )
        .bind(now)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(due_from_row).collect()
    }

    /// Whether this attempt of the task is still waiting to run: a task read
    /// by an earlier scheduler pass may have finished since.
    pub async fn task_still_due(&self, row: &TaskRow) -> Result<bool, StoreError> {
        let found: Option<i64> =
            sqlx::query_scalar(&format!("SELECT 1 FROM tasks WHERE {ATTEMPT}"))
                .bind(&row.instance_id)
                .bind(row.execution)
                .bind(i64::from(row.task))
                .bind(i64::from(row.attempt))
                .fetch_optional(self.pool())
                .await?;
        Ok(found.is_some())
    }

    /// Until when (ms, [`super::now_ms`]'s clock) this host may let a
    /// request of the task's activity leave, by the rule of
    /// [`fence::send_by`]; `None` when this attempt is no longer this
    /// host's (another host took it over after this one's lease ran out,
    /// and may have run it and the steps after it). The lease is read
    /// before the owner: the row proves the task was this host's while that
    /// lease ran, and no longer. No deadline on a store no other host
    /// shares.
    pub async fn task_send_by(&self, row: &TaskRow) -> Result<Option<i64>, StoreError> {
        let Some(hub) = self.shared() else {
            return Ok(Some(i64::MAX));
        };
        let (renewed_at, lease_ms) = hub.lease();
        let owner: Option<Option<String>> =
            sqlx::query_scalar(&format!("SELECT owner FROM tasks WHERE {ATTEMPT}"))
                .bind(&row.instance_id)
                .bind(row.execution)
                .bind(i64::from(row.task))
                .bind(i64::from(row.attempt))
                .fetch_optional(self.pool())
                .await?;
        let mine = owner
            .flatten()
            .is_some_and(|owner| Some(owner.as_str()) == hub.owner());
        Ok(mine.then(|| fence::send_by(renewed_at, lease_ms)))
    }

    /// The earliest time after `now` at which a timer fires, a failed
    /// task's next attempt is due or an instance started for later starts. Only those become due later: a new task,
    /// a result or a raised event is due when it is written, and is
    /// dispatched by whoever wrote it (or told by a notification). Written a
    /// moment after the caller read its clock, they would look a
    /// millisecond ahead and keep its scheduler passing every millisecond
    /// while any instance runs. (An entity operation signalled for later
    /// is not counted either: the scheduler's pass, a second apart at
    /// most, finds it once it is due.)
    pub async fn next_due_after(&self, now: i64) -> Result<Option<i64>, StoreError> {
        let next: Option<i64> = sqlx::query_scalar(&next_due(self.kind()))
            .bind(now)
            .fetch_one(self.pool())
            .await?;
        Ok(next)
    }
}

/// [`Store::next_due_after`]'s query (`$1` now) on a store of `kind`.
pub(super) fn next_due(kind: Kind) -> String {
    let timer = match kind {
        Kind::Postgres => "(event::jsonb ->> 'event') = 'timer_fired'",
        Kind::Sqlite => "json_extract(event, '$.event') = 'timer_fired'",
    };
    format!(
        "SELECT MIN(t) FROM (SELECT MIN(visible_at) AS t FROM inbox WHERE visible_at > $1 AND {timer} \
         UNION ALL SELECT MIN(due_at) FROM tasks WHERE due_at > $1 AND attempt > 0 \
         UNION ALL SELECT MIN(start_at) FROM instances WHERE start_at > $1 AND status IN ('Pending', 'ContinuedAsNew')) AS due"
    )
}

/// A due task as read: one to run, or one whose stored call cannot be
/// read. The second is not a reason to fail the whole read (every other
/// instance's tasks would wait behind it, pass after pass, across restarts):
/// the scheduler fails that task alone, and its instance's code sees why.
#[derive(Debug)]
pub enum DueTask {
    Ready(TaskRow),
    Unreadable(UnreadableTask),
}

#[cfg(test)]
impl DueTask {
    pub fn instance_id(&self) -> &str {
        match self {
            Self::Ready(row) => &row.instance_id,
            Self::Unreadable(bad) => &bad.instance_id,
        }
    }

    pub fn task(&self) -> u32 {
        match self {
            Self::Ready(row) => row.task,
            Self::Unreadable(bad) => bad.task,
        }
    }
}

/// A due task whose stored call could not be decoded (written by an older
/// host, or damaged): its key, and why.
#[derive(Debug, Clone)]
pub struct UnreadableTask {
    pub instance_id: String,
    pub execution: i64,
    pub orchestration: String,
    pub task: u32,
    pub attempt: u32,
    pub reason: String,
}

/// A row of `instance_id, execution, name, component_digest, task, call,
/// attempt`. Only a row whose key cannot be read is an error (nothing then
/// names the task to fail); an unreadable call is [`DueTask::Unreadable`].
pub(super) fn due_from_row(r: &AnyRow) -> Result<DueTask, StoreError> {
    let instance_id: String = r.try_get("instance_id")?;
    let execution: i64 = r.try_get("execution")?;
    let orchestration: String = r.try_get("name")?;
    let task = u32::try_from(r.try_get::<i64, _>("task")?)
        .map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let attempt = u32::try_from(r.try_get::<i64, _>("attempt")?).unwrap_or(0);
    let call = r
        .try_get::<String, _>("call")
        .map_err(StoreError::from)
        .and_then(|text| from_json(&text, "task call"));
    let digest = r.try_get::<String, _>("component_digest");
    Ok(match (call, digest) {
        (Ok(call), Ok(component_digest)) => DueTask::Ready(TaskRow {
            instance_id,
            execution,
            orchestration,
            component_digest,
            task,
            call,
            attempt,
        }),
        (Err(e), _) => DueTask::Unreadable(UnreadableTask {
            instance_id,
            execution,
            orchestration,
            task,
            attempt,
            reason: e.to_string(),
        }),
        (_, Err(e)) => DueTask::Unreadable(UnreadableTask {
            instance_id,
            execution,
            orchestration,
            task,
            attempt,
            reason: format!("component digest: {e}"),
        }),
    })
}
