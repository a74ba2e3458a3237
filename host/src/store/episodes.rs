//! An instance's journal and inbox, and committing an episode's decisions.

use sqlx::{QueryBuilder, Row, Sqlite, SqliteConnection};

use super::instances::{
    from_json, insert_instance, notify_parent, push_inbox, to_json, NewInstance, RuntimeStatus,
    ACTIVE,
};
use super::{now_ms, Store, StoreError, TaskRow};
use crate::durable::journal::{Call, Entry, Event};

/// Everything one episode of an instance decided, committed at once.
pub struct EpisodeCommit {
    pub instance_id: String,
    pub orchestration: String,
    /// Inbox rows taken into the journal.
    pub consumed: Vec<i64>,
    /// Journal rows to append (events first, then the episode's new calls).
    pub entries: Vec<Entry>,
    /// The first task number of the episode's new calls.
    pub first_task: u32,
    pub status: RuntimeStatus,
    pub output: Option<String>,
    pub custom_status: Option<String>,
    /// Set by continue-as-new: the new input; the journal starts over.
    pub restart_with: Option<(String, Vec<Event>)>,
    /// The component version the instance runs on.
    pub component_digest: String,
    /// On continue-as-new: the version the next execution runs on (the one
    /// served now), so an eternal orchestration picks up new code.
    pub continue_on: Option<String>,
    /// The version each sub-orchestration started by the episode runs on, by
    /// orchestration name; a name missing here runs on the instance's version.
    pub child_digests: std::collections::HashMap<String, String>,
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

impl Store {
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
    /// Commits an episode if the instance may still run; nothing is written
    /// otherwise. Concurrent commits of many instances share one transaction
    /// (see `group_commit`).
    pub async fn commit_episode(&self, commit: EpisodeCommit) -> Result<Committed, StoreError> {
        self.committer().commit(commit).await
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
}

/// Writes one episode inside the caller's transaction.
pub(super) async fn apply_episode(
    tx: &mut SqliteConnection,
    commit: &EpisodeCommit,
) -> Result<Committed, StoreError> {
    let now = now_ms();
    let id = commit.instance_id.as_str();
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
        for inbox_id in &commit.consumed {
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
        QueryBuilder::<Sqlite>::new("INSERT INTO journal (instance_id, seq, entry, recorded_at) ")
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
                    orchestration: commit.orchestration.clone(),
                    component_digest: commit.component_digest.clone(),
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
                    component_digest: commit
                        .child_digests
                        .get(name.as_str())
                        .unwrap_or(&commit.component_digest),
                    parent: Some((id, task)),
                };
                if !insert_instance(tx, &new).await? {
                    push_inbox(
                        tx,
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
                push_inbox(tx, id, &Event::TimerFired { task }, fire_at).await?;
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
        sqlx::query(
            "UPDATE instances SET input = ?, output = NULL, \
             component_digest = COALESCE(?, component_digest) WHERE id = ?",
        )
        .bind(input)
        .bind(&commit.continue_on)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        for event in carried {
            push_inbox(tx, id, event, now).await?;
        }
    }
    if commit.status.is_finished() {
        // Timers that lost a race and tasks nobody awaits are moot now.
        for sql in [
            "DELETE FROM inbox WHERE instance_id = ?",
            "DELETE FROM tasks WHERE instance_id = ?",
        ] {
            sqlx::query(sql).bind(id).execute(&mut *tx).await?;
        }
        committed.parent =
            notify_parent(tx, id, commit.status, commit.output.as_deref(), now).await?;
    }
    Ok(committed)
}
