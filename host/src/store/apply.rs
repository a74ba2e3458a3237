//! Writes the effects of a core decision inside the caller's transaction.
//! The order is the decision's; nothing here chooses anything: where a rule
//! is needed (a sub-orchestration's id already taken), the core decides.

use sqlx::{QueryBuilder, Sqlite, SqliteConnection};

use super::instances::{load, to_json};
use super::{StoreError, TaskRow};
use crate::core::effects::Effect;
use crate::core::instance::{NewInstance, RuntimeStatus};
use crate::core::journal::{Call, Entry, Event};
use crate::core::lifecycle::start;

/// SQLite accepts at most 32,766 bound parameters per statement; rows are
/// written in chunks well under it.
const ROWS_PER_STATEMENT: usize = 500;

/// The instance a decision is about.
#[derive(Debug, Clone)]
pub struct Target {
    pub id: String,
    pub execution: i64,
    /// Its orchestration and component version, which run its tasks.
    pub name: String,
    pub digest: String,
}

/// What the written effects ask the dispatcher to do.
#[derive(Debug, Default)]
pub struct Applied {
    /// Tasks scheduled, due now.
    pub tasks: Vec<TaskRow>,
    /// Instances with something new in their inbox, or just created.
    pub wake: Vec<String>,
}

impl Applied {
    pub fn merge(&mut self, other: Applied) {
        self.tasks.extend(other.tasks);
        self.wake.extend(other.wake);
    }
}

/// Changes to the target's own row, written by one statement.
#[derive(Default)]
struct RowUpdate {
    status: Option<RuntimeStatus>,
    output: Option<String>,
    custom_status: Option<String>,
    events: u64,
    bytes: u64,
    dirty: bool,
}

impl RowUpdate {
    async fn flush(
        &mut self,
        tx: &mut SqliteConnection,
        id: &str,
        now: i64,
    ) -> Result<(), StoreError> {
        if !std::mem::take(&mut self.dirty) {
            return Ok(());
        }
        sqlx::query(
            "UPDATE instances SET status = COALESCE(?, status), output = COALESCE(?, output), \
             custom_status = COALESCE(?, custom_status), history_events = history_events + ?, \
             history_bytes = history_bytes + ?, updated_at = ? WHERE id = ?",
        )
        .bind(self.status.take().map(RuntimeStatus::as_str))
        .bind(self.output.take())
        .bind(self.custom_status.take())
        .bind(i64::try_from(std::mem::take(&mut self.events)).unwrap_or(i64::MAX))
        .bind(i64::try_from(std::mem::take(&mut self.bytes)).unwrap_or(i64::MAX))
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        Ok(())
    }
}

/// `journal_len` is how many rows the target's journal holds (its history
/// count as read in this transaction): new rows are numbered after it.
pub(super) async fn apply(
    tx: &mut SqliteConnection,
    target: &Target,
    journal_len: u64,
    effects: Vec<Effect>,
    now: i64,
) -> Result<Applied, StoreError> {
    let mut applied = Applied::default();
    let mut scheduled: Vec<(u32, Call)> = Vec::new();
    let mut row = RowUpdate::default();
    let mut journal_len = journal_len;
    for effect in effects {
        match effect {
            Effect::ConsumeInbox(rows) => {
                for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                    let mut delete = QueryBuilder::<Sqlite>::new("DELETE FROM inbox WHERE id IN (");
                    let mut ids = delete.separated(", ");
                    for row in chunk {
                        ids.push_bind(*row);
                    }
                    delete.push(")").build().execute(&mut *tx).await?;
                }
            }
            Effect::Append { entries, at } => {
                let bytes = append(tx, &target.id, journal_len, &entries, at).await?;
                journal_len += entries.len() as u64;
                row.events += entries.len() as u64;
                row.bytes += bytes;
                row.dirty = true;
            }
            Effect::ScheduleTask { task, call } => scheduled.push((task, call)),
            Effect::Create(new) => {
                let child = new.parent.is_some();
                match create(tx, new.clone(), now).await? {
                    Ok(()) => applied.wake.push(new.id),
                    Err(()) if child => {
                        // Only a caller that made the same id by hand can
                        // collide with a derived child id: the parent's task fails.
                        if let Some(parent) = &new.parent {
                            let event = Event::TaskFailed {
                                task: parent.task,
                                error: format!("instance {} already exists", new.id),
                            };
                            push_inbox(tx, &parent.id, parent.execution, &event, now).await?;
                            applied.wake.push(parent.id.clone());
                        }
                    }
                    Err(()) => {
                        return Err(StoreError::Write(format!("instance '{}' exists", new.id)))
                    }
                }
            }
            Effect::ArmTimer { task, fire_at } => {
                push_inbox(
                    tx,
                    &target.id,
                    target.execution,
                    &Event::TimerFired { task },
                    fire_at,
                )
                .await?;
            }
            Effect::Deliver {
                instance,
                execution,
                event,
            } => {
                push_inbox(tx, &instance, execution, &event, now).await?;
                applied.wake.push(instance);
            }
            Effect::SetStatus {
                status,
                output,
                custom_status,
            } => {
                row.status = Some(status);
                row.output = output.or(row.output.take());
                row.custom_status = custom_status.or(row.custom_status.take());
                row.dirty = true;
            }
            Effect::NewExecution {
                input,
                digest,
                carried,
            } => {
                row.flush(tx, &target.id, now).await?;
                journal_len = 0;
                let next = new_execution(tx, &target.id).await?;
                for sql in [
                    "DELETE FROM journal WHERE instance_id = ?",
                    "DELETE FROM tasks WHERE instance_id = ?",
                ] {
                    sqlx::query(sql).bind(&target.id).execute(&mut *tx).await?;
                }
                // Events raised after the episode read the inbox move along;
                // timers and results of the old execution do not.
                sqlx::query(
                    "UPDATE inbox SET execution = ? WHERE instance_id = ? AND execution = ? \
                     AND json_extract(event, '$.event') = 'event_raised'",
                )
                .bind(next)
                .bind(&target.id)
                .bind(target.execution)
                .execute(&mut *tx)
                .await?;
                sqlx::query("DELETE FROM inbox WHERE instance_id = ? AND execution <> ?")
                    .bind(&target.id)
                    .bind(next)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "UPDATE instances SET input = ?, output = NULL, execution = ?, history_events = 0, \
                     history_bytes = 0, component_digest = COALESCE(?, component_digest) WHERE id = ?",
                )
                .bind(input)
                .bind(next)
                .bind(digest)
                .bind(&target.id)
                .execute(&mut *tx)
                .await?;
                for event in &carried {
                    push_inbox(tx, &target.id, next, event, now).await?;
                }
                applied.wake.push(target.id.clone());
            }
            Effect::DropPending => {
                for sql in [
                    "DELETE FROM inbox WHERE instance_id = ?",
                    "DELETE FROM tasks WHERE instance_id = ?",
                ] {
                    sqlx::query(sql).bind(&target.id).execute(&mut *tx).await?;
                }
            }
            Effect::NotifyParent { parent, event } => {
                push_inbox(tx, &parent.id, parent.execution, &event, now).await?;
                applied.wake.push(parent.id);
            }
            Effect::FinishTask { task } => {
                sqlx::query(
                    "DELETE FROM tasks WHERE instance_id = ? AND execution = ? AND task = ?",
                )
                .bind(&target.id)
                .bind(target.execution)
                .bind(task)
                .execute(&mut *tx)
                .await?;
            }
            Effect::RetryTask {
                task,
                attempt,
                due_at,
            } => {
                sqlx::query(
                    "UPDATE tasks SET attempt = ?, due_at = ? WHERE instance_id = ? AND execution = ? AND task = ?",
                )
                .bind(attempt)
                .bind(due_at)
                .bind(&target.id)
                .bind(target.execution)
                .bind(task)
                .execute(&mut *tx)
                .await?;
            }
            Effect::Purge => {
                row = RowUpdate::default();
                purge(tx, &target.id).await?
            }
        }
    }
    row.flush(tx, &target.id, now).await?;
    if !scheduled.is_empty() {
        insert_tasks(tx, target, &scheduled, now).await?;
        applied.tasks = scheduled
            .into_iter()
            .map(|(task, call)| TaskRow {
                instance_id: target.id.clone(),
                execution: target.execution,
                orchestration: target.name.clone(),
                component_digest: target.digest.clone(),
                task,
                call,
                attempt: 0,
            })
            .collect();
    }
    Ok(applied)
}

/// Creates `new` unless an unfinished instance holds its id (`Err(())`); a
/// finished one is purged first: its id begins a new execution.
pub(super) async fn create(
    tx: &mut SqliteConnection,
    new: NewInstance,
    now: i64,
) -> Result<Result<(), ()>, StoreError> {
    let existing = load(tx, &new.id).await?.map(|l| l.state);
    let Ok(effects) = start::decide(existing.as_ref(), new) else {
        return Ok(Err(()));
    };
    for effect in effects {
        match effect {
            Effect::Purge => {
                if let Some(old) = &existing {
                    purge(tx, &old.id).await?;
                }
            }
            Effect::Create(new) => insert_instance(tx, &new, now).await?,
            other => {
                return Err(StoreError::Write(format!(
                    "a start decided an unexpected effect: {other:?}"
                )))
            }
        }
    }
    Ok(Ok(()))
}

async fn insert_instance(
    tx: &mut SqliteConnection,
    new: &NewInstance,
    now: i64,
) -> Result<(), StoreError> {
    let execution = new_execution(tx, &new.id).await?;
    sqlx::query(
        "INSERT INTO instances (id, name, status, input, component_digest, parent_id, parent_execution, \
         parent_task, execution, created_at, updated_at) VALUES (?, ?, 'Pending', ?, ?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(&new.id)
    .bind(&new.name)
    .bind(&new.input)
    .bind(&new.digest)
    .bind(new.parent.as_ref().map(|p| p.id.as_str()))
    .bind(new.parent.as_ref().map(|p| p.execution))
    .bind(new.parent.as_ref().map(|p| p.task))
    .bind(execution)
    .bind(now)
    .bind(now)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// A fresh execution number, never handed out before.
async fn new_execution(tx: &mut SqliteConnection, id: &str) -> Result<i64, StoreError> {
    Ok(
        sqlx::query_scalar("INSERT INTO executions (instance_id) VALUES (?) RETURNING id")
            .bind(id)
            .fetch_one(&mut *tx)
            .await?,
    )
}

pub(super) async fn purge(tx: &mut SqliteConnection, id: &str) -> Result<(), StoreError> {
    for sql in [
        "DELETE FROM instances WHERE id = ?",
        "DELETE FROM journal WHERE instance_id = ?",
        "DELETE FROM inbox WHERE instance_id = ?",
        "DELETE FROM tasks WHERE instance_id = ?",
        "DELETE FROM executions WHERE instance_id = ?",
    ] {
        sqlx::query(sql).bind(id).execute(&mut *tx).await?;
    }
    Ok(())
}

pub(super) async fn push_inbox(
    tx: &mut SqliteConnection,
    id: &str,
    execution: i64,
    event: &Event,
    visible_at: i64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO inbox (instance_id, execution, event, visible_at) VALUES (?, ?, ?, ?)",
    )
    .bind(id)
    .bind(execution)
    .bind(to_json(event)?)
    .bind(visible_at)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Writes journal rows numbered after `journal_len`; returns their size.
async fn append(
    tx: &mut SqliteConnection,
    id: &str,
    journal_len: u64,
    entries: &[Entry],
    at: i64,
) -> Result<u64, StoreError> {
    let first = i64::try_from(journal_len)
        .unwrap_or(i64::MAX)
        .saturating_add(1);
    let mut rows = Vec::with_capacity(entries.len());
    let mut bytes: u64 = 0;
    for (offset, entry) in entries.iter().enumerate() {
        bytes += entry.size();
        rows.push((first + offset as i64, to_json(entry)?));
    }
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        QueryBuilder::<Sqlite>::new("INSERT INTO journal (instance_id, seq, entry, recorded_at) ")
            .push_values(chunk, |mut row, (seq, entry)| {
                row.push_bind(id)
                    .push_bind(*seq)
                    .push_bind(entry.as_str())
                    .push_bind(at);
            })
            .build()
            .execute(&mut *tx)
            .await?;
    }
    Ok(bytes)
}

async fn insert_tasks(
    tx: &mut SqliteConnection,
    target: &Target,
    tasks: &[(u32, Call)],
    now: i64,
) -> Result<(), StoreError> {
    let mut rows = Vec::with_capacity(tasks.len());
    for (task, call) in tasks {
        rows.push((*task, to_json(call)?));
    }
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        QueryBuilder::<Sqlite>::new(
            "INSERT INTO tasks (instance_id, execution, task, call, attempt, due_at) ",
        )
        .push_values(chunk, |mut row, (task, call)| {
            row.push_bind(&target.id)
                .push_bind(target.execution)
                .push_bind(*task)
                .push_bind(call.as_str())
                .push_bind(0)
                .push_bind(now);
        })
        .build()
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}
