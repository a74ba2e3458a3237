//! Orchestration instances: their rows, journals, inboxes and tasks.

use serde::Serialize;
use sqlx::{Row, Sqlite, SqliteConnection};

use super::{now_ms, Store, StoreError};
use crate::durable::journal::Event;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RuntimeStatus {
    Pending,
    Running,
    Suspended,
    Completed,
    Failed,
    Terminated,
    ContinuedAsNew,
}

impl RuntimeStatus {
    pub const ALL: [RuntimeStatus; 7] = [
        Self::Pending,
        Self::Running,
        Self::Suspended,
        Self::Completed,
        Self::Failed,
        Self::Terminated,
        Self::ContinuedAsNew,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Suspended => "Suspended",
            Self::Completed => "Completed",
            Self::Failed => "Failed",
            Self::Terminated => "Terminated",
            Self::ContinuedAsNew => "ContinuedAsNew",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|x| x.as_str().eq_ignore_ascii_case(s.trim()))
    }

    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Terminated)
    }
}

/// Statuses in which the code may run.
pub(super) const ACTIVE: &str = "('Pending', 'Running', 'ContinuedAsNew')";
const FINISHED: &str = "('Completed', 'Failed', 'Terminated')";

#[derive(Debug, Clone, Serialize)]
pub struct InstanceRecord {
    pub id: String,
    pub name: String,
    pub status: RuntimeStatus,
    pub input: String,
    pub output: Option<String>,
    pub custom_status: Option<String>,
    pub component_digest: String,
    pub parent: Option<(String, u32)>,
    pub created_at: i64,
    pub updated_at: i64,
}

pub struct NewInstance<'a> {
    pub id: &'a str,
    pub name: &'a str,
    pub input: &'a str,
    pub component_digest: &'a str,
    pub parent: Option<(&'a str, u32)>,
}

/// Filters of list and purge requests.
#[derive(Debug, Clone, Default)]
pub struct InstanceFilter {
    pub statuses: Vec<RuntimeStatus>,
    pub created_from: Option<i64>,
    pub created_to: Option<i64>,
    pub id_prefix: Option<String>,
}

/// The outcome of an operation on an instance that may not exist or be over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Done,
    NotFound,
    Finished,
    /// The instance is not in a state the change applies to (e.g. resume of a
    /// running instance).
    NotApplicable,
}

fn instance_from_row(row: &sqlx::sqlite::SqliteRow) -> Result<InstanceRecord, StoreError> {
    let status: String = row.try_get("status")?;
    let parent_id: Option<String> = row.try_get("parent_id")?;
    let parent_task: Option<i64> = row.try_get("parent_task")?;
    Ok(InstanceRecord {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        status: RuntimeStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("instance status '{status}'")))?,
        input: row.try_get("input")?,
        output: row.try_get("output")?,
        custom_status: row.try_get("custom_status")?,
        component_digest: row.try_get("component_digest")?,
        parent: parent_id.zip(parent_task.and_then(|t| u32::try_from(t).ok())),
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

pub(super) fn to_json<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

pub(super) fn from_json<T: serde::de::DeserializeOwned>(
    text: &str,
    what: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

const INSTANCE_COLUMNS: &str =
    "id, name, status, input, output, custom_status, component_digest, parent_id, parent_task, created_at, updated_at";

impl Store {
    /// Creates an instance. `Ok(false)` when one with that id exists and is not
    /// finished; a finished one is replaced (its history purged).
    pub async fn create_instance(&self, new: &NewInstance<'_>) -> Result<bool, StoreError> {
        let mut tx = self.begin_write().await?;
        let created = insert_instance(&mut tx, new).await?;
        tx.commit().await?;
        Ok(created)
    }

    pub async fn instance(&self, id: &str) -> Result<Option<InstanceRecord>, StoreError> {
        let sql = format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE id = ?");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.map(|r| instance_from_row(&r)).transpose()
    }

    /// Instances matching `filter`, oldest first, after the continuation
    /// token (`created_at:id` of the last one returned before).
    pub async fn list_instances(
        &self,
        filter: &InstanceFilter,
        top: usize,
        after: Option<(i64, String)>,
    ) -> Result<Vec<InstanceRecord>, StoreError> {
        let (clause, binds) = filter_clause(filter);
        let mut sql = format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE {clause}");
        if after.is_some() {
            sql.push_str(" AND (created_at > ? OR (created_at = ? AND id > ?))");
        }
        sql.push_str(" ORDER BY created_at, id LIMIT ?");
        let mut query = sqlx::query(&sql);
        for bind in &binds {
            query = bind.apply(query);
        }
        if let Some((created, id)) = &after {
            query = query.bind(*created).bind(*created).bind(id.clone());
        }
        let rows = query
            .bind(i64::try_from(top).unwrap_or(i64::MAX))
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(instance_from_row).collect()
    }

    /// Queues an external event. `Change::Finished` for an instance that is over.
    pub async fn raise_event(
        &self,
        id: &str,
        name: &str,
        payload: &str,
    ) -> Result<Change, StoreError> {
        let event = to_json(&Event::EventRaised {
            name: name.to_string(),
            payload: payload.to_string(),
        })?;
        let mut tx = self.begin_write().await?;
        let inserted = sqlx::query(&format!(
            "INSERT INTO inbox (instance_id, event, visible_at) SELECT id, ?, ? FROM instances \
             WHERE id = ? AND status NOT IN {FINISHED}"
        ))
        .bind(event)
        .bind(now_ms())
        .bind(id)
        .execute(&mut *tx)
        .await?;
        let change = if inserted.rows_affected() > 0 {
            Change::Done
        } else {
            exists_change(&mut tx, id).await?
        };
        tx.commit().await?;
        Ok(change)
    }

    /// Suspend (Running/Pending → Suspended) or resume (Suspended → Running).
    pub async fn set_suspended(&self, id: &str, suspended: bool) -> Result<Change, StoreError> {
        // A resumed instance that never ran (or just continued as new) has an
        // empty journal: it goes back to Pending so its first episode runs.
        let (to, from) = if suspended {
            ("'Suspended'", ACTIVE)
        } else {
            (
                "CASE WHEN EXISTS (SELECT 1 FROM journal WHERE instance_id = instances.id) THEN 'Running' ELSE 'Pending' END",
                "('Suspended')",
            )
        };
        let mut tx = self.begin_write().await?;
        let updated = sqlx::query(&format!(
            "UPDATE instances SET status = {to}, updated_at = ? WHERE id = ? AND status IN {from}"
        ))
        .bind(now_ms())
        .bind(id)
        .execute(&mut *tx)
        .await?;
        let change = if updated.rows_affected() > 0 {
            Change::Done
        } else {
            exists_change(&mut tx, id).await?
        };
        tx.commit().await?;
        Ok(change)
    }

    /// Ends an instance that is not over; its pending tasks and timers are dropped.
    pub async fn terminate(
        &self,
        id: &str,
        reason: &str,
    ) -> Result<(Change, Option<String>), StoreError> {
        let now = now_ms();
        let output = to_json(&reason)?;
        let mut tx = self.begin_write().await?;
        let updated = sqlx::query(&format!(
            "UPDATE instances SET status = 'Terminated', output = ?, updated_at = ? WHERE id = ? AND status NOT IN {FINISHED}"
        ))
        .bind(&output)
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() == 0 {
            let change = exists_change(&mut tx, id).await?;
            tx.commit().await?;
            return Ok((change, None));
        }
        for sql in [
            "DELETE FROM tasks WHERE instance_id = ?",
            "DELETE FROM inbox WHERE instance_id = ?",
        ] {
            sqlx::query(sql).bind(id).execute(&mut *tx).await?;
        }
        let parent =
            notify_parent(&mut tx, id, RuntimeStatus::Terminated, Some(&output), now).await?;
        tx.commit().await?;
        Ok((Change::Done, parent))
    }

    /// Deletes a finished instance and its history.
    pub async fn purge(&self, id: &str) -> Result<Change, StoreError> {
        let mut tx = self.begin_write().await?;
        let deleted = sqlx::query(&format!(
            "DELETE FROM instances WHERE id = ? AND status IN {FINISHED}"
        ))
        .bind(id)
        .execute(&mut *tx)
        .await?;
        let change = if deleted.rows_affected() > 0 {
            delete_history(&mut tx, id).await?;
            Change::Done
        } else {
            match exists_change(&mut tx, id).await? {
                Change::NotFound => Change::NotFound,
                _ => Change::NotApplicable,
            }
        };
        tx.commit().await?;
        Ok(change)
    }

    /// Deletes every finished instance matching `filter`; returns how many.
    pub async fn purge_matching(&self, filter: &InstanceFilter) -> Result<u64, StoreError> {
        let (clause, binds) = filter_clause(filter);
        let sql = format!("SELECT id FROM instances WHERE {clause} AND status IN {FINISHED}");
        let mut query = sqlx::query(&sql);
        for bind in &binds {
            query = bind.apply(query);
        }
        let ids: Vec<String> = query
            .fetch_all(self.pool())
            .await?
            .iter()
            .map(|r| r.try_get("id"))
            .collect::<Result<_, _>>()?;
        let mut tx = self.begin_write().await?;
        for id in &ids {
            sqlx::query("DELETE FROM instances WHERE id = ?")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            delete_history(&mut tx, id).await?;
        }
        tx.commit().await?;
        Ok(ids.len() as u64)
    }
}

pub(super) async fn insert_instance(
    tx: &mut SqliteConnection,
    new: &NewInstance<'_>,
) -> Result<bool, StoreError> {
    let existing: Option<String> = sqlx::query_scalar("SELECT status FROM instances WHERE id = ?")
        .bind(new.id)
        .fetch_optional(&mut *tx)
        .await?;
    if let Some(status) = existing {
        if !RuntimeStatus::parse(&status).is_some_and(RuntimeStatus::is_finished) {
            return Ok(false);
        }
        sqlx::query("DELETE FROM instances WHERE id = ?")
            .bind(new.id)
            .execute(&mut *tx)
            .await?;
        delete_history(tx, new.id).await?;
    }
    let now = now_ms();
    sqlx::query(
        "INSERT INTO instances (id, name, status, input, component_digest, parent_id, parent_task, created_at, updated_at) \
         VALUES (?, ?, 'Pending', ?, ?, ?, ?, ?, ?)",
    )
    .bind(new.id)
    .bind(new.name)
    .bind(new.input)
    .bind(new.component_digest)
    .bind(new.parent.map(|p| p.0))
    .bind(new.parent.map(|p| p.1))
    .bind(now)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    Ok(true)
}

pub(super) async fn push_inbox(
    tx: &mut SqliteConnection,
    id: &str,
    event: &Event,
    visible_at: i64,
) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO inbox (instance_id, event, visible_at) VALUES (?, ?, ?)")
        .bind(id)
        .bind(to_json(event)?)
        .bind(visible_at)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

pub(super) async fn delete_history(tx: &mut SqliteConnection, id: &str) -> Result<(), StoreError> {
    for sql in [
        "DELETE FROM journal WHERE instance_id = ?",
        "DELETE FROM inbox WHERE instance_id = ?",
        "DELETE FROM tasks WHERE instance_id = ?",
    ] {
        sqlx::query(sql).bind(id).execute(&mut *tx).await?;
    }
    Ok(())
}

/// A finished child reports to its parent's inbox; returns the parent's id.
pub(super) async fn notify_parent(
    tx: &mut SqliteConnection,
    id: &str,
    status: RuntimeStatus,
    output: Option<&str>,
    now: i64,
) -> Result<Option<String>, StoreError> {
    let row = sqlx::query("SELECT parent_id, parent_task FROM instances WHERE id = ?")
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    let Some(row) = row else { return Ok(None) };
    let (Some(parent), Some(task)) = (
        row.try_get::<Option<String>, _>("parent_id")?,
        row.try_get::<Option<i64>, _>("parent_task")?,
    ) else {
        return Ok(None);
    };
    let task = u32::try_from(task).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    let output = output.unwrap_or("null").to_string();
    let event = if status == RuntimeStatus::Completed {
        Event::TaskCompleted {
            task,
            result: output,
        }
    } else {
        Event::TaskFailed {
            task,
            error: format!(
                "sub-orchestration {id} {}: {output}",
                status.as_str().to_lowercase()
            ),
        }
    };
    push_inbox(tx, &parent, &event, now).await?;
    Ok(Some(parent))
}

async fn exists_change(tx: &mut SqliteConnection, id: &str) -> Result<Change, StoreError> {
    let status: Option<String> = sqlx::query_scalar("SELECT status FROM instances WHERE id = ?")
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
    Ok(match status.as_deref().and_then(RuntimeStatus::parse) {
        None => Change::NotFound,
        Some(s) if s.is_finished() => Change::Finished,
        Some(_) => Change::NotApplicable,
    })
}

/// A bound parameter of a filter clause.
enum Bind {
    Text(String),
    Int(i64),
}

impl Bind {
    fn apply<'q>(
        &self,
        query: sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>,
    ) -> sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>> {
        match self {
            Bind::Text(s) => query.bind(s.clone()),
            Bind::Int(i) => query.bind(*i),
        }
    }
}

fn filter_clause(filter: &InstanceFilter) -> (String, Vec<Bind>) {
    let mut clauses = vec!["1 = 1".to_string()];
    let mut binds = Vec::new();
    if !filter.statuses.is_empty() {
        let marks = vec!["?"; filter.statuses.len()].join(", ");
        clauses.push(format!("status IN ({marks})"));
        binds.extend(
            filter
                .statuses
                .iter()
                .map(|s| Bind::Text(s.as_str().to_string())),
        );
    }
    if let Some(from) = filter.created_from {
        clauses.push("created_at >= ?".into());
        binds.push(Bind::Int(from));
    }
    if let Some(to) = filter.created_to {
        clauses.push("created_at <= ?".into());
        binds.push(Bind::Int(to));
    }
    if let Some(prefix) = &filter.id_prefix {
        clauses.push("substr(id, 1, ?) = ?".into());
        binds.push(Bind::Int(i64::try_from(prefix.len()).unwrap_or(i64::MAX)));
        binds.push(Bind::Text(prefix.clone()));
    }
    (clauses.join(" AND "), binds)
}

#[cfg(test)]
mod tests {
    use crate::store::{Change, NewInstance, RuntimeStatus, Store, StoreError};

    #[tokio::test]
    async fn an_instance_suspended_before_its_first_episode_resumes_as_pending(
    ) -> Result<(), StoreError> {
        let dir = tempfile::tempdir().map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let store = Store::open(&format!("sqlite://{}", dir.path().join("t.db").display())).await?;
        let new = NewInstance {
            id: "a",
            name: "o",
            input: "null",
            component_digest: "d",
            parent: None,
        };
        store.create_instance(&new).await?;
        assert_eq!(store.set_suspended("a", true).await?, Change::Done);
        assert_eq!(
            store.set_suspended("a", true).await?,
            Change::NotApplicable,
            "already suspended"
        );
        assert_eq!(store.set_suspended("a", false).await?, Change::Done);
        let status = store.instance("a").await?.map(|i| i.status);
        assert_eq!(
            status,
            Some(RuntimeStatus::Pending),
            "it never ran: its first episode must still run"
        );
        assert!(store
            .instances_with_work(crate::store::now_ms(), 10)
            .await?
            .contains(&"a".to_string()));
        Ok(())
    }
}
