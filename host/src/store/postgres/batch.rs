//! A batch of durable writes on PostgreSQL in a handful of round trips,
//! whatever its size: the instances it names are read and locked by one
//! statement, each write is decided in memory on what the batch read and
//! wrote so far, and every row it writes goes to the database in one
//! statement of set-based inserts, updates and deletes
//! ([`super::flush`]), with
//! the batch's `NOTIFY`s and its commit mark.
//!
//! An episode's write needs no read at all when nothing else in the batch
//! touches its instance: its fence ([`crate::core::fence::admits_episode`])
//! goes into the statement as the `WHERE` of its instance's update, and a
//! fence that does not hold refuses the whole statement
//! ([`FENCE_REFUSED`]). An instance started, by a client or as a
//! sub-orchestration, is likewise assumed new, the id's unique key
//! refusing the statement if it is not. Refused,
//! the batch is planned again with [`Care::Careful`]: every instance read
//! and locked first, as the statement path would. A batch of such episodes
//! and starts alone is one statement and no transaction around it.
//!
//! The decisions are the statement path's own code ([`crate::store::writes`]):
//! [`Planned`] is a [`Tx`] whose reads answer from the batch's view of the
//! rows and whose writes are gathered. Gathered rows are written in a fixed
//! order by table, which is only right when no two of them touch one row
//! in an order that matters. Dropping an instance's pending work (an
//! instance that ends) is planned: what the batch gathered for it goes from
//! memory, what was stored before goes by the statement. The rare changes
//! that would need an order (a purge, a new execution, a retry, a task
//! finished in the batch that scheduled it) end the planning, and the batch
//! goes down the statement path in a transaction where nothing was written
//! yet.

use std::collections::{HashMap, HashSet};

use sqlx::PgConnection;

use super::flush::{merge, Created, Fence, Rows, TaskKey};
use super::ids::{IdPool, Sequence};
use super::tx::{loaded, PgTx};
use crate::core::instance::{InstanceState, NewInstance, RuntimeStatus, Size};
use crate::core::journal::Entry;
use crate::core::lifecycle::task_done::Attempt;
use crate::store::durable_records::{
    ArrivalWritten, Arriving, InboxRow, Loaded, Target, Write, Written,
};
use crate::store::error::StoreError;
use crate::store::tx::{NextExecution, RowUpdate, Tx};
use crate::store::writes::{write_durable, write_fenced_episode};

/// The SQLSTATE of a statement refused because an episode's fence did not
/// hold (raised by the hub's `fences_held`, migration 0011).
pub(super) const FENCE_REFUSED: &str = "AH409";

/// How much a batch trusts what its writes say of their instances.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Care {
    /// Episodes on instances no other write of the batch names are written
    /// under their fence without a read; the sub-orchestrations they start
    /// are assumed new.
    Fenced,
    /// Every instance is read and locked before anything is decided.
    Careful,
}

/// Which of `writes` need no read: episodes of a host that owns what it
/// runs, which go under their fence, and starts, whose instance is assumed
/// new (its id's unique key refuses the statement if not), each on an
/// instance no other write of the batch names (another write would decide
/// on the instance as the batch left it, which the statement cannot show).
pub(super) fn fenced(writes: &[Write], me: Option<&str>, care: Care) -> Vec<bool> {
    if care == Care::Careful {
        return vec![false; writes.len()];
    }
    let mut named: HashMap<&str, usize> = HashMap::new();
    for write in writes {
        if let Some(id) = names(write) {
            *named.entry(id).or_default() += 1;
        }
    }
    writes
        .iter()
        .map(|write| match write {
            Write::Episode { target, .. } | Write::ArrivalAndEpisode { target, .. } => {
                me.is_some() && named.get(target.id.as_str()) == Some(&1)
            }
            Write::Start(new) => named.get(new.id.as_str()) == Some(&1),
            _ => false,
        })
        .collect()
}

/// The instance a write names, if any.
fn names(write: &Write) -> Option<&str> {
    match write {
        Write::Episode { target, .. } | Write::ArrivalAndEpisode { target, .. } => Some(&target.id),
        Write::TaskDone { instance, .. }
        | Write::Raise { instance, .. }
        | Write::Manage { instance, .. } => Some(instance),
        Write::Start(new) => Some(&new.id),
        Write::Run(_) => None,
    }
}

/// Decides `writes` (none of them [`Write::Run`]) in memory, in order;
/// `fenced` says which go under their fence (see [`fenced`]).
/// `Ok(None)`: one of them needs the statement path; nothing was written.
pub(super) async fn plan(
    connection: &mut PgConnection,
    me: Option<&str>,
    writes: &[Write],
    fenced: &[bool],
    now: i64,
    ids: &mut IdPool,
) -> Result<Option<(Vec<Written>, Rows)>, StoreError> {
    let care = match fenced.iter().any(|f| *f) {
        true => Care::Fenced,
        false => Care::Careful,
    };
    let mut planned = Planned::new(connection, me, writes.len(), ids, care);
    planned.preload(writes, fenced).await?;
    let mut results = Vec::with_capacity(writes.len());
    for (write, fenced) in writes.iter().zip(fenced) {
        let written = match (write, fenced) {
            (
                Write::Episode {
                    target,
                    replayed,
                    effects,
                },
                true,
            ) => {
                planned.rows.fences.push(Fence {
                    id: target.id.clone(),
                    execution: target.execution,
                    replayed: *replayed,
                    inbox: None,
                });
                planned.rows.updates.entry(target.id.clone()).or_default();
                write_fenced_episode(
                    &mut planned,
                    target.clone(),
                    *replayed,
                    effects.clone(),
                    now,
                )
                .await
            }
            (
                Write::ArrivalAndEpisode {
                    arriving,
                    target,
                    replayed,
                    effects,
                    ..
                },
                true,
            ) => {
                // An event in hand must not overtake a row its episode
                // did not see (another host's raise).
                let inbox = match arriving {
                    Arriving::Event { held, .. } => Some(*held),
                    Arriving::Result { .. } => None,
                };
                planned.rows.fences.push(Fence {
                    id: target.id.clone(),
                    execution: target.execution,
                    replayed: *replayed,
                    inbox,
                });
                planned.rows.updates.entry(target.id.clone()).or_default();
                if let Arriving::Result { attempt, .. } = arriving {
                    // The task must still wait for this attempt: its row is
                    // deleted only if so, and counted with the fences.
                    let key = (target.id.clone(), attempt.execution, attempt.task);
                    planned.tasks_finished.insert(key.clone());
                    planned.rows.tasks_settled.push((key, attempt.attempt));
                }
                write_fenced_episode(
                    &mut planned,
                    target.clone(),
                    *replayed,
                    effects.clone(),
                    now,
                )
                .await
                .map(|written| match written {
                    Written::Episode(Some(applied)) => {
                        Written::ArrivalAndEpisode(ArrivalWritten::WithEpisode(applied))
                    }
                    other => other,
                })
            }
            _ => write_durable(&mut planned, write.clone(), now).await,
        };
        match written {
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
    {
        use std::sync::atomic::Ordering::Relaxed;
        counts::PLANNED.fetch_add(1, Relaxed);
        counts::FENCED.fetch_add(planned.rows.fences.len() as u64, Relaxed);
    }
    Ok(Some((results, planned.rows)))
}

struct Planned<'c> {
    connection: &'c mut PgConnection,
    me: Option<&'c str>,
    /// Writes in the batch, to size reservations.
    writes: usize,
    ids: &'c mut IdPool,
    care: Care,
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
    /// Instances whose pending work the batch dropped.
    cleared: HashSet<String>,
    rows: Rows,
    /// Set when a write needs the statement path.
    fallback: bool,
}

impl<'c> Planned<'c> {
    fn new(
        connection: &'c mut PgConnection,
        me: Option<&'c str>,
        writes: usize,
        ids: &'c mut IdPool,
        care: Care,
    ) -> Self {
        Self {
            connection,
            me,
            writes,
            ids,
            care,
            instances: HashMap::new(),
            inbox_stored: HashMap::new(),
            inbox_pushed: HashMap::new(),
            inbox_shrunk: HashSet::new(),
            tasks_stored: HashMap::new(),
            tasks_added: HashSet::new(),
            tasks_finished: HashSet::new(),
            cleared: HashSet::new(),
            rows: Rows::default(),
            fallback: false,
        }
    }

    /// One statement: reads and locks, in id order (two hosts lock the
    /// instances they share in the same order), every instance the writes
    /// not under their fence name, with the inbox sizes a raise checks and
    /// the tasks whose results arrive. Sent only when there is one.
    async fn preload(&mut self, writes: &[Write], fenced: &[bool]) -> Result<(), StoreError> {
        let mut ids = Vec::new();
        let mut raised = Vec::new();
        let mut tasks: Vec<TaskKey> = Vec::new();
        for (write, fenced) in writes.iter().zip(fenced) {
            match write {
                _ if *fenced => {}
                Write::Episode { target, .. } => ids.push(target.id.clone()),
                Write::TaskDone {
                    instance, attempt, ..
                } => {
                    ids.push(instance.clone());
                    tasks.push((instance.clone(), attempt.execution, attempt.task));
                }
                Write::ArrivalAndEpisode {
                    target, arriving, ..
                } => {
                    ids.push(target.id.clone());
                    match arriving {
                        Arriving::Result { attempt, .. } => {
                            tasks.push((target.id.clone(), attempt.execution, attempt.task))
                        }
                        Arriving::Event { .. } => raised.push(target.id.clone()),
                    }
                }
                Write::Start(new) => ids.push(new.id.clone()),
                Write::Raise { instance, .. } => {
                    ids.push(instance.clone());
                    raised.push(instance.clone());
                }
                Write::Manage { instance, .. } => ids.push(instance.clone()),
                Write::Run(_) => {}
            }
        }
        if ids.is_empty() {
            return Ok(());
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
        for row in &rows {
            use sqlx::Row;
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

    /// The next id of `sequence`, from the writer's reserved ids (a few
    /// more than the batch may need are reserved when it runs out).
    async fn next_id(&mut self, sequence: Sequence) -> Result<i64, StoreError> {
        let hint = self.writes.saturating_mul(2);
        self.ids.next(self.connection, sequence, hint).await
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
        // Only the id of an instance being started is loaded without being
        // preloaded: it is assumed new (the statement is refused if not).
        if self.care == Care::Fenced {
            self.instances.insert(id.to_string(), None);
            return Ok(None);
        }
        let stored = PgTx(&mut *self.connection, self.me).load(id).await?;
        self.instances.insert(id.to_string(), stored.clone());
        Ok(stored)
    }

    async fn look_up(&mut self, id: &str) -> Result<Option<Loaded>, StoreError> {
        if self.care == Care::Fenced && !self.instances.contains_key(id) {
            return self.fallback("an event sent to an instance the batch did not read");
        }
        self.load(id).await
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
        if self.tasks_finished.contains(&key) || self.cleared.contains(id) {
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

    async fn park_inbox_rows(&mut self, id: &str, rows: &[i64]) -> Result<(), StoreError> {
        self.rows
            .inbox_parked
            .extend(rows.iter().map(|row| (id.to_string(), *row)));
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

    async fn caller_of(&mut self, _id: &str) -> Result<Option<String>, StoreError> {
        // Read only to start a finished id again, which purges it first:
        // that goes down the statement path anyway.
        self.fallback("a finished instance started again")
    }

    async fn new_execution(&mut self, id: &str) -> Result<i64, StoreError> {
        let execution = self.next_id(Sequence::Executions).await?;
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
            activity_set: new.activity_set.clone(),
            start_at: new.start_at,
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
        let row = self.next_id(Sequence::Inbox).await?;
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

    /// What the batch gathered for the instance so far goes; what was
    /// stored before is deleted by the statement, which does not see the
    /// rows it inserts itself: the same rows go as if deleted here.
    async fn clear_pending(&mut self, id: &str) -> Result<(), StoreError> {
        self.rows.drop_gathered_of(id);
        self.tasks_added.retain(|key| key.0 != id);
        self.inbox_pushed.remove(id);
        self.inbox_shrunk.insert(id.to_string());
        if self.cleared.insert(id.to_string()) {
            self.rows.cleared.push(id.to_string());
        }
        Ok(())
    }

    async fn begin_execution(&mut self, _next: NextExecution<'_>) -> Result<(), StoreError> {
        self.fallback("a new execution")
    }

    async fn purge(&mut self, _id: &str) -> Result<(), StoreError> {
        self.fallback("a purge")
    }

    async fn move_version(
        &mut self,
        _id: &str,
        _digest: &str,
        _activity_set: Option<&str>,
    ) -> Result<(), StoreError> {
        self.fallback("a version move")
    }

    async fn reset_journal(&mut self, _id: &str) -> Result<(), StoreError> {
        self.fallback("a rewind")
    }

    async fn set_tags(&mut self, _id: &str, _tags: &str) -> Result<(), StoreError> {
        self.fallback("a sub-orchestration's tags")
    }
}

/// The statement a planned batch begins with, when it has instances to read.
const PRELOAD: &str = "\
SELECT id, name, status, execution, input, component_digest, parent_id, parent_execution, \
  parent_task, history_events, history_bytes, created_at, owner, traceparent, activity_set, start_at, \
  history_events > 0 AS has_run, \
  CASE WHEN id = ANY($2) THEN (SELECT COUNT(*) FROM inbox b WHERE b.instance_id = instances.id) END AS inbox_events, \
  CASE WHEN id = ANY($2) THEN (SELECT COALESCE(SUM(LENGTH(event)), 0)::BIGINT FROM inbox b \
    WHERE b.instance_id = instances.id) END AS inbox_bytes, \
  ARRAY(SELECT unnest(ARRAY[t.execution, t.task, t.attempt]) FROM tasks t \
    JOIN UNNEST($3::TEXT[], $4::BIGINT[], $5::BIGINT[]) AS k(i, e, n) \
    ON t.instance_id = k.i AND t.execution = k.e AND t.task = k.n WHERE t.instance_id = instances.id) AS tasks \
  FROM instances WHERE id = ANY($1) ORDER BY id FOR UPDATE";

/// Batches planned and batches sent down the statement path, for tests.
#[cfg(test)]
pub(in crate::store) mod counts {
    use std::sync::atomic::AtomicU64;
    pub static PLANNED: AtomicU64 = AtomicU64::new(0);
    pub static STATEMENTS: AtomicU64 = AtomicU64::new(0);
    /// Episodes written under their fence, without a read.
    pub static FENCED: AtomicU64 = AtomicU64::new(0);
    /// Batches whose fenced writes did not hold, decided again carefully.
    pub static MOVED_ON: AtomicU64 = AtomicU64::new(0);
}
