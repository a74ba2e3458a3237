//! The rows a planned batch writes ([`super::batch`]), and the
//! parts of the batch's one statement ([`super::statement`]) that
//! write them: a data-modifying `WITH` part per kind of row the batch has
//! (inbox rows deleted, parked and added, journal rows, executions,
//! instances created and updated, tasks added, finished and settled). Only
//! the parts a batch needs are sent: each shape is prepared once per
//! connection, and an empty part costs the server nothing.
//!
//! The parts see one snapshot, not each other's rows. The planning made
//! sure no two of them touch one row (an instance created in the batch
//! carries its later changes; a row deleted and parked is only deleted, as
//! it would be in either order; an instance's pending work dropped takes
//! the rows of it the batch gathered before, in memory, and the stored ones
//! by the statement).
//!
//! Episodes written under their fence ([`Fence`]) update their instance
//! row only where it is still as they ran on it; the statement's last part
//! counts the rows so updated and, if one is missing, refuses the whole
//! statement (`fences_held`, migration 0011): nothing of the batch is
//! written, and no `NOTIFY` leaves.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::statement::Statement;
use crate::core::instance::{NewInstance, RuntimeStatus};
use crate::store::error::StoreError;
use crate::store::tx::RowUpdate;

/// A task's key: instance, execution, task number.
pub(super) type TaskKey = (String, i64, u32);

/// An episode written without a read: its instance row is updated only if
/// it still has this execution, an active status, this host as its owner,
/// and `replayed` journal entries ([`crate::core::fence::admits_episode`]).
pub(super) struct Fence {
    pub id: String,
    pub execution: i64,
    pub replayed: u64,
    /// The inbox rows an episode on an event in hand saw (the event not
    /// counted): the inbox must hold exactly as many, or a row another
    /// host committed would be overtaken by the event.
    pub inbox: Option<u64>,
}

/// The rows a planned batch writes, by table.
#[derive(Default)]
pub(super) struct Rows {
    pub inbox_deleted: Vec<i64>,
    /// (instance, row).
    pub inbox_parked: Vec<(String, i64)>,
    pub inbox: InboxInserts,
    pub journal: JournalInserts,
    pub executions: (Vec<i64>, Vec<String>),
    pub created: Vec<Created>,
    /// Changes to rows that existed before the batch, merged per instance.
    pub updates: BTreeMap<String, RowUpdate>,
    pub tasks_added: TaskInserts,
    pub tasks_finished: Vec<TaskKey>,
    /// Instances whose stored inbox rows and tasks are all deleted.
    pub cleared: Vec<String>,
    /// Instance rows updated only where their episode's fence holds.
    pub fences: Vec<Fence>,
    /// Tasks whose result was written with the episode run on it: each row
    /// is deleted only if it still waits for that attempt, and counted
    /// with the fences.
    pub tasks_settled: Vec<(TaskKey, u32)>,
}

impl Rows {
    /// Forgets the inbox rows and tasks gathered for instance `id` (its
    /// pending work is dropped after them).
    pub fn drop_gathered_of(&mut self, id: &str) {
        let inbox = std::mem::take(&mut self.inbox);
        for n in 0..inbox.id.len() {
            if inbox.instance[n] != id {
                self.inbox.id.push(inbox.id[n]);
                self.inbox.instance.push(inbox.instance[n].clone());
                self.inbox.execution.push(inbox.execution[n]);
                self.inbox.event.push(inbox.event[n].clone());
                self.inbox.visible_at.push(inbox.visible_at[n]);
            }
        }
        let tasks = std::mem::take(&mut self.tasks_added);
        for n in 0..tasks.task.len() {
            if tasks.instance[n] != id {
                self.tasks_added.instance.push(tasks.instance[n].clone());
                self.tasks_added.execution.push(tasks.execution[n]);
                self.tasks_added.task.push(tasks.task[n]);
                self.tasks_added.call.push(tasks.call[n].clone());
            }
        }
    }
}

#[derive(Default)]
pub(super) struct InboxInserts {
    pub id: Vec<i64>,
    pub instance: Vec<String>,
    pub execution: Vec<i64>,
    pub event: Vec<String>,
    pub visible_at: Vec<i64>,
}

#[derive(Default)]
pub(super) struct JournalInserts {
    pub instance: Vec<String>,
    pub seq: Vec<i64>,
    pub entry: Vec<String>,
    pub at: Vec<i64>,
}

#[derive(Default)]
pub(super) struct TaskInserts {
    pub instance: Vec<String>,
    pub execution: Vec<i64>,
    pub task: Vec<i64>,
    pub call: Vec<String>,
}

/// An instance created in the batch, with the changes later writes of the
/// batch made to it.
pub(super) struct Created {
    pub new: NewInstance,
    pub execution: i64,
    pub row: RowUpdate,
}

/// Merges `later` into `row`, as two `UPDATE`s one after the other would.
pub(super) fn merge(row: &mut RowUpdate, later: RowUpdate) {
    row.status = later.status.or(row.status.take());
    row.output = later.output.or(row.output.take());
    row.custom_status = later.custom_status.or(row.custom_status.take());
    row.events = row.events.saturating_add(later.events);
    row.bytes = row.bytes.saturating_add(later.bytes);
}

/// Adds a planned batch's rows to its statement, a part per kind of row.
pub(super) fn add_rows(s: &mut Statement, rows: Rows) -> Result<(), StoreError> {
    let now = s.now().to_string();
    let deleted: HashSet<i64> = rows.inbox_deleted.iter().copied().collect();
    let cleared: HashSet<&str> = rows.cleared.iter().map(String::as_str).collect();
    let parked: Vec<i64> = rows
        .inbox_parked
        .into_iter()
        .filter(|(instance, id)| !deleted.contains(id) && !cleared.contains(instance.as_str()))
        .map(|(_, id)| id)
        .collect();
    let tasks_finished: Vec<TaskKey> = rows
        .tasks_finished
        .into_iter()
        .filter(|(instance, _, _)| !cleared.contains(instance.as_str()))
        .collect();
    // Settled tasks are deleted by their own part, which counts them: an
    // instance's pending work dropped in the same statement leaves them
    // to it (two deletes of one row in one statement: only one finds it).
    let settled = rows.tasks_settled.len();
    let mut unsettled = "true".to_string();
    if settled > 0 {
        let (mut instance, mut execution, mut task, mut attempt) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for ((i, e, t), a) in rows.tasks_settled {
            instance.push(i);
            execution.push(e);
            task.push(i64::from(t));
            attempt.push(i64::from(a));
        }
        let columns = [
            s.bind(instance)? + "::TEXT[]",
            s.bind(execution)? + "::BIGINT[]",
            s.bind(task)? + "::BIGINT[]",
            s.bind(attempt)? + "::BIGINT[]",
        ];
        let keys = columns.join(", ");
        s.part(
            "tasks_settled",
            format!(
                "DELETE FROM tasks t USING UNNEST({keys}) AS f(i, e, n, a) \
                 WHERE t.instance_id = f.i AND t.execution = f.e AND t.task = f.n AND t.attempt = f.a RETURNING 1"
            ),
        );
        unsettled = format!(
            "NOT EXISTS (SELECT 1 FROM UNNEST({keys}) AS f(i, e, n, a) \
             WHERE t.instance_id = f.i AND t.execution = f.e AND t.task = f.n)"
        );
    }
    if !rows.cleared.is_empty() {
        let ids = s.bind(rows.cleared.clone())?;
        s.part(
            "inbox_cleared",
            format!("DELETE FROM inbox WHERE instance_id = ANY({ids}::TEXT[])"),
        );
        s.part(
            "tasks_cleared",
            format!("DELETE FROM tasks t WHERE t.instance_id = ANY({ids}::TEXT[]) AND {unsettled}"),
        );
    }
    if !rows.inbox_deleted.is_empty() {
        let ids = s.bind(rows.inbox_deleted)?;
        s.part(
            "inbox_deleted",
            format!("DELETE FROM inbox WHERE id = ANY({ids}::BIGINT[])"),
        );
    }
    if !parked.is_empty() {
        let ids = s.bind(parked)?;
        s.part(
            "inbox_parked",
            format!("UPDATE inbox SET parked = 1 WHERE id = ANY({ids}::BIGINT[])"),
        );
    }
    if !rows.inbox.id.is_empty() {
        let inbox = rows.inbox;
        let columns = [
            s.bind(inbox.id)? + "::BIGINT[]",
            s.bind(inbox.instance)? + "::TEXT[]",
            s.bind(inbox.execution)? + "::BIGINT[]",
            s.bind(inbox.event)? + "::TEXT[]",
            s.bind(inbox.visible_at)? + "::BIGINT[]",
        ];
        s.part(
            "inbox_added",
            format!(
                "INSERT INTO inbox (id, instance_id, execution, event, visible_at) SELECT * FROM UNNEST({})",
                columns.join(", ")
            ),
        );
    }
    if !rows.journal.seq.is_empty() {
        let journal = rows.journal;
        let columns = [
            s.bind(journal.instance)? + "::TEXT[]",
            s.bind(journal.seq)? + "::BIGINT[]",
            s.bind(journal.entry)? + "::TEXT[]",
            s.bind(journal.at)? + "::BIGINT[]",
        ];
        s.part(
            "journal_added",
            format!(
                "INSERT INTO journal (instance_id, seq, entry, recorded_at) SELECT * FROM UNNEST({})",
                columns.join(", ")
            ),
        );
    }
    if !rows.executions.0.is_empty() {
        let columns = [
            s.bind(rows.executions.0)? + "::BIGINT[]",
            s.bind(rows.executions.1)? + "::TEXT[]",
        ];
        s.part(
            "executions_added",
            format!(
                "INSERT INTO executions (id, instance_id) SELECT * FROM UNNEST({})",
                columns.join(", ")
            ),
        );
    }
    if !rows.created.is_empty() {
        let c = Columns::of_created(rows.created);
        let me = s.me()?;
        let columns = [
            s.bind(c.id)? + "::TEXT[]",
            s.bind(c.name)? + "::TEXT[]",
            s.bind(c.status)? + "::TEXT[]",
            s.bind(c.input)? + "::TEXT[]",
            s.bind(c.output)? + "::TEXT[]",
            s.bind(c.custom_status)? + "::TEXT[]",
            s.bind(c.digest)? + "::TEXT[]",
            s.bind(c.parent_id)? + "::TEXT[]",
            s.bind(c.parent_execution)? + "::BIGINT[]",
            s.bind(c.parent_task)? + "::BIGINT[]",
            s.bind(c.execution)? + "::BIGINT[]",
            s.bind(c.events)? + "::BIGINT[]",
            s.bind(c.bytes)? + "::BIGINT[]",
            s.bind(c.traceparent)? + "::TEXT[]",
            s.bind(c.activity_set)? + "::TEXT[]",
            s.bind(c.start_at)? + "::BIGINT[]",
            s.bind(c.caller)? + "::TEXT[]",
        ];
        // A sub-orchestration records its parent's caller (the parent's row
        // was committed before the episode that starts it).
        s.part(
            "instances_added",
            format!(
                "INSERT INTO instances (id, name, status, input, output, custom_status, component_digest, \
                 parent_id, parent_execution, parent_task, execution, history_events, history_bytes, traceparent, \
                 activity_set, start_at, created_at, updated_at, owner, caller) \
                 SELECT c.id, c.name, c.status, c.input, c.output, c.custom_status, c.digest, c.parent_id, \
                 c.parent_execution, c.parent_task, c.execution, c.events, c.bytes, c.traceparent, \
                 c.activity_set, c.start_at, {now}, {now}, {me}::TEXT, \
                 COALESCE(c.caller, (SELECT p.caller FROM instances p WHERE p.id = c.parent_id)) \
                 FROM UNNEST({}) AS c(id, name, status, input, output, custom_status, digest, parent_id, \
                 parent_execution, parent_task, execution, events, bytes, traceparent, activity_set, start_at, caller)",
                columns.join(", ")
            ),
        );
    }
    let fences = rows.fences.len();
    if !rows.updates.is_empty() {
        let c = Columns::of_updates(rows.updates, rows.fences);
        let columns = [
            s.bind(c.id)? + "::TEXT[]",
            s.bind(c.status)? + "::TEXT[]",
            s.bind(c.output)? + "::TEXT[]",
            s.bind(c.custom_status)? + "::TEXT[]",
            s.bind(c.events)? + "::BIGINT[]",
            s.bind(c.bytes)? + "::BIGINT[]",
            s.bind(c.fence_execution)? + "::BIGINT[]",
            s.bind(c.fence_replayed)? + "::BIGINT[]",
            s.bind(c.fence_inbox)? + "::BIGINT[]",
        ];
        // The fence of an episode written without a read: the rule of
        // `core::fence::admits_episode`, on the row as it stands.
        let fence = match fences {
            0 => "true".to_string(),
            _ => {
                let me = s.me()?;
                format!(
                    "(u.fence_execution IS NULL OR (i.execution = u.fence_execution \
                     AND i.history_events = u.fence_replayed \
                     AND i.status IN ('Pending', 'Running', 'ContinuedAsNew') AND i.owner = {me}::TEXT \
                     AND (u.fence_inbox IS NULL \
                          OR (SELECT COUNT(*) FROM inbox b WHERE b.instance_id = i.id) = u.fence_inbox)))"
                )
            }
        };
        s.part(
            "instances_updated",
            format!(
                "UPDATE instances i SET status = COALESCE(u.status, i.status), \
                 output = COALESCE(u.output, i.output), custom_status = COALESCE(u.custom_status, i.custom_status), \
                 history_events = i.history_events + u.events, history_bytes = i.history_bytes + u.bytes, \
                 updated_at = {now} \
                 FROM UNNEST({}) AS u(id, status, output, custom_status, events, bytes, fence_execution, fence_replayed, fence_inbox) \
                 WHERE i.id = u.id AND {fence} RETURNING u.fence_execution IS NOT NULL AS fenced",
                columns.join(", ")
            ),
        );
    }
    if !rows.tasks_added.task.is_empty() {
        let added = rows.tasks_added;
        let me = s.me()?;
        let columns = [
            s.bind(added.instance)? + "::TEXT[]",
            s.bind(added.execution)? + "::BIGINT[]",
            s.bind(added.task)? + "::BIGINT[]",
            s.bind(added.call)? + "::TEXT[]",
        ];
        s.part(
            "tasks_added",
            format!(
                "INSERT INTO tasks (instance_id, execution, task, call, attempt, due_at, owner) \
                 SELECT t.*, 0, {now}, {me}::TEXT FROM UNNEST({}) AS t",
                columns.join(", ")
            ),
        );
    }
    if !tasks_finished.is_empty() {
        let (mut instance, mut execution, mut task) = (Vec::new(), Vec::new(), Vec::new());
        for (i, e, t) in tasks_finished {
            instance.push(i);
            execution.push(e);
            task.push(i64::from(t));
        }
        let columns = [
            s.bind(instance)? + "::TEXT[]",
            s.bind(execution)? + "::BIGINT[]",
            s.bind(task)? + "::BIGINT[]",
        ];
        s.part(
            "tasks_finished",
            format!(
                "DELETE FROM tasks t USING UNNEST({}) AS f(i, e, n) \
                 WHERE t.instance_id = f.i AND t.execution = f.e AND t.task = f.n",
                columns.join(", ")
            ),
        );
    }
    if fences + settled > 0 {
        let updated = match fences {
            0 => "0",
            _ => "(SELECT COUNT(*) FROM instances_updated WHERE fenced)",
        };
        let settled_rows = match settled {
            0 => "0",
            _ => "(SELECT COUNT(*) FROM tasks_settled)",
        };
        s.must_hold(fences + settled, format!("{updated} + {settled_rows}"));
    }
    Ok(())
}

/// Instance rows as columns, for `UNNEST`.
#[derive(Default)]
struct Columns {
    id: Vec<String>,
    name: Vec<String>,
    status: Vec<Option<&'static str>>,
    input: Vec<String>,
    output: Vec<Option<String>>,
    custom_status: Vec<Option<String>>,
    digest: Vec<String>,
    parent_id: Vec<Option<String>>,
    parent_execution: Vec<Option<i64>>,
    parent_task: Vec<Option<i64>>,
    execution: Vec<i64>,
    events: Vec<i64>,
    bytes: Vec<i64>,
    traceparent: Vec<Option<String>>,
    activity_set: Vec<Option<String>>,
    start_at: Vec<Option<i64>>,
    caller: Vec<Option<String>>,
    /// An updated row's fence: the execution and journal length it must have.
    fence_execution: Vec<Option<i64>>,
    fence_replayed: Vec<Option<i64>>,
    fence_inbox: Vec<Option<i64>>,
}

impl Columns {
    fn of_created(created: Vec<Created>) -> Self {
        let mut c = Self::default();
        for Created {
            new,
            execution,
            row,
        } in created
        {
            c.id.push(new.id);
            c.name.push(new.name);
            c.status
                .push(Some(row.status.unwrap_or(RuntimeStatus::Pending).as_str()));
            c.input.push(new.input);
            c.output.push(row.output);
            c.custom_status.push(row.custom_status);
            c.digest.push(new.digest);
            c.parent_id.push(new.parent.as_ref().map(|p| p.id.clone()));
            c.parent_execution
                .push(new.parent.as_ref().map(|p| p.execution));
            c.parent_task
                .push(new.parent.as_ref().map(|p| i64::from(p.task)));
            c.execution.push(execution);
            c.events.push(row.events);
            c.bytes.push(row.bytes);
            c.traceparent.push(new.traceparent);
            c.activity_set.push(new.activity_set);
            c.start_at.push(new.start_at);
            c.caller.push(new.caller);
        }
        c
    }

    /// The updates, each with its fence if it has one.
    fn of_updates(updates: BTreeMap<String, RowUpdate>, fences: Vec<Fence>) -> Self {
        let fences: HashMap<String, Fence> =
            fences.into_iter().map(|f| (f.id.clone(), f)).collect();
        let mut c = Self::default();
        for (id, row) in updates {
            let fence = fences.get(&id);
            c.fence_execution.push(fence.map(|f| f.execution));
            c.fence_replayed
                .push(fence.map(|f| i64::try_from(f.replayed).unwrap_or(i64::MAX)));
            c.fence_inbox.push(
                fence
                    .and_then(|f| f.inbox)
                    .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
            );
            c.id.push(id);
            c.status.push(row.status.map(RuntimeStatus::as_str));
            c.output.push(row.output);
            c.custom_status.push(row.custom_status);
            c.events.push(row.events);
            c.bytes.push(row.bytes);
        }
        c
    }
}
