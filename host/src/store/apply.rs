//! Writes the effects of a core decision inside the caller's transaction.
//! The order is the decision's; nothing here chooses anything: where a rule
//! is needed (a sub-orchestration's id already taken), the core decides.

use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Connection};

use super::episodes::InboxRow;
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
    /// Inbox rows written, by instance: the committer hands them to the
    /// hot instances once committed, then empties this.
    pub posted: Vec<(String, InboxRow)>,
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
    fn flush(&mut self, tx: &Connection, id: &str, now: i64) -> Result<(), StoreError> {
        if !std::mem::take(&mut self.dirty) {
            return Ok(());
        }
        tx.prepare_cached(
            "UPDATE instances SET status = COALESCE(?, status), output = COALESCE(?, output), \
             custom_status = COALESCE(?, custom_status), history_events = history_events + ?, \
             history_bytes = history_bytes + ?, updated_at = ? WHERE id = ?",
        )?
        .execute(params![
            self.status.take().map(RuntimeStatus::as_str),
            self.output.take(),
            self.custom_status.take(),
            i64::try_from(std::mem::take(&mut self.events)).unwrap_or(i64::MAX),
            i64::try_from(std::mem::take(&mut self.bytes)).unwrap_or(i64::MAX),
            now,
            id,
        ])?;
        Ok(())
    }
}

/// `journal_len` is how many rows the target's journal holds (its history
/// count as read in this transaction): new rows are numbered after it.
pub(super) fn apply(
    tx: &Connection,
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
                    let sql = format!("DELETE FROM inbox WHERE id IN ({})", marks(chunk.len(), 1));
                    tx.prepare_cached(&sql)?.execute(params_from_iter(chunk))?;
                }
            }
            Effect::Append { entries, at } => {
                let bytes = append(tx, &target.id, journal_len, &entries, at)?;
                journal_len += entries.len() as u64;
                row.events += entries.len() as u64;
                row.bytes += bytes;
                row.dirty = true;
            }
            Effect::ScheduleTask { task, call } => scheduled.push((task, call)),
            Effect::Create(new) => {
                let child = new.parent.is_some();
                match create(tx, new.clone(), now)? {
                    Ok(()) => applied.wake.push(new.id),
                    Err(()) if child => {
                        // Only a caller that made the same id by hand can
                        // collide with a derived child id: the parent's task fails.
                        if let Some(parent) = &new.parent {
                            let event = Event::TaskFailed {
                                task: parent.task,
                                error: format!("instance {} already exists", new.id),
                            };
                            push_inbox(tx, &mut applied, &parent.id, parent.execution, event, now)?;
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
                    &mut applied,
                    &target.id,
                    target.execution,
                    Event::TimerFired { task },
                    fire_at,
                )?;
            }
            Effect::Deliver {
                instance,
                execution,
                event,
            } => {
                push_inbox(tx, &mut applied, &instance, execution, event, now)?;
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
                row.flush(tx, &target.id, now)?;
                journal_len = 0;
                let next = new_execution(tx, &target.id)?;
                for sql in [
                    "DELETE FROM journal WHERE instance_id = ?",
                    "DELETE FROM tasks WHERE instance_id = ?",
                ] {
                    tx.prepare_cached(sql)?.execute([&target.id])?;
                }
                // Events raised after the episode read the inbox move along;
                // timers and results of the old execution do not.
                tx.prepare_cached(
                    "UPDATE inbox SET execution = ? WHERE instance_id = ? AND execution = ? \
                     AND json_extract(event, '$.event') = 'event_raised'",
                )?
                .execute(params![next, target.id, target.execution])?;
                tx.prepare_cached("DELETE FROM inbox WHERE instance_id = ? AND execution <> ?")?
                    .execute(params![target.id, next])?;
                tx.prepare_cached(
                    "UPDATE instances SET input = ?, output = NULL, execution = ?, history_events = 0, \
                     history_bytes = 0, component_digest = COALESCE(?, component_digest) WHERE id = ?",
                )?
                .execute(params![input, next, digest, target.id])?;
                for event in carried {
                    push_inbox(tx, &mut applied, &target.id, next, event, now)?;
                }
                applied.wake.push(target.id.clone());
            }
            Effect::DropPending => {
                for sql in [
                    "DELETE FROM inbox WHERE instance_id = ?",
                    "DELETE FROM tasks WHERE instance_id = ?",
                ] {
                    tx.prepare_cached(sql)?.execute([&target.id])?;
                }
            }
            Effect::NotifyParent { parent, event } => {
                push_inbox(tx, &mut applied, &parent.id, parent.execution, event, now)?;
                applied.wake.push(parent.id);
            }
            Effect::FinishTask { task } => {
                tx.prepare_cached(
                    "DELETE FROM tasks WHERE instance_id = ? AND execution = ? AND task = ?",
                )?
                .execute(params![target.id, target.execution, task])?;
            }
            Effect::RetryTask {
                task,
                attempt,
                due_at,
            } => {
                tx.prepare_cached(
                    "UPDATE tasks SET attempt = ?, due_at = ? WHERE instance_id = ? AND execution = ? AND task = ?",
                )?
                .execute(params![attempt, due_at, target.id, target.execution, task])?;
            }
            Effect::Purge => {
                row = RowUpdate::default();
                purge(tx, &target.id)?
            }
        }
    }
    row.flush(tx, &target.id, now)?;
    if !scheduled.is_empty() {
        insert_tasks(tx, target, &scheduled, now)?;
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
pub(super) fn create(
    tx: &Connection,
    new: NewInstance,
    now: i64,
) -> Result<Result<(), ()>, StoreError> {
    let existing = load(tx, &new.id)?.map(|l| l.state);
    let Ok(effects) = start::decide(existing.as_ref(), new) else {
        return Ok(Err(()));
    };
    for effect in effects {
        match effect {
            Effect::Purge => {
                if let Some(old) = &existing {
                    purge(tx, &old.id)?;
                }
            }
            Effect::Create(new) => insert_instance(tx, &new, now)?,
            other => {
                return Err(StoreError::Write(format!(
                    "a start decided an unexpected effect: {other:?}"
                )))
            }
        }
    }
    Ok(Ok(()))
}

fn insert_instance(tx: &Connection, new: &NewInstance, now: i64) -> Result<(), StoreError> {
    let execution = new_execution(tx, &new.id)?;
    tx.prepare_cached(
        "INSERT INTO instances (id, name, status, input, component_digest, parent_id, parent_execution, \
         parent_task, execution, created_at, updated_at) VALUES (?, ?, 'Pending', ?, ?, ?, ?, ?, ?, ?, ?)",
    )?
    .execute(params![
        new.id,
        new.name,
        new.input,
        new.digest,
        new.parent.as_ref().map(|p| p.id.as_str()),
        new.parent.as_ref().map(|p| p.execution),
        new.parent.as_ref().map(|p| p.task),
        execution,
        now,
        now,
    ])?;
    Ok(())
}

/// A fresh execution number, never handed out before.
fn new_execution(tx: &Connection, id: &str) -> Result<i64, StoreError> {
    Ok(tx
        .prepare_cached("INSERT INTO executions (instance_id) VALUES (?) RETURNING id")?
        .query_row([id], |row| row.get(0))?)
}

pub(super) fn purge(tx: &Connection, id: &str) -> Result<(), StoreError> {
    for sql in [
        "DELETE FROM instances WHERE id = ?",
        "DELETE FROM journal WHERE instance_id = ?",
        "DELETE FROM inbox WHERE instance_id = ?",
        "DELETE FROM tasks WHERE instance_id = ?",
        "DELETE FROM executions WHERE instance_id = ?",
    ] {
        tx.prepare_cached(sql)?.execute([id])?;
    }
    Ok(())
}

fn push_inbox(
    tx: &Connection,
    applied: &mut Applied,
    id: &str,
    execution: i64,
    event: Event,
    visible_at: i64,
) -> Result<(), StoreError> {
    tx.prepare_cached(
        "INSERT INTO inbox (instance_id, execution, event, visible_at) VALUES (?, ?, ?, ?)",
    )?
    .execute(params![id, execution, to_json(&event)?, visible_at])?;
    let row = InboxRow {
        id: tx.last_insert_rowid(),
        execution,
        event,
        visible_at,
    };
    applied.posted.push((id.to_string(), row));
    Ok(())
}

/// `rows` groups of `per_row` placeholders: `(?, ?), (?, ?)`, or `?, ?` for one per row.
fn marks(rows: usize, per_row: usize) -> String {
    let row = vec!["?"; per_row].join(", ");
    let row = if per_row == 1 {
        row
    } else {
        format!("({row})")
    };
    vec![row; rows].join(", ")
}

/// Writes journal rows numbered after `journal_len`; returns their size.
fn append(
    tx: &Connection,
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
        let sql = format!(
            "INSERT INTO journal (instance_id, seq, entry, recorded_at) VALUES {}",
            marks(chunk.len(), 4)
        );
        let values = chunk.iter().flat_map(|(seq, entry)| {
            [
                Value::Text(id.to_string()),
                Value::Integer(*seq),
                Value::Text(entry.clone()),
                Value::Integer(at),
            ]
        });
        tx.prepare_cached(&sql)?.execute(params_from_iter(values))?;
    }
    Ok(bytes)
}

fn insert_tasks(
    tx: &Connection,
    target: &Target,
    tasks: &[(u32, Call)],
    now: i64,
) -> Result<(), StoreError> {
    let mut rows = Vec::with_capacity(tasks.len());
    for (task, call) in tasks {
        rows.push((*task, to_json(call)?));
    }
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let sql = format!(
            "INSERT INTO tasks (instance_id, execution, task, call, attempt, due_at) VALUES {}",
            marks(chunk.len(), 6)
        );
        let values = chunk.iter().flat_map(|(task, call)| {
            [
                Value::Text(target.id.clone()),
                Value::Integer(target.execution),
                Value::Integer(i64::from(*task)),
                Value::Text(call.clone()),
                Value::Integer(0),
                Value::Integer(now),
            ]
        });
        tx.prepare_cached(&sql)?.execute(params_from_iter(values))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::marks;

    #[test]
    fn placeholders_group_by_row() {
        assert_eq!(marks(3, 1), "?, ?, ?");
        assert_eq!(marks(2, 2), "(?, ?), (?, ?)");
    }
}
