//! [`Tx`] on the SQLite writer thread's own connection (rusqlite): each
//! statement is prepared once and cached, and completes inside the call.

use rusqlite::types::Value;
use rusqlite::{params, params_from_iter, Connection};

use crate::core::instance::{InstanceState, NewInstance, ParentRef, RuntimeStatus, Size};
use crate::core::journal::Entry;
use crate::core::lifecycle::task_done::Attempt;
use crate::store::durable_records::InboxRow;
use crate::store::durable_records::Target;
use crate::store::durable_records::{from_json, Loaded};
use crate::store::error::StoreError;
use crate::store::tx::{NextExecution, RowUpdate, Tx};

/// SQLite accepts at most 32,766 bound parameters per statement; rows are
/// written in chunks well under it.
const ROWS_PER_STATEMENT: usize = 500;

pub(super) struct SqliteTx<'c>(pub &'c Connection);

impl Tx for SqliteTx<'_> {
    fn me(&self) -> Option<&str> {
        None
    }

    async fn load(&mut self, id: &str) -> Result<Option<Loaded>, StoreError> {
        let mut statement = self.0.prepare_cached(
            "SELECT id, name, status, execution, input, component_digest, parent_id, parent_execution, parent_task, \
             history_events, history_bytes, created_at, traceparent, activity_set, start_at, EXISTS (SELECT 1 FROM journal j WHERE j.instance_id = instances.id) AS has_run \
             FROM instances WHERE id = ?",
        )?;
        let mut rows = statement.query([id])?;
        let Some(row) = rows.next()? else {
            return Ok(None);
        };
        let status: String = row.get("status")?;
        let parent_id: Option<String> = row.get("parent_id")?;
        let parent = match parent_id {
            Some(id) => Some(ParentRef {
                id,
                execution: row.get::<_, Option<i64>>("parent_execution")?.unwrap_or(0),
                task: u32::try_from(row.get::<_, Option<i64>>("parent_task")?.unwrap_or(0))
                    .map_err(|e| StoreError::Corrupt(format!("parent task: {e}")))?,
            }),
            None => None,
        };
        let count = |name: &str| -> Result<u64, StoreError> {
            Ok(u64::try_from(row.get::<_, i64>(name)?).unwrap_or(0))
        };
        Ok(Some(Loaded {
            state: InstanceState {
                id: row.get("id")?,
                status: RuntimeStatus::parse(&status)
                    .ok_or_else(|| StoreError::Corrupt(format!("instance status '{status}'")))?,
                execution: row.get("execution")?,
                parent,
                history: Size {
                    events: count("history_events")?,
                    bytes: count("history_bytes")?,
                },
                has_run: row.get::<_, i64>("has_run")? != 0,
            },
            name: row.get("name")?,
            digest: row.get("component_digest")?,
            input: row.get("input")?,
            created_at: row.get("created_at")?,
            owner: None,
            traceparent: row.get("traceparent")?,
            activity_set: row.get("activity_set")?,
            start_at: row.get("start_at")?,
        }))
    }

    async fn inbox_size(&mut self, id: &str) -> Result<Size, StoreError> {
        let (events, bytes): (i64, i64) = self
            .0
            .prepare_cached(
                "SELECT COUNT(*), COALESCE(SUM(LENGTH(event)), 0) FROM inbox WHERE instance_id = ?",
            )?
            .query_row([id], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(Size {
            events: u64::try_from(events).unwrap_or(0),
            bytes: u64::try_from(bytes).unwrap_or(0),
        })
    }

    async fn task_pending(&mut self, id: &str, attempt: &Attempt) -> Result<bool, StoreError> {
        Ok(self
            .0
            .prepare_cached(
                "SELECT 1 FROM tasks WHERE instance_id = ? AND execution = ? AND task = ? AND attempt = ?",
            )?
            .exists(params![id, attempt.execution, attempt.task, attempt.attempt])?)
    }

    async fn journal(&mut self, id: &str) -> Result<Vec<(Entry, i64)>, StoreError> {
        let mut statement = self.0.prepare_cached(
            "SELECT entry, recorded_at FROM journal WHERE instance_id = ? ORDER BY seq",
        )?;
        let mut rows = statement.query([id])?;
        let mut journal = Vec::new();
        while let Some(row) = rows.next()? {
            let entry: String = row.get(0)?;
            journal.push((from_json(&entry, "journal entry")?, row.get(1)?));
        }
        Ok(journal)
    }

    async fn inbox(&mut self, id: &str) -> Result<Vec<InboxRow>, StoreError> {
        let mut statement = self.0.prepare_cached(
            "SELECT id, execution, event, visible_at, parked FROM inbox WHERE instance_id = ? ORDER BY id",
        )?;
        let mut rows = statement.query(params![id])?;
        let mut inbox = Vec::new();
        while let Some(row) = rows.next()? {
            let event: String = row.get(2)?;
            inbox.push(InboxRow::stored(
                row.get(0)?,
                row.get(1)?,
                &event,
                row.get(3)?,
                row.get(4)?,
            )?);
        }
        Ok(inbox)
    }

    async fn park_inbox_rows(&mut self, _id: &str, rows: &[i64]) -> Result<(), StoreError> {
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            let sql = format!(
                "UPDATE inbox SET parked = 1 WHERE id IN ({})",
                marks(chunk.len(), 1)
            );
            self.0
                .prepare_cached(&sql)?
                .execute(params_from_iter(chunk))?;
        }
        Ok(())
    }

    async fn delete_inbox_rows(&mut self, _id: &str, rows: &[i64]) -> Result<(), StoreError> {
        for chunk in rows.chunks(ROWS_PER_STATEMENT) {
            let sql = format!("DELETE FROM inbox WHERE id IN ({})", marks(chunk.len(), 1));
            self.0
                .prepare_cached(&sql)?
                .execute(params_from_iter(chunk))?;
        }
        Ok(())
    }

    async fn append_journal(
        &mut self,
        id: &str,
        rows: &[(i64, String)],
        at: i64,
    ) -> Result<(), StoreError> {
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
            self.0
                .prepare_cached(&sql)?
                .execute(params_from_iter(values))?;
        }
        Ok(())
    }

    async fn update_instance(
        &mut self,
        id: &str,
        update: RowUpdate,
        now: i64,
    ) -> Result<(), StoreError> {
        self.0
            .prepare_cached(
                "UPDATE instances SET status = COALESCE(?, status), output = COALESCE(?, output), \
                 custom_status = COALESCE(?, custom_status), history_events = history_events + ?, \
                 history_bytes = history_bytes + ?, updated_at = ? WHERE id = ?",
            )?
            .execute(params![
                update.status.map(RuntimeStatus::as_str),
                update.output,
                update.custom_status,
                update.events,
                update.bytes,
                now,
                id,
            ])?;
        Ok(())
    }

    async fn caller_of(&mut self, id: &str) -> Result<Option<String>, StoreError> {
        let mut statement = self
            .0
            .prepare_cached("SELECT caller FROM instances WHERE id = ?")?;
        let mut rows = statement.query([id])?;
        Ok(match rows.next()? {
            Some(row) => row.get(0)?,
            None => None,
        })
    }

    async fn new_execution(&mut self, id: &str) -> Result<i64, StoreError> {
        Ok(self
            .0
            .prepare_cached("INSERT INTO executions (instance_id) VALUES (?) RETURNING id")?
            .query_row([id], |row| row.get(0))?)
    }

    async fn insert_instance(
        &mut self,
        new: &NewInstance,
        execution: i64,
        now: i64,
    ) -> Result<(), StoreError> {
        self.0
            .prepare_cached(
                "INSERT INTO instances (id, name, status, input, component_digest, activity_set, parent_id, parent_execution, \
                 parent_task, execution, created_at, updated_at, traceparent, start_at, caller) VALUES (?, ?, 'Pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, \
                 COALESCE(?, (SELECT p.caller FROM instances p WHERE p.id = ?)))",
            )?
            .execute(params![
                new.id,
                new.name,
                new.input,
                new.digest,
                new.activity_set,
                new.parent.as_ref().map(|p| p.id.as_str()),
                new.parent.as_ref().map(|p| p.execution),
                new.parent.as_ref().map(|p| p.task),
                execution,
                now,
                now,
                new.traceparent,
                new.start_at,
                new.caller,
                new.parent.as_ref().map(|p| p.id.as_str()),
            ])?;
        Ok(())
    }

    async fn push_inbox(
        &mut self,
        id: &str,
        execution: i64,
        event: &str,
        visible_at: i64,
    ) -> Result<i64, StoreError> {
        self.0
            .prepare_cached(
                "INSERT INTO inbox (instance_id, execution, event, visible_at) VALUES (?, ?, ?, ?)",
            )?
            .execute(params![id, execution, event, visible_at])?;
        Ok(self.0.last_insert_rowid())
    }

    async fn insert_tasks(
        &mut self,
        target: &Target,
        tasks: &[(u32, String)],
        now: i64,
    ) -> Result<(), StoreError> {
        for chunk in tasks.chunks(ROWS_PER_STATEMENT) {
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
            self.0
                .prepare_cached(&sql)?
                .execute(params_from_iter(values))?;
        }
        Ok(())
    }

    async fn finish_task(&mut self, target: &Target, task: u32) -> Result<(), StoreError> {
        self.0
            .prepare_cached(
                "DELETE FROM tasks WHERE instance_id = ? AND execution = ? AND task = ?",
            )?
            .execute(params![target.id, target.execution, task])?;
        Ok(())
    }

    async fn retry_task(
        &mut self,
        target: &Target,
        task: u32,
        attempt: u32,
        due_at: i64,
    ) -> Result<(), StoreError> {
        self.0
            .prepare_cached(
                "UPDATE tasks SET attempt = ?, due_at = ? WHERE instance_id = ? AND execution = ? AND task = ?",
            )?
            .execute(params![attempt, due_at, target.id, target.execution, task])?;
        Ok(())
    }

    async fn reset_journal(&mut self, id: &str) -> Result<(), StoreError> {
        self.0
            .prepare_cached("DELETE FROM journal WHERE instance_id = ?")?
            .execute([id])?;
        self.0
            .prepare_cached("UPDATE instances SET history_bytes = 0, output = NULL WHERE id = ?")?
            .execute([id])?;
        Ok(())
    }

    async fn set_tags(&mut self, id: &str, tags: &str) -> Result<(), StoreError> {
        self.0
            .prepare_cached("UPDATE instances SET tags = ? WHERE id = ?")?
            .execute([tags, id])?;
        Ok(())
    }

    async fn clear_pending(&mut self, id: &str) -> Result<(), StoreError> {
        for sql in [
            "DELETE FROM inbox WHERE instance_id = ?",
            "DELETE FROM tasks WHERE instance_id = ?",
        ] {
            self.0.prepare_cached(sql)?.execute([id])?;
        }
        Ok(())
    }

    async fn begin_execution(&mut self, next: NextExecution<'_>) -> Result<(), StoreError> {
        for sql in [
            "DELETE FROM journal WHERE instance_id = ?",
            "DELETE FROM tasks WHERE instance_id = ?",
        ] {
            self.0.prepare_cached(sql)?.execute([next.id])?;
        }
        self.0
            .prepare_cached(
                "UPDATE inbox SET execution = ? WHERE instance_id = ? AND execution = ? \
                 AND json_extract(event, '$.event') = 'event_raised'",
            )?
            .execute(params![next.next, next.id, next.old])?;
        self.0
            .prepare_cached("DELETE FROM inbox WHERE instance_id = ? AND execution <> ?")?
            .execute(params![next.id, next.next])?;
        self.0
            .prepare_cached(
                "UPDATE instances SET input = ?1, output = NULL, execution = ?2, history_events = 0, \
                 history_bytes = 0, component_digest = COALESCE(?3, component_digest), \
                 activity_set = CASE WHEN ?3 IS NULL THEN activity_set ELSE ?4 END WHERE id = ?5",
            )?
            .execute(params![next.input, next.next, next.digest, next.activity_set, next.id])?;
        Ok(())
    }

    async fn move_version(
        &mut self,
        id: &str,
        digest: &str,
        activity_set: Option<&str>,
    ) -> Result<(), StoreError> {
        self.0
            .prepare_cached(
                "UPDATE instances SET component_digest = ?, activity_set = ? WHERE id = ?",
            )?
            .execute(params![digest, activity_set, id])?;
        Ok(())
    }

    async fn purge(&mut self, id: &str) -> Result<(), StoreError> {
        for sql in [
            "DELETE FROM instances WHERE id = ?",
            "DELETE FROM journal WHERE instance_id = ?",
            "DELETE FROM inbox WHERE instance_id = ?",
            "DELETE FROM tasks WHERE instance_id = ?",
            "DELETE FROM executions WHERE instance_id = ?",
            "DELETE FROM remote_tasks WHERE instance_id = ?",
        ] {
            self.0.prepare_cached(sql)?.execute([id])?;
        }
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::marks;

    #[test]
    fn placeholders_group_by_row() {
        assert_eq!(marks(3, 1), "?, ?, ?");
        assert_eq!(marks(2, 2), "(?, ?), (?, ?)");
    }
}
