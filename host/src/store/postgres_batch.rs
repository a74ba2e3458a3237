//! A batch of durable writes on PostgreSQL in a handful of round trips,
//! whatever its size: the instances it names are read and locked by one
//! statement, each write is decided in memory on what the batch read and
//! wrote so far, and every row it writes goes to the database in one
//! statement of set-based inserts, updates and deletes
//! ([`super::postgres_flush`]), with
//! the batch's `NOTIFY`s and its commit mark.
//!
//! The decisions are the statement path's own code ([`super::writes`]):
//! [`Planned`] is a [`Tx`] whose reads answer from the batch's view of the
//! rows and whose writes are gathered. Gathered rows are written in a fixed
//! order by table, which is only right when no two of them touch one row
//! in an order that matters: the rare changes that would (a purge, a new
//! execution, a retry, a terminate's cleanup, a task finished in the batch
//! that scheduled it) end the planning, and the batch goes down the
//! statement path in the same transaction, where nothing was written yet.

use std::collections::{HashMap, HashSet, VecDeque};

use sqlx::PgConnection;

use super::durable_records::{InboxRow, Loaded, Target, Write, Written};
use super::postgres_flush::{merge, Created, Rows, TaskKey};
use super::postgres_tx::{loaded, PgTx};
use super::tx::{NextExecution, RowUpdate, Tx};
use super::writes::write_durable;
use super::StoreError;
use crate::core::instance::{InstanceState, NewInstance, RuntimeStatus, Size};
use crate::core::journal::Entry;
use crate::core::lifecycle::task_done::Attempt;

/// Decides `writes` (none of them [`Write::Run`]) in memory, in order.
/// `Ok(None)`: one of them needs the statement path; nothing was written.
pub(super) async fn plan(
    connection: &mut PgConnection,
    me: Option<&str>,
    writes: &[Write],
    now: i64,
) -> Result<Option<(Vec<Written>, Rows)>, StoreError> {
    let mut planned = Planned::new(connection, me, writes.len());
    planned.preload(writes).await?;
    let mut results = Vec::with_capacity(writes.len());
    for write in writes {
        match write_durable(&mut planned, write.clone(), now).await {
            Ok(written) => results.push(written),
            Err(why) if planned.fallback => {
                tracing::debug!(writes = writes.len(), %why, "a batch goes statement by statement");
                #[cfg(test)]
                counts::STATEMENTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
    #[cfg(test)]
    counts::PLANNED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(Some((results, planned.rows)))
}

/// How many ids of a sequence one round trip reserves at least.
const RESERVE_AT_LEAST: usize = 16;

struct Planned<'c> {
    connection: &'c mut PgConnection,
    me: Option<&'c str>,
    /// Writes in the batch, to size reservations.
    writes: usize,
    /// Each instance as the batch sees it (`None`: there is none).
    instances: HashMap<String, Option<Loaded>>,
    /// Inbox sizes as stored before the batch.
    inbox_stored: HashMap<String, Size>,
    /// What the batch added to each inbox.
    inbox_pushed: HashMap<String, Size>,
    /// Inboxes the batch deleted rows of (their sizes are not known here).
    inbox_shrunk: HashSet<String>,
    /// Each task's attempt as stored before the batch (`None`: no row).
    tasks_stored: HashMap<TaskKey, Option<u32>>,
    tasks_added: HashSet<TaskKey>,
    tasks_finished: HashSet<TaskKey>,
    inbox_ids: VecDeque<i64>,
    execution_ids: VecDeque<i64>,
    rows: Rows,
    /// Set when a write needs the statement path.
    fallback: bool,
}

impl<'c> Planned<'c> {
    fn new(connection: &'c mut PgConnection, me: Option<&'c str>, writes: usize) -> Self {
        Self {
            connection,
            me,
            writes,
            instances: HashMap::new(),
            inbox_stored: HashMap::new(),
            inbox_pushed: HashMap::new(),
            inbox_shrunk: HashSet::new(),
            tasks_stored: HashMap::new(),
            tasks_added: HashSet::new(),
            tasks_finished: HashSet::new(),
            inbox_ids: VecDeque::new(),
            execution_ids: VecDeque::new(),
            rows: Rows::default(),
            fallback: false,
        }
    }

    /// One statement: reads and locks, in id order (two hosts lock the
    /// instances they share in the same order), every instance the writes
    /// name, with the inbox sizes a raise checks and the tasks whose results
    /// arrive, and reserves the inbox rows and executions the writes will
    /// most likely need (one per result and raise, one per start).
    async fn preload(&mut self, writes: &[Write]) -> Result<(), StoreError> {
        let mut ids = Vec::new();
        let mut raised = Vec::new();
        let mut tasks: Vec<TaskKey> = Vec::new();
        let (mut pushes, mut starts) = (0_i64, 0_i64);
        for write in writes {
            match write {
                Write::Episode { target, .. } => ids.push(target.id.clone()),
                Write::TaskDone {
                    instance, attempt, ..
                } => {
                    ids.push(instance.clone());
                    tasks.push((instance.clone(), attempt.execution, attempt.task));
                    pushes += 1;
                }
                Write::Start(new) => {
                    ids.push(new.id.clone());
                    starts += 1;
                }
                Write::Raise { instance, .. } => {
                    ids.push(instance.clone());
                    raised.push(instance.clone());
                    pushes += 1;
                }
                Write::Manage { instance, .. } => ids.push(instance.clone()),
                Write::Run(_) => {}
            }
        }
        ids.sort();
        ids.dedup();
        raised.sort();
        raised.dedup();
        let (mut task_instance, mut task_execution, mut task_number) =
            (Vec::new(), Vec::new(), Vec::new());
        for key in &tasks {
            task_instance.push(key.0.as_str());
            task_execution.push(key.1);
            task_number.push(i64::from(key.2));
        }
        let rows = sqlx::query(PRELOAD)
            .bind(&ids)
            .bind(&raised)
            .bind(task_instance)
            .bind(task_execution)
            .bind(task_number)
            .bind(pushes)
            .bind(starts)
            .fetch_all(&mut *self.connection)
            .await?;
        for id in &ids {
            self.instances.insert(id.clone(), None);
        }
        for id in raised {
            self.inbox_stored.insert(id, Size::default());
        }
        for key in tasks {
            self.tasks_stored.insert(key, None);
        }
        for (n, row) in rows.iter().enumerate() {
            use sqlx::Row;
            if n == 0 {
                let reserved = |column: &str| -> Result<Vec<i64>, StoreError> {
                    let mut ids: Vec<i64> = row.try_get(column)?;
                    ids.sort_unstable();
                    Ok(ids)
                };
                self.inbox_ids.extend(reserved("inbox_ids")?);
                self.execution_ids.extend(reserved("execution_ids")?);
            }
            if row.try_get::<Option<String>, _>("id")?.is_none() {
                continue;
            }
            let instance = loaded(row)?;
            let id = instance.state.id.clone();
            if let Some(events) = row.try_get::<Option<i64>, _>("inbox_events")? {
                let bytes = row.try_get::<Option<i64>, _>("inbox_bytes")?.unwrap_or(0);
                self.inbox_stored.insert(
                    id.clone(),
                    Size {
                        events: u64::try_from(events).unwrap_or(0),
                        bytes: u64::try_from(bytes).unwrap_or(0),
                    },
                );
            }
            // (execution, task, attempt) of each task asked for, flattened.
            let stored: Vec<i64> = row.try_get("tasks")?;
            for task in stored.chunks_exact(3) {
                let number =
                    u32::try_from(task[1]).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                let attempt =
                    u32::try_from(task[2]).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                self.tasks_stored
                    .insert((id.clone(), task[0], number), Some(attempt));
            }
            self.instances.insert(id, Some(instance));
        }
        Ok(())
    }

    /// Ends the planning: the batch goes down the statement path.
    fn fallback<T>(&mut self, what: &str) -> Result<T, StoreError> {
        self.fallback = true;
        Err(StoreError::Write(format!(
            "{what} is written statement by statement"
        )))
    }

    /// The next id of `table`'s serial column, past what the preload
    /// reserved: a few more are reserved at a time, and ids are taken in
    /// ascending order, so the batch's inbox rows keep the order they were
    /// written in.
    async fn next_id(&mut self, table: &'static str) -> Result<i64, StoreError> {
        let pool = if table == "inbox" {
            &mut self.inbox_ids
        } else {
            &mut self.execution_ids
        };
        if let Some(id) = pool.pop_front() {
            return Ok(id);
        }
        let count = i64::try_from((self.writes * 2).max(RESERVE_AT_LEAST)).unwrap_or(1_024);
        let mut ids: Vec<i64> = sqlx::query_scalar(
            "SELECT nextval(pg_get_serial_sequence($1, 'id')) FROM generate_series(1, $2)",
        )
        .bind(table)
        .bind(count)
        .fetch_all(&mut *self.connection)
        .await?;
        ids.sort_unstable();
        let pool = if table == "inbox" {
            &mut self.inbox_ids
        } else {
            &mut self.execution_ids
        };
        pool.extend(ids);
        pool.pop_front()
            .ok_or_else(|| StoreError::Write(format!("the {table} sequence gave no id")))
    }
}

impl Tx for Planned<'_> {
    fn me(&self) -> Option<&str> {
        self.me
    }

    async fn load(&mut self, id: &str) -> Result<Option<Loaded>, StoreError> {
        if let Some(known) = self.instances.get(id) {
            return Ok(known.clone());
        }
        let stored = PgTx(&mut *self.connection, self.me).load(id).await?;
        self.instances.insert(id.to_string(), stored.clone());
        Ok(stored)
    }

    async fn inbox_size(&mut self, id: &str) -> Result<Size, StoreError> {
        if self.inbox_shrunk.contains(id) {
            return self.fallback("a raise after an episode of the same instance");
        }
        let stored = match self.inbox_stored.get(id) {
            Some(size) => *size,
            None => {
                let size = PgTx(&mut *self.connection, self.me).inbox_size(id).await?;
                self.inbox_stored.insert(id.to_string(), size);
                size
            }
        };
        let pushed = self.inbox_pushed.get(id).copied().unwrap_or_default();
        Ok(stored.plus(pushed.events, pushed.bytes))
    }

    async fn task_pending(&mut self, id: &str, attempt: &Attempt) -> Result<bool, StoreError> {
        let key = (id.to_string(), attempt.execution, attempt.task);
        if self.tasks_finished.contains(&key) {
            return Ok(false);
        }
        if self.tasks_added.contains(&key) {
            return Ok(attempt.attempt == 0);
        }
        let stored = match self.tasks_stored.get(&key) {
            Some(stored) => *stored,
            None => {
                let stored: Option<i64> = sqlx::query_scalar(
                    "SELECT attempt FROM tasks WHERE instance_id = $1 AND execution = $2 AND task = $3",
                )
                .bind(id)
                .bind(attempt.execution)
                .bind(i64::from(attempt.task))
                .fetch_optional(&mut *self.connection)
                .await?;
                let stored = stored.and_then(|a| u32::try_from(a).ok());
                self.tasks_stored.insert(key, stored);
                stored
            }
        };
        Ok(stored == Some(attempt.attempt))
    }

    async fn journal(&mut self, _id: &str) -> Result<Vec<(Entry, i64)>, StoreError> {
        self.fallback("a journal read")
    }

    async fn inbox(&mut self, _id: &str) -> Result<Vec<InboxRow>, StoreError> {
        self.fallback("an inbox read")
    }

    async fn delete_inbox_rows(&mut self, id: &str, rows: &[i64]) -> Result<(), StoreError> {
        if !rows.is_empty() {
            self.inbox_shrunk.insert(id.to_string());
            self.rows.inbox_deleted.extend_from_slice(rows);
        }
        Ok(())
    }

    async fn park_inbox_rows(&mut self, _id: &str, rows: &[i64]) -> Result<(), StoreError> {
        self.rows.inbox_parked.extend_from_slice(rows);
        Ok(())
    }

    async fn append_journal(
        &mut self,
        id: &str,
        rows: &[(i64, String)],
        at: i64,
    ) -> Result<(), StoreError> {
        for (seq, entry) in rows {
            let journal = &mut self.rows.journal;
            journal.instance.push(id.to_string());
            journal.seq.push(*seq);
            journal.entry.push(entry.clone());
            journal.at.push(at);
        }
        if let Some(Some(instance)) = self.instances.get_mut(id) {
            instance.state.has_run |= !rows.is_empty();
        }
        Ok(())
    }

    async fn update_instance(
        &mut self,
        id: &str,
        update: RowUpdate,
        _now: i64,
    ) -> Result<(), StoreError> {
        if let Some(Some(instance)) = self.instances.get_mut(id) {
            let state = &mut instance.state;
            if let Some(status) = update.status {
                state.status = status;
            }
            let grow = |n: u64, by: i64| n.saturating_add_signed(by);
            state.history.events = grow(state.history.events, update.events);
            state.history.bytes = grow(state.history.bytes, update.bytes);
        }
        match self.rows.created.iter_mut().find(|c| c.new.id == id) {
            Some(created) => merge(&mut created.row, update),
            None => merge(self.rows.updates.entry(id.to_string()).or_default(), update),
        }
        Ok(())
    }

    async fn new_execution(&mut self, id: &str) -> Result<i64, StoreError> {
        let execution = self.next_id("executions").await?;
        self.rows.executions.0.push(execution);
        self.rows.executions.1.push(id.to_string());
        Ok(execution)
    }

    async fn insert_instance(
        &mut self,
        new: &NewInstance,
        execution: i64,
        now: i64,
    ) -> Result<(), StoreError> {
        if matches!(self.instances.get(&new.id), Some(Some(_))) {
            return self.fallback("an instance created over another");
        }
        let instance = Loaded {
            state: InstanceState {
                id: new.id.clone(),
                status: RuntimeStatus::Pending,
                execution,
                parent: new.parent.clone(),
                history: Size::default(),
                has_run: false,
            },
            name: new.name.clone(),
            digest: new.digest.clone(),
            input: new.input.clone(),
            created_at: now,
            owner: self.me.map(str::to_string),
            traceparent: new.traceparent.clone(),
        };
        self.instances.insert(new.id.clone(), Some(instance));
        self.rows.created.push(Created {
            new: new.clone(),
            execution,
            row: RowUpdate::default(),
        });
        Ok(())
    }

    async fn push_inbox(
        &mut self,
        id: &str,
        execution: i64,
        event: &str,
        visible_at: i64,
    ) -> Result<i64, StoreError> {
        let row = self.next_id("inbox").await?;
        let inbox = &mut self.rows.inbox;
        inbox.id.push(row);
        inbox.instance.push(id.to_string());
        inbox.execution.push(execution);
        inbox.event.push(event.to_string());
        inbox.visible_at.push(visible_at);
        let pushed = self.inbox_pushed.entry(id.to_string()).or_default();
        *pushed = pushed.plus(1, event.chars().count() as u64);
        Ok(row)
    }

    async fn insert_tasks(
        &mut self,
        target: &Target,
        tasks: &[(u32, String)],
        _now: i64,
    ) -> Result<(), StoreError> {
        for (task, call) in tasks {
            let key = (target.id.clone(), target.execution, *task);
            if self.tasks_finished.contains(&key) {
                return self.fallback("a task scheduled again in its batch");
            }
            self.tasks_added.insert(key);
            let added = &mut self.rows.tasks_added;
            added.instance.push(target.id.clone());
            added.execution.push(target.execution);
            added.task.push(i64::from(*task));
            added.call.push(call.clone());
        }
        Ok(())
    }

    async fn finish_task(&mut self, target: &Target, task: u32) -> Result<(), StoreError> {
        let key = (target.id.clone(), target.execution, task);
        if self.tasks_added.contains(&key) {
            return self.fallback("a task finished in the batch that scheduled it");
        }
        self.tasks_finished.insert(key.clone());
        self.rows.tasks_finished.push(key);
        Ok(())
    }

    async fn retry_task(
        &mut self,
        _target: &Target,
        _task: u32,
        _attempt: u32,
        _due_at: i64,
    ) -> Result<(), StoreError> {
        self.fallback("a retry")
    }

    async fn clear_pending(&mut self, _id: &str) -> Result<(), StoreError> {
        self.fallback("dropping an instance's pending work")
    }

    async fn begin_execution(&mut self, _next: NextExecution<'_>) -> Result<(), StoreError> {
        self.fallback("a new execution")
    }

    async fn purge(&mut self, _id: &str) -> Result<(), StoreError> {
        self.fallback("a purge")
    }
}

/// The statement a planned batch begins with. The reservations sit in a
/// row of their own, joined to the locked instances, so they come back
/// when no instance exists yet (a batch of starts).
const PRELOAD: &str = "\
WITH locked AS (SELECT id, name, status, execution, input, component_digest, parent_id, parent_execution, \
  parent_task, history_events, history_bytes, created_at, owner, traceparent, \
  history_events > 0 AS has_run, \
  CASE WHEN id = ANY($2) THEN (SELECT COUNT(*) FROM inbox b WHERE b.instance_id = instances.id) END AS inbox_events, \
  CASE WHEN id = ANY($2) THEN (SELECT COALESCE(SUM(LENGTH(event)), 0)::BIGINT FROM inbox b \
    WHERE b.instance_id = instances.id) END AS inbox_bytes, \
  ARRAY(SELECT unnest(ARRAY[t.execution, t.task, t.attempt]) FROM tasks t \
    JOIN UNNEST($3::TEXT[], $4::BIGINT[], $5::BIGINT[]) AS k(i, e, n) \
    ON t.instance_id = k.i AND t.execution = k.e AND t.task = k.n WHERE t.instance_id = instances.id) AS tasks \
  FROM instances WHERE id = ANY($1) ORDER BY id FOR UPDATE), \
reserved AS (SELECT \
  ARRAY(SELECT nextval(pg_get_serial_sequence('inbox', 'id')) FROM generate_series(1, $6::BIGINT)) AS inbox_ids, \
  ARRAY(SELECT nextval(pg_get_serial_sequence('executions', 'id')) FROM generate_series(1, $7::BIGINT)) AS execution_ids) \
SELECT r.inbox_ids, r.execution_ids, l.* FROM reserved r LEFT JOIN locked l ON true";

/// Batches planned and batches sent down the statement path, for tests.
#[cfg(test)]
pub(super) mod counts {
    use std::sync::atomic::AtomicU64;
    pub static PLANNED: AtomicU64 = AtomicU64::new(0);
    pub static STATEMENTS: AtomicU64 = AtomicU64::new(0);
}
