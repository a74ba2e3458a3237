//! Orchestration instances: their rows, the state a decision reads, and the
//! writes that carry out management operations (through the committer).

use crate::core::failure::TaskOutcome;
use std::sync::Arc;

use serde::Serialize;
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::{Any, Row};

use super::durable_records::{Applied, ArrivalWritten, Arriving, Target, Write, Written};
use super::error::StoreError;
use super::open::Store;
use crate::core::effects::Effect;
use crate::core::instance::{NewInstance, RuntimeStatus};
use crate::core::lifecycle::task_done::Attempt;
use crate::core::lifecycle::Change;
use crate::core::lifecycle::Operation;
use crate::core::lifecycle::TaskFate;
use crate::core::limits::{LimitError, Limits};
use crate::core::sdk_entities;

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
    pub execution: i64,
    pub created_at: i64,
    pub updated_at: i64,
    /// Started for later: when it starts (Unix ms).
    pub start_at: Option<i64>,
    /// The invoke key that owns it (see [`NewInstance::caller`]); never
    /// shown.
    #[serde(skip)]
    pub caller: Option<String>,
    /// The tags its Durable Task client started it with: a JSON object of
    /// strings (`None`: none). The protocol's state shows them.
    #[serde(skip)]
    pub tags: Option<String>,
}

/// Filters of list and purge requests.
#[derive(Debug, Clone, Default)]
pub struct InstanceFilter {
    pub statuses: Vec<RuntimeStatus>,
    pub created_from: Option<i64>,
    pub created_to: Option<i64>,
    pub id_prefix: Option<String>,
    /// The orchestration's name, exactly.
    pub name: Option<String>,
    /// Last changed at or before (ms): what retention purges.
    pub updated_to: Option<i64>,
    /// Last changed at or after (ms): a finished instance's end.
    pub updated_from: Option<i64>,
    /// List the newest first (pages then go back in time); a purge ignores it.
    pub newest_first: bool,
    /// Leave durable entities out: they are instances of the hub too, but
    /// the Durable Task protocol lists orchestrations alone (entities have
    /// `QueryEntities`).
    pub orchestrations_only: bool,
    /// Only the instances this invoke key owns (see
    /// [`NewInstance::caller`]).
    pub caller: Option<String>,
}

fn instance_from_row(row: &AnyRow) -> Result<InstanceRecord, StoreError> {
    let status: String = row.try_get("status")?;
    Ok(InstanceRecord {
        id: row.try_get("id")?,
        name: row.try_get("name")?,
        status: RuntimeStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("instance status '{status}'")))?,
        input: row.try_get("input")?,
        output: row.try_get("output")?,
        custom_status: row.try_get("custom_status")?,
        component_digest: row.try_get("component_digest")?,
        execution: row.try_get("execution")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        start_at: row.try_get("start_at")?,
        caller: row.try_get("caller")?,
        tags: row.try_get("tags")?,
    })
}

const INSTANCE_COLUMNS: &str =
    "id, name, status, input, output, custom_status, component_digest, execution, created_at, updated_at, start_at, caller, tags";

impl Store {
    /// Creates an instance (or a new execution of a finished id). `Ok(None)`
    /// when an unfinished instance holds the id.
    pub async fn start(&self, new: NewInstance) -> Result<Option<Applied>, StoreError> {
        match self.committer().commit(Write::Start(new)).await? {
            Written::Start(applied) => Ok(applied),
            other => Err(unexpected(other)),
        }
    }

    /// Queues an external event for the instance's current execution.
    pub async fn raise(
        &self,
        instance: &str,
        name: &str,
        payload: &str,
        limits: Arc<Limits>,
    ) -> Result<(Result<Change, LimitError>, Applied), StoreError> {
        self.raise_at(instance, name, payload, None, limits).await
    }

    /// As [`Self::raise`]; with `due_at` (ms), the event waits in the
    /// inbox, unseen, until then (an operation signalled to an entity for
    /// later): the scheduler's pass finds it once it is due.
    pub async fn raise_at(
        &self,
        instance: &str,
        name: &str,
        payload: &str,
        due_at: Option<i64>,
        limits: Arc<Limits>,
    ) -> Result<(Result<Change, LimitError>, Applied), StoreError> {
        let write = Write::Raise {
            instance: instance.to_string(),
            name: name.to_string(),
            payload: payload.to_string(),
            limits,
            due_at,
        };
        match self.committer().commit(write).await? {
            Written::Raise(change, applied) => Ok((change, applied)),
            other => Err(unexpected(other)),
        }
    }

    /// Suspend, resume, terminate or purge one instance.
    pub async fn manage(
        &self,
        instance: &str,
        op: Operation,
    ) -> Result<(Change, Applied), StoreError> {
        let write = Write::Manage {
            instance: instance.to_string(),
            op,
        };
        match self.committer().commit(write).await? {
            Written::Manage(change, applied) => Ok((change, applied)),
            other => Err(unexpected(other)),
        }
    }

    /// Records the result of a task's attempt.
    pub async fn task_done(
        &self,
        instance: &str,
        attempt: Attempt,
        result: TaskOutcome,
        limits: Arc<Limits>,
    ) -> Result<(TaskFate, Applied), StoreError> {
        let write = Write::TaskDone {
            instance: instance.to_string(),
            attempt,
            result,
            limits,
        };
        match self.committer().commit(write).await? {
            Written::TaskDone(outcome, applied) => Ok((outcome, applied)),
            other => Err(unexpected(other)),
        }
    }

    /// Records the results of several attempts of one instance's tasks,
    /// queued at once (they share a transaction); each answer in order.
    pub async fn tasks_done(
        &self,
        instance: &str,
        results: Vec<(Attempt, TaskOutcome)>,
        limits: Arc<Limits>,
    ) -> Vec<Result<(TaskFate, Applied), StoreError>> {
        let writes = results
            .into_iter()
            .map(|(attempt, result)| Write::TaskDone {
                instance: instance.to_string(),
                attempt,
                result,
                limits: limits.clone(),
            })
            .collect();
        self.committer()
            .commit_all(writes)
            .await
            .into_iter()
            .map(|written| match written? {
                Written::TaskDone(outcome, applied) => Ok((outcome, applied)),
                other => Err(unexpected(other)),
            })
            .collect()
    }

    /// Records what arrived for an instance with the episode it ran on
    /// it (see [`Write::ArrivalAndEpisode`]): both, or the arrival alone.
    pub async fn arrival_and_episode(
        &self,
        arriving: Arriving,
        target: Target,
        replayed: u64,
        effects: Vec<Effect>,
        limits: Arc<Limits>,
    ) -> Result<ArrivalWritten, StoreError> {
        let write = Write::ArrivalAndEpisode {
            arriving,
            target,
            replayed,
            effects,
            limits,
        };
        match self.committer().commit(write).await? {
            Written::ArrivalAndEpisode(written) => Ok(written),
            other => Err(unexpected(other)),
        }
    }

    /// The instance as a transition sees it, read in the committer's order.
    #[cfg(test)]
    pub async fn load(
        &self,
        id: &str,
    ) -> Result<Option<super::durable_records::Loaded>, StoreError> {
        Ok(self.image(id).await?.map(|image| image.loaded))
    }

    pub async fn instance(&self, id: &str) -> Result<Option<InstanceRecord>, StoreError> {
        let sql = format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE id = $1");
        let row = sqlx::query(&sql)
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        row.map(|r| instance_from_row(&r)).transpose()
    }

    /// Gives the instance `id` the tags its client started it with (a JSON
    /// object of strings), written once it is started. `false` when it
    /// is no longer there.
    pub async fn set_tags(&self, id: &str, tags: &str) -> Result<bool, StoreError> {
        let done = sqlx::query("UPDATE instances SET tags = $1 WHERE id = $2")
            .bind(tags)
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The sub-orchestrations `id` started (any status), by the parent they
    /// name (`instances_by_parent`).
    pub async fn children(&self, id: &str) -> Result<Vec<(String, RuntimeStatus)>, StoreError> {
        let rows = sqlx::query("SELECT id, status FROM instances WHERE parent_id = $1")
            .bind(id)
            .fetch_all(self.pool())
            .await?;
        rows.iter()
            .map(|row| {
                let status: String = row.try_get("status")?;
                let status = RuntimeStatus::parse(&status)
                    .ok_or_else(|| StoreError::Corrupt(format!("instance status '{status}'")))?;
                Ok((row.try_get("id")?, status))
            })
            .collect()
    }

    /// The trace an instance's work continues, if it has one.
    pub async fn instance_traceparent(&self, id: &str) -> Result<Option<String>, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT traceparent FROM instances WHERE id = $1")
                .bind(id)
                .fetch_optional(self.pool())
                .await?
                .flatten(),
        )
    }

    /// Running instances: each waits for an event, a timer or a task (an
    /// episode under way is over in moments). One count over the status
    /// index, for `/metrics`.
    pub async fn count_waiting_instances(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM instances WHERE status = 'Running'")
                .fetch_one(self.pool())
                .await?,
        )
    }

    /// Instances matching `filter`, oldest first (newest first if it says
    /// so), after the continuation token (`created_at:id` of the last one
    /// returned before). Either way one walk of `instances_by_created`.
    pub async fn list_instances(
        &self,
        filter: &InstanceFilter,
        top: usize,
        after: Option<(i64, String)>,
    ) -> Result<Vec<InstanceRecord>, StoreError> {
        let (clause, binds) = filter_clause(filter);
        let mut next = binds.len();
        let mut mark = || {
            next += 1;
            format!("${next}")
        };
        let mut sql = format!("SELECT {INSTANCE_COLUMNS} FROM instances WHERE {clause}");
        let (beyond, order) = match filter.newest_first {
            false => (">", ""),
            true => ("<", " DESC"),
        };
        if after.is_some() {
            let (a, b, c) = (mark(), mark(), mark());
            sql.push_str(&format!(
                " AND (created_at {beyond} {a} OR (created_at = {b} AND id {beyond} {c}))"
            ));
        }
        sql.push_str(&format!(
            " ORDER BY created_at{order}, id{order} LIMIT {}",
            mark()
        ));
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

    /// Deletes the finished instances matching `filter`, a page per commit
    /// (other writes go between two pages), for at most [`PURGE_BUDGET`]:
    /// a purge of every finished instance never queues ahead of the
    /// episodes. The count is exact even when a page fails; `more` says
    /// that matching instances may remain (the caller asks again).
    pub async fn purge_matching(&self, filter: &InstanceFilter) -> Result<Purge, StoreError> {
        let started = std::time::Instant::now();
        let (clause, binds) = filter_clause(filter);
        let (after, limit) = (binds.len() + 1, binds.len() + 2);
        let sql = format!(
            "SELECT id FROM instances WHERE {clause} AND status IN {FINISHED} \
             AND id > ${after} ORDER BY id LIMIT ${limit}"
        );
        let mut purge = Purge::default();
        // Ids in order: an instance that stays (restarted since the read)
        // is not read again by the next page.
        let mut last = String::new();
        loop {
            let mut query = sqlx::query(&sql);
            for bind in &binds {
                query = bind.apply(query);
            }
            let ids: Vec<String> = query
                .bind(last.clone())
                .bind(i64::try_from(PURGE_PAGE).unwrap_or(i64::MAX))
                .fetch_all(self.pool())
                .await?
                .iter()
                .map(|r| r.try_get("id"))
                .collect::<Result<_, _>>()?;
            let Some(tail) = ids.last() else {
                return Ok(purge);
            };
            last = tail.clone();
            let full = ids.len() >= PURGE_PAGE;
            // The committer checks again that each instance is finished.
            let writes = ids.into_iter().map(|id| Write::Manage {
                instance: id,
                op: Operation::Purge,
            });
            for written in self.committer().commit_all(writes.collect()).await {
                match written {
                    Ok(Written::Manage(Change::Done, _)) => purge.deleted += 1,
                    Ok(_) => {}
                    Err(e) if purge.deleted == 0 => return Err(e),
                    Err(e) => {
                        tracing::warn!(error = %e, deleted = purge.deleted, "purge stopped by a store error");
                        purge.more = true;
                        return Ok(purge);
                    }
                }
            }
            if !full {
                return Ok(purge);
            }
            if started.elapsed() >= PURGE_BUDGET {
                purge.more = true;
                return Ok(purge);
            }
        }
    }
}

/// Instances purged in one commit at most.
const PURGE_PAGE: usize = 100;

/// How long one purge request deletes before it answers.
const PURGE_BUDGET: std::time::Duration = std::time::Duration::from_secs(5);

/// What a purge of many instances did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purge {
    /// Instances deleted, exactly.
    pub deleted: u64,
    /// Whether matching instances may remain: the purge stopped at its
    /// time budget or at a store error after deleting some.
    pub more: bool,
}

fn unexpected(written: Written) -> StoreError {
    StoreError::Write(format!("the committer answered another write: {written:?}"))
}

/// A bound parameter of a filter clause.
enum Bind {
    Text(String),
    Int(i64),
}

impl Bind {
    fn apply<'q>(
        &self,
        query: sqlx::query::Query<'q, Any, AnyArguments<'q>>,
    ) -> sqlx::query::Query<'q, Any, AnyArguments<'q>> {
        match self {
            Bind::Text(s) => query.bind(s.clone()),
            Bind::Int(i) => query.bind(*i),
        }
    }
}

/// A `WHERE` clause of `filter` (placeholders `$1`…) and its parameters.
fn filter_clause(filter: &InstanceFilter) -> (String, Vec<Bind>) {
    let mut clauses = vec!["1 = 1".to_string()];
    let mut binds = Vec::new();
    let mark = |binds: &mut Vec<Bind>, bind: Bind| {
        binds.push(bind);
        format!("${}", binds.len())
    };
    if !filter.statuses.is_empty() {
        let marks: Vec<String> = filter
            .statuses
            .iter()
            .map(|s| mark(&mut binds, Bind::Text(s.as_str().to_string())))
            .collect();
        clauses.push(format!("status IN ({})", marks.join(", ")));
    }
    if let Some(from) = filter.created_from {
        clauses.push(format!(
            "created_at >= {}",
            mark(&mut binds, Bind::Int(from))
        ));
    }
    if let Some(to) = filter.created_to {
        clauses.push(format!("created_at <= {}", mark(&mut binds, Bind::Int(to))));
    }
    if let Some(from) = filter.updated_from {
        clauses.push(format!(
            "updated_at >= {}",
            mark(&mut binds, Bind::Int(from))
        ));
    }
    if let Some(to) = filter.updated_to {
        clauses.push(format!("updated_at <= {}", mark(&mut binds, Bind::Int(to))));
    }
    if let Some(name) = &filter.name {
        clauses.push(format!(
            "name = {}",
            mark(&mut binds, Bind::Text(name.clone()))
        ));
    }
    if let Some(caller) = &filter.caller {
        clauses.push(format!(
            "caller = {}",
            mark(&mut binds, Bind::Text(caller.clone()))
        ));
    }
    if filter.orchestrations_only {
        clauses.push(format!(
            "component_digest <> {}",
            mark(&mut binds, Bind::Text(sdk_entities::DIGEST.to_string()))
        ));
    }
    if let Some(prefix) = &filter.id_prefix {
        let length = mark(
            &mut binds,
            Bind::Int(i64::try_from(prefix.len()).unwrap_or(i64::MAX)),
        );
        let text = mark(&mut binds, Bind::Text(prefix.clone()));
        // The cast: PostgreSQL has no substr(text, int, bigint).
        clauses.push(format!("substr(id, 1, CAST({length} AS INTEGER)) = {text}"));
    }
    (clauses.join(" AND "), binds)
}

#[cfg(test)]
mod tests {
    use crate::core::instance::RuntimeStatus;
    use crate::core::lifecycle::Change;
    use crate::store::test_fixtures::new;
    use crate::store::{Operation, StoreError};

    #[tokio::test]
    async fn an_instance_suspended_before_its_first_episode_resumes_as_pending(
    ) -> Result<(), StoreError> {
        let (_dir, store) = crate::store::test_fixtures::sqlite().await?;
        store.start(new("a")).await?;
        assert_eq!(store.manage("a", Operation::Suspend).await?.0, Change::Done);
        assert_eq!(
            store.manage("a", Operation::Suspend).await?.0,
            Change::NotApplicable,
            "already suspended"
        );
        assert_eq!(store.manage("a", Operation::Resume).await?.0, Change::Done);
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

    /// On each store: a finished id starts again for its owner or a caller
    /// of full reach (and stays its owner's), never for another invoke key,
    /// whose start leaves it as it was.
    #[tokio::test]
    async fn a_finished_id_is_started_again_by_its_owner_alone(
    ) -> Result<(), Box<dyn std::error::Error>> {
        use crate::core::instance::NewInstance;
        let by = |caller: Option<&str>| NewInstance {
            caller: caller.map(str::to_string),
            ..new("owned")
        };
        for (store, _dir) in crate::store::test_fixtures::both("owned").await? {
            store.start(by(Some("key:a"))).await?.ok_or("not created")?;
            store.manage("owned", Operation::terminate_for("x")).await?;
            let ended = store.instance("owned").await?.ok_or("gone")?;
            assert_eq!(ended.caller.as_deref(), Some("key:a"));
            assert!(
                store.start(by(Some("key:b"))).await?.is_none(),
                "another key's"
            );
            let after = store.instance("owned").await?.ok_or("gone")?;
            assert_eq!(
                (after.execution, after.status, after.updated_at),
                (ended.execution, ended.status, ended.updated_at),
                "untouched"
            );
            store.start(by(None)).await?.ok_or("an admin's restart")?;
            let again = store.instance("owned").await?.ok_or("gone")?;
            assert_eq!(again.caller.as_deref(), Some("key:a"), "still A's");
            assert!(again.execution > ended.execution);
            store.manage("owned", Operation::terminate_for("x")).await?;
            store
                .start(by(Some("key:a")))
                .await?
                .ok_or("its owner's restart")?;
        }
        Ok(())
    }

    #[tokio::test]
    async fn terminate_then_recreate_gets_a_new_execution_number() -> Result<(), StoreError> {
        let (_dir, store) = crate::store::test_fixtures::sqlite().await?;
        assert!(store.start(new("a")).await?.is_some());
        assert!(
            store.start(new("a")).await?.is_none(),
            "a running id is refused"
        );
        let first = store.instance("a").await?.map(|i| i.execution);
        store.manage("a", Operation::terminate_for("x")).await?;
        assert_eq!(store.manage("a", Operation::Purge).await?.0, Change::Done);
        assert!(store.start(new("a")).await?.is_some());
        let second = store.instance("a").await?.map(|i| i.execution);
        assert!(
            second > first,
            "{second:?} after {first:?}: never reused, even after a purge"
        );
        Ok(())
    }
}
