//! [`Tx`] on PostgreSQL, inside the writer's transaction. `load` locks the
//! instance's row (`FOR UPDATE`) until the transaction ends, so two hosts
//! writing to one instance decide one after the other, each on the state the
//! other left. Rows are inserted with `UNNEST`: one statement whatever their
//! number.

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use crate::core::instance::{InstanceState, NewInstance, ParentRef, RuntimeStatus, Size};
use crate::core::journal::Entry;
use crate::core::lifecycle::task_done::Attempt;
use crate::store::durable_records::InboxRow;
use crate::store::durable_records::Target;
use crate::store::durable_records::{from_json, Image, Loaded};
use crate::store::error::StoreError;
use crate::store::tx::{NextExecution, RowUpdate, Tx};

/// The writer's connection, and the host it writes for when that host runs
/// episodes (it then owns what it creates, and an episode commits only on
/// an instance it owns).
pub(super) struct PgTx<'c>(pub &'c mut PgConnection, pub Option<&'c str>);

/// An instance row as [`Loaded`]. Its `has_run` is read as
/// `history_events > 0`: the count moves with every journal row written or
/// dropped, in the same transaction (an entity's batch counts one with no
/// row: its `has_run` reads true here and false on SQLite, which looks at
/// the journal; only a resume reads it, and an entity resumed as Pending
/// rests as Running again at its next look), and reading it costs no look into the
/// journal (a look a plan made while the journal was small does by scanning
/// all of it).
pub(super) fn loaded(row: &PgRow) -> Result<Loaded, StoreError> {
    let status: String = row.try_get("status")?;
    let parent = match row.try_get::<Option<String>, _>("parent_id")? {
        Some(id) => Some(ParentRef {
            id,
            execution: row
                .try_get::<Option<i64>, _>("parent_execution")?
                .unwrap_or(0),
            task: u32::try_from(row.try_get::<Option<i64>, _>("parent_task")?.unwrap_or(0))
                .map_err(|e| StoreError::Corrupt(format!("parent task: {e}")))?,
        }),
        None => None,
    };
    let count = |name: &str| -> Result<u64, StoreError> {
        Ok(u64::try_from(row.try_get::<i64, _>(name)?).unwrap_or(0))
    };
    Ok(Loaded {
        state: InstanceState {
            id: row.try_get("id")?,
            status: RuntimeStatus::parse(&status)
                .ok_or_else(|| StoreError::Corrupt(format!("instance status '{status}'")))?,
            execution: row.try_get("execution")?,
            parent,
            history: Size {
                events: count("history_events")?,
                bytes: count("history_bytes")?,
            },
            has_run: row.try_get("has_run")?,
        },
        name: row.try_get("name")?,
        digest: row.try_get("component_digest")?,
        input: row.try_get("input")?,
        created_at: row.try_get("created_at")?,
        owner: row.try_get("owner")?,
        traceparent: row.try_get("traceparent")?,
        activity_set: row.try_get("activity_set")?,
        start_at: row.try_get("start_at")?,
    })
}

/// An instance's state, journal and inbox in one statement (one snapshot,
/// no transaction, no lock: a read decides nothing).
pub(super) async fn image(
    connection: &mut PgConnection,
    id: &str,
) -> Result<Option<Image>, StoreError> {
    let Some(row) = sqlx::query(
        "SELECT id, name, status, execution, input, component_digest, parent_id, parent_execution, parent_task, \
         history_events, history_bytes, created_at, owner, traceparent, activity_set, start_at, \
         history_events > 0 AS has_run, \
         ARRAY(SELECT entry FROM journal j WHERE j.instance_id = $1 ORDER BY seq) AS journal_entries, \
         ARRAY(SELECT recorded_at FROM journal j WHERE j.instance_id = $1 ORDER BY seq) AS journal_at, \
         ARRAY(SELECT b.id FROM inbox b WHERE b.instance_id = $1 ORDER BY b.arrival) AS inbox_ids, \
         ARRAY(SELECT b.execution FROM inbox b WHERE b.instance_id = $1 ORDER BY b.arrival) AS inbox_executions, \
         ARRAY(SELECT b.event FROM inbox b WHERE b.instance_id = $1 ORDER BY b.arrival) AS inbox_events, \
         ARRAY(SELECT b.visible_at FROM inbox b WHERE b.instance_id = $1 ORDER BY b.arrival) AS inbox_visible_at, \
         ARRAY(SELECT b.parked FROM inbox b WHERE b.instance_id = $1 ORDER BY b.arrival) AS inbox_parked \
         FROM instances WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(&mut *connection)
    .await?
    else {
        return Ok(None);
    };
    let entries: Vec<String> = row.try_get("journal_entries")?;
    let at: Vec<i64> = row.try_get("journal_at")?;
    let journal = entries
        .iter()
        .zip(at)
        .map(|(entry, at)| Ok((from_json(entry, "journal entry")?, at)))
        .collect::<Result<Vec<_>, StoreError>>()?;
    let ids: Vec<i64> = row.try_get("inbox_ids")?;
    let executions: Vec<i64> = row.try_get("inbox_executions")?;
    let events: Vec<String> = row.try_get("inbox_events")?;
    let visible_at: Vec<i64> = row.try_get("inbox_visible_at")?;
    let parked: Vec<i32> = row.try_get("inbox_parked")?;
    let mut inbox = Vec::with_capacity(ids.len());
    for (n, id) in ids.into_iter().enumerate() {
        let (Some(execution), Some(event), Some(visible_at), Some(parked)) = (
            executions.get(n),
            events.get(n),
            visible_at.get(n),
            parked.get(n),
        ) else {
            return Err(StoreError::Corrupt(
                "an inbox row changed while it was read".into(),
            ));
        };
        inbox.push(InboxRow {
            id,
            execution: *execution,
            event: from_json(event, "inbox event")?,
            visible_at: *visible_at,
            parked: *parked != 0,
        });
    }
    Ok(Some(Image {
        loaded: loaded(&row)?,
        journal,
        inbox,
    }))
}

impl Tx for PgTx<'_> {
    fn me(&self) -> Option<&str> {
        self.1
    }

    async fn load(&mut self, id: &str) -> Result<Option<Loaded>, StoreError> {
        let row = sqlx::query(
            "SELECT id, name, status, execution, input, component_digest, parent_id, parent_execution, parent_task, \
             history_events, history_bytes, created_at, owner, traceparent, activity_set, start_at, \
             history_events > 0 AS has_run FROM instances WHERE id = $1 FOR UPDATE",
        )
        .bind(id)
        .fetch_optional(&mut *self.0)
        .await?;
        row.as_ref().map(loaded).transpose()
    }

    async fn inbox_size(&mut self, id: &str) -> Result<Size, StoreError> {
        let (events, bytes): (i64, i64) = sqlx::query_as(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(event)), 0)::BIGINT FROM inbox WHERE instance_id = $1",
        )
        .bind(id)
        .fetch_one(&mut *self.0)
        .await?;
        Ok(Size {
            events: u64::try_from(events).unwrap_or(0),
            bytes: u64::try_from(bytes).unwrap_or(0),
        })
    }

    async fn task_pending(&mut self, id: &str, attempt: &Attempt) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM tasks WHERE instance_id = $1 AND execution = $2 AND task = $3 AND attempt = $4)",
        )
        .bind(id)
        .bind(attempt.execution)
        .bind(i64::from(attempt.task))
        .bind(i64::from(attempt.attempt))
        .fetch_one(&mut *self.0)
        .await?)
    }

    async fn journal(&mut self, id: &str) -> Result<Vec<(Entry, i64)>, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT entry, recorded_at FROM journal WHERE instance_id = $1 ORDER BY seq",
        )
        .bind(id)
        .fetch_all(&mut *self.0)
        .await?;
        rows.into_iter()
            .map(|(entry, at)| Ok((from_json(&entry, "journal entry")?, at)))
            .collect()
    }

    async fn inbox(&mut self, id: &str) -> Result<Vec<InboxRow>, StoreError> {
        let rows: Vec<(i64, i64, String, i64, i32)> = sqlx::query_as(
            "SELECT id, execution, event, visible_at, parked FROM inbox WHERE instance_id = $1 ORDER BY arrival",
        )
        .bind(id)
        .fetch_all(&mut *self.0)
        .await?;
        rows.into_iter()
            .map(|(id, execution, event, visible_at, parked)| {
                InboxRow::stored(id, execution, &event, visible_at, i64::from(parked))
            })
            .collect()
    }

    async fn park_inbox_rows(&mut self, _id: &str, rows: &[i64]) -> Result<(), StoreError> {
        sqlx::query("UPDATE inbox SET parked = 1 WHERE id = ANY($1)")
            .bind(rows)
            .execute(&mut *self.0)
            .await?;
        Ok(())
    }

    async fn delete_inbox_rows(&mut self, _id: &str, rows: &[i64]) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM inbox WHERE id = ANY($1)")
            .bind(rows)
            .execute(&mut *self.0)
            .await?;
        Ok(())
    }

    async fn append_journal(
        &mut self,
        id: &str,
        rows: &[(i64, String)],
        at: i64,
    ) -> Result<(), StoreError> {
        let (seqs, entries): (Vec<i64>, Vec<&str>) =
            rows.iter().map(|(seq, e)| (*seq, e.as_str())).unzip();
        sqlx::query(
            "INSERT INTO journal (instance_id, seq, entry, recorded_at) \
             SELECT $1, s, e, $4 FROM UNNEST($2::BIGINT[], $3::TEXT[]) AS t(s, e)",
        )
        .bind(id)
        .bind(seqs)
        .bind(entries)
        .bind(at)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn update_instance(
        &mut self,
        id: &str,
        update: RowUpdate,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE instances SET status = COALESCE($1, status), output = COALESCE($2, output), \
             custom_status = COALESCE($3, custom_status), history_events = history_events + $4, \
             history_bytes = history_bytes + $5, updated_at = $6 WHERE id = $7",
        )
        .bind(update.status.map(RuntimeStatus::as_str))
        .bind(update.output)
        .bind(update.custom_status)
        .bind(update.events)
        .bind(update.bytes)
        .bind(now)
        .bind(id)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn caller_of(&mut self, id: &str) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT caller FROM instances WHERE id = $1")
                .bind(id)
                .fetch_optional(&mut *self.0)
                .await?
                .flatten(),
        )
    }

    async fn new_execution(&mut self, id: &str) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("INSERT INTO executions (instance_id) VALUES ($1) RETURNING id")
                .bind(id)
                .fetch_one(&mut *self.0)
                .await?,
        )
    }

    async fn insert_instance(
        &mut self,
        new: &NewInstance,
        execution: i64,
        now: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO instances (id, name, status, input, component_digest, parent_id, parent_execution, \
             parent_task, execution, created_at, updated_at, owner, traceparent, activity_set, start_at, caller) \
             VALUES ($1, $2, 'Pending', $3, $4, $5, $6, $7, $8, $9, $9, $10, $11, $12, $13, \
             COALESCE($14, (SELECT p.caller FROM instances p WHERE p.id = $5)))",
        )
        .bind(&new.id)
        .bind(&new.name)
        .bind(&new.input)
        .bind(&new.digest)
        .bind(new.parent.as_ref().map(|p| p.id.as_str()))
        .bind(new.parent.as_ref().map(|p| p.execution))
        .bind(new.parent.as_ref().map(|p| i64::from(p.task)))
        .bind(execution)
        .bind(now)
        .bind(self.1)
        .bind(new.traceparent.as_deref())
        .bind(new.activity_set.as_deref())
        .bind(new.start_at)
        .bind(new.caller.as_deref())
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn push_inbox(
        &mut self,
        id: &str,
        execution: i64,
        event: &str,
        visible_at: i64,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "INSERT INTO inbox (instance_id, execution, event, visible_at) VALUES ($1, $2, $3, $4) RETURNING id",
        )
        .bind(id)
        .bind(execution)
        .bind(event)
        .bind(visible_at)
        .fetch_one(&mut *self.0)
        .await?)
    }

    async fn insert_tasks(
        &mut self,
        target: &Target,
        tasks: &[(u32, String)],
        now: i64,
    ) -> Result<(), StoreError> {
        let (numbers, calls): (Vec<i64>, Vec<&str>) = tasks
            .iter()
            .map(|(task, call)| (i64::from(*task), call.as_str()))
            .unzip();
        sqlx::query(
            "INSERT INTO tasks (instance_id, execution, task, call, attempt, due_at, owner) \
             SELECT $1, $2, t, c, 0, $5, $6 FROM UNNEST($3::BIGINT[], $4::TEXT[]) AS x(t, c)",
        )
        .bind(&target.id)
        .bind(target.execution)
        .bind(numbers)
        .bind(calls)
        .bind(now)
        .bind(self.1)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn finish_task(&mut self, target: &Target, task: u32) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM tasks WHERE instance_id = $1 AND execution = $2 AND task = $3")
            .bind(&target.id)
            .bind(target.execution)
            .bind(i64::from(task))
            .execute(&mut *self.0)
            .await?;
        Ok(())
    }

    async fn retry_task(
        &mut self,
        target: &Target,
        task: u32,
        attempt: u32,
        due_at: i64,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE tasks SET attempt = $1, due_at = $2 WHERE instance_id = $3 AND execution = $4 AND task = $5",
        )
        .bind(i64::from(attempt))
        .bind(due_at)
        .bind(&target.id)
        .bind(target.execution)
        .bind(i64::from(task))
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn clear_pending(&mut self, id: &str) -> Result<(), StoreError> {
        for sql in [
            "DELETE FROM inbox WHERE instance_id = $1",
            "DELETE FROM tasks WHERE instance_id = $1",
        ] {
            sqlx::query(sql).bind(id).execute(&mut *self.0).await?;
        }
        Ok(())
    }

    async fn begin_execution(&mut self, next: NextExecution<'_>) -> Result<(), StoreError> {
        for sql in [
            "DELETE FROM journal WHERE instance_id = $1",
            "DELETE FROM tasks WHERE instance_id = $1",
        ] {
            sqlx::query(sql).bind(next.id).execute(&mut *self.0).await?;
        }
        sqlx::query(
            "UPDATE inbox SET execution = $1 WHERE instance_id = $2 AND execution = $3 \
             AND (event::jsonb ->> 'event') = 'event_raised'",
        )
        .bind(next.next)
        .bind(next.id)
        .bind(next.old)
        .execute(&mut *self.0)
        .await?;
        sqlx::query("DELETE FROM inbox WHERE instance_id = $1 AND execution <> $2")
            .bind(next.id)
            .bind(next.next)
            .execute(&mut *self.0)
            .await?;
        sqlx::query(
            "UPDATE instances SET input = $1, output = NULL, execution = $2, history_events = 0, \
             history_bytes = 0, component_digest = COALESCE($3, component_digest), \
             activity_set = CASE WHEN $3::TEXT IS NULL THEN activity_set ELSE $5 END WHERE id = $4",
        )
        .bind(next.input)
        .bind(next.next)
        .bind(next.digest)
        .bind(next.id)
        .bind(next.activity_set)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn reset_journal(&mut self, id: &str) -> Result<(), StoreError> {
        for sql in [
            "DELETE FROM journal WHERE instance_id = $1",
            "UPDATE instances SET history_bytes = 0, output = NULL WHERE id = $1",
        ] {
            sqlx::query(sql).bind(id).execute(&mut *self.0).await?;
        }
        Ok(())
    }

    async fn set_tags(&mut self, id: &str, tags: &str) -> Result<(), StoreError> {
        sqlx::query("UPDATE instances SET tags = $1 WHERE id = $2")
            .bind(tags)
            .bind(id)
            .execute(&mut *self.0)
            .await?;
        Ok(())
    }

    async fn move_version(
        &mut self,
        id: &str,
        digest: &str,
        activity_set: Option<&str>,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE instances SET component_digest = $1, activity_set = $2 WHERE id = $3")
            .bind(digest)
            .bind(activity_set)
            .bind(id)
            .execute(&mut *self.0)
            .await?;
        Ok(())
    }

    async fn purge(&mut self, id: &str) -> Result<(), StoreError> {
        for sql in [
            "DELETE FROM instances WHERE id = $1",
            "DELETE FROM journal WHERE instance_id = $1",
            "DELETE FROM inbox WHERE instance_id = $1",
            "DELETE FROM tasks WHERE instance_id = $1",
            "DELETE FROM executions WHERE instance_id = $1",
            "DELETE FROM remote_tasks WHERE instance_id = $1",
        ] {
            sqlx::query(sql).bind(id).execute(&mut *self.0).await?;
        }
        Ok(())
    }
}
