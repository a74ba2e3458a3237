//! Orchestration instances: their rows, journals, inboxes and tasks.

use serde::Serialize;
use sqlx::{QueryBuilder, Row, Sqlite, Transaction};

use super::{now_ms, Store, StoreError};
use crate::durable::journal::{Call, Entry, Event};

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
const ACTIVE: &str = "('Pending', 'Running', 'ContinuedAsNew')";
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

/// A task the worker must run.
#[derive(Debug, Clone)]
pub struct TaskRow {
    pub instance_id: String,
    /// The orchestration of the instance, whose component runs its activities.
    pub orchestration: String,
    pub task: u32,
    pub call: Call,
    pub attempt: u32,
}

/// Everything one episode of an instance decided, committed at once.
pub struct EpisodeCommit<'a> {
    pub instance_id: &'a str,
    pub orchestration: &'a str,
    /// Inbox rows taken into the journal.
    pub consumed: &'a [i64],
    /// Journal rows to append (events first, then the episode's new calls).
    pub entries: Vec<Entry>,
    /// The first task number of the episode's new calls.
    pub first_task: u32,
    pub status: RuntimeStatus,
    pub output: Option<String>,
    pub custom_status: Option<String>,
    /// Set by continue-as-new: the new input; the journal starts over.
    pub restart_with: Option<(String, Vec<Event>)>,
    /// The component digest the children of this episode run on.
    pub component_digest: &'a str,
}

/// What a committed episode created that needs running or waking.
#[derive(Debug, Default)]
pub struct Committed {
    pub applied: bool,
    pub children: Vec<String>,
    pub parent: Option<String>,
    /// Tasks scheduled by the episode, due now.
    pub tasks: Vec<TaskRow>,
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

fn to_json<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

fn from_json<T: serde::de::DeserializeOwned>(text: &str, what: &str) -> Result<T, StoreError> {
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

    pub async fn journal(&self, id: &str) -> Result<Vec<(Entry, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT entry, recorded_at FROM journal WHERE instance_id = ? ORDER BY seq",
        )
        .bind(id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    from_json(&r.try_get::<String, _>("entry")?, "journal entry")?,
                    r.try_get("recorded_at")?,
                ))
            })
            .collect()
    }

    /// Inbox rows visible now, oldest first.
    pub async fn visible_inbox(&self, id: &str, now: i64) -> Result<Vec<(i64, Event)>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, event FROM inbox WHERE instance_id = ? AND visible_at <= ? ORDER BY id",
        )
        .bind(id)
        .bind(now)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("id")?,
                    from_json(&r.try_get::<String, _>("event")?, "inbox event")?,
                ))
            })
            .collect()
    }

    /// Commits an episode if the instance may still run; nothing is written otherwise.
    pub async fn commit_episode(&self, commit: EpisodeCommit<'_>) -> Result<Committed, StoreError> {
        let now = now_ms();
        let id = commit.instance_id;
        let mut tx = self.begin_write().await?;
        let updated = sqlx::query(&format!(
            "UPDATE instances SET status = ?, output = COALESCE(?, output), custom_status = COALESCE(?, custom_status), \
             updated_at = ? WHERE id = ? AND status IN {ACTIVE}"
        ))
        .bind(commit.status.as_str())
        .bind(&commit.output)
        .bind(&commit.custom_status)
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() == 0 {
            return Ok(Committed::default());
        }
        let mut committed = Committed {
            applied: true,
            ..Committed::default()
        };
        if !commit.consumed.is_empty() {
            let mut delete = QueryBuilder::<Sqlite>::new("DELETE FROM inbox WHERE id IN (");
            let mut ids = delete.separated(", ");
            for inbox_id in commit.consumed {
                ids.push_bind(*inbox_id);
            }
            delete.push(")").build().execute(&mut *tx).await?;
        }
        let last_seq: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(seq), 0) FROM journal WHERE instance_id = ?")
                .bind(id)
                .fetch_one(&mut *tx)
                .await?;
        // One statement for all journal rows and one for all new tasks: each
        // statement is a round trip to the connection's thread.
        let mut journal_rows = Vec::with_capacity(commit.entries.len());
        for (offset, entry) in commit.entries.iter().enumerate() {
            journal_rows.push((last_seq + 1 + offset as i64, to_json(entry)?));
        }
        if !journal_rows.is_empty() {
            QueryBuilder::<Sqlite>::new(
                "INSERT INTO journal (instance_id, seq, entry, recorded_at) ",
            )
            .push_values(&journal_rows, |mut row, (seq, entry)| {
                row.push_bind(id)
                    .push_bind(*seq)
                    .push_bind(entry.as_str())
                    .push_bind(now);
            })
            .build()
            .execute(&mut *tx)
            .await?;
        }
        let mut task = commit.first_task;
        for entry in &commit.entries {
            let Entry::Call(call) = entry else { continue };
            match call {
                Call::CallAgent { .. } | Call::CallActivity { .. } => {
                    committed.tasks.push(TaskRow {
                        instance_id: id.to_string(),
                        orchestration: commit.orchestration.to_string(),
                        task,
                        call: call.clone(),
                        attempt: 0,
                    });
                }
                Call::CallOrchestration { name, input } => {
                    let child = format!("{id}:{task}");
                    let new = NewInstance {
                        id: &child,
                        name,
                        input,
                        component_digest: commit.component_digest,
                        parent: Some((id, task)),
                    };
                    if !insert_instance(&mut tx, &new).await? {
                        push_inbox(
                            &mut tx,
                            id,
                            &Event::TaskFailed {
                                task,
                                error: format!("instance {child} already exists"),
                            },
                            now,
                        )
                        .await?;
                    }
                    committed.children.push(child);
                }
                Call::StartTimer { fire_at } => {
                    let fire_at = i64::try_from(*fire_at).unwrap_or(i64::MAX);
                    push_inbox(&mut tx, id, &Event::TimerFired { task }, fire_at).await?;
                }
                _ => {}
            }
            // Task numbers count every call, as the replay numbers them.
            task += 1;
        }
        if !committed.tasks.is_empty() {
            let mut calls = Vec::with_capacity(committed.tasks.len());
            for row in &committed.tasks {
                calls.push((row.task, to_json(&row.call)?));
            }
            QueryBuilder::<Sqlite>::new(
                "INSERT INTO tasks (instance_id, task, call, attempt, due_at) ",
            )
            .push_values(&calls, |mut row, (task, call)| {
                row.push_bind(id)
                    .push_bind(*task)
                    .push_bind(call.as_str())
                    .push_bind(0)
                    .push_bind(now);
            })
            .build()
            .execute(&mut *tx)
            .await?;
        }
        if let Some((input, carried)) = &commit.restart_with {
            for table in [
                "DELETE FROM journal WHERE instance_id = ?",
                "DELETE FROM tasks WHERE instance_id = ?",
            ] {
                sqlx::query(table).bind(id).execute(&mut *tx).await?;
            }
            // Timers and completions belong to the old execution; raised events stay.
            sqlx::query("DELETE FROM inbox WHERE instance_id = ? AND json_extract(event, '$.event') <> 'event_raised'")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            sqlx::query("UPDATE instances SET input = ?, output = NULL WHERE id = ?")
                .bind(input)
                .bind(id)
                .execute(&mut *tx)
                .await?;
            for event in carried {
                push_inbox(&mut tx, id, event, now).await?;
            }
        }
        if commit.status.is_finished() {
            committed.parent =
                notify_parent(&mut tx, id, commit.status, commit.output.as_deref(), now).await?;
        }
        tx.commit().await?;
        Ok(committed)
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
        let (to, from) = if suspended {
            ("Suspended", ACTIVE)
        } else {
            ("Running", "('Suspended')")
        };
        let mut tx = self.begin_write().await?;
        let updated = sqlx::query(&format!(
            "UPDATE instances SET status = ?, updated_at = ? WHERE id = ? AND status IN {from}"
        ))
        .bind(to)
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

    /// Instances with something to do now: new, restarted, or with visible
    /// inbox rows (and not suspended).
    pub async fn instances_with_work(
        &self,
        now: i64,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(&format!(
            "SELECT id FROM instances WHERE status IN ('Pending', 'ContinuedAsNew') \
             UNION SELECT DISTINCT i.instance_id FROM inbox i JOIN instances s ON s.id = i.instance_id \
             WHERE i.visible_at <= ? AND s.status IN {ACTIVE} LIMIT ?"
        ))
        .bind(now)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(|r| Ok(r.try_get("id")?)).collect()
    }

    /// Tasks due now.
    pub async fn due_tasks(&self, now: i64, limit: usize) -> Result<Vec<TaskRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT t.instance_id, i.name, t.task, t.call, t.attempt FROM tasks t JOIN instances i ON i.id = t.instance_id \
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

async fn insert_instance(
    tx: &mut Transaction<'_, Sqlite>,
    new: &NewInstance<'_>,
) -> Result<bool, StoreError> {
    let existing: Option<String> = sqlx::query_scalar("SELECT status FROM instances WHERE id = ?")
        .bind(new.id)
        .fetch_optional(&mut **tx)
        .await?;
    if let Some(status) = existing {
        if !RuntimeStatus::parse(&status).is_some_and(RuntimeStatus::is_finished) {
            return Ok(false);
        }
        sqlx::query("DELETE FROM instances WHERE id = ?")
            .bind(new.id)
            .execute(&mut **tx)
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
    .execute(&mut **tx)
    .await?;
    Ok(true)
}

async fn push_inbox(
    tx: &mut Transaction<'_, Sqlite>,
    id: &str,
    event: &Event,
    visible_at: i64,
) -> Result<(), StoreError> {
    sqlx::query("INSERT INTO inbox (instance_id, event, visible_at) VALUES (?, ?, ?)")
        .bind(id)
        .bind(to_json(event)?)
        .bind(visible_at)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

async fn delete_history(tx: &mut Transaction<'_, Sqlite>, id: &str) -> Result<(), StoreError> {
    for sql in [
        "DELETE FROM journal WHERE instance_id = ?",
        "DELETE FROM inbox WHERE instance_id = ?",
        "DELETE FROM tasks WHERE instance_id = ?",
    ] {
        sqlx::query(sql).bind(id).execute(&mut **tx).await?;
    }
    Ok(())
}

/// A finished child reports to its parent's inbox; returns the parent's id.
async fn notify_parent(
    tx: &mut Transaction<'_, Sqlite>,
    id: &str,
    status: RuntimeStatus,
    output: Option<&str>,
    now: i64,
) -> Result<Option<String>, StoreError> {
    let row = sqlx::query("SELECT parent_id, parent_task FROM instances WHERE id = ?")
        .bind(id)
        .fetch_optional(&mut **tx)
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

async fn exists_change(tx: &mut Transaction<'_, Sqlite>, id: &str) -> Result<Change, StoreError> {
    let status: Option<String> = sqlx::query_scalar("SELECT status FROM instances WHERE id = ?")
        .bind(id)
        .fetch_optional(&mut **tx)
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
