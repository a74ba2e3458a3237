//! Claims on a hub shared by several hosts: what this host runs now, its
//! own work and what it takes (new work, and a dead host's), with
//! `FOR UPDATE SKIP LOCKED` so that hosts claiming at once never wait on
//! each other and never take the same row. See [`super::postgres`]'s shared hub.

use sqlx::any::AnyRow;
use sqlx::Row;

use super::clock::now_ms;
use super::episodes::to_start;
use super::error::StoreError;
use super::open::Store;
use super::postgres::SharedHub;
use super::records::SessionKey;
use super::tasks::DueTask;
use crate::core::fence::SessionFence;

impl Store {
    /// Instances this host should run an episode of now: its own with work,
    /// and new or orphaned ones (unowned, or owned by a host whose lease
    /// expired) that it claims, at most `claim` of those at a time so that
    /// the other hosts get their share.
    pub(super) async fn claim_instances(
        &self,
        hub: &SharedHub,
        now: i64,
        limit: usize,
        claim: usize,
    ) -> Result<Vec<String>, StoreError> {
        let Some(me) = hub.owner() else {
            return Ok(Vec::new());
        };
        // Driven by what has work (instances not started yet, inbox rows
        // due), never by owner: the owner's index lists every instance this
        // host ever ran, finished ones included until `--retain` clears
        // them, and the planner read all of it on every pass (2 ms at 50,000,
        // growing). The subqueries cannot be pulled up (`OFFSET 0`), so the
        // owner is a filter on the few rows that have work.
        let mut ids: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT p.id FROM ({} OFFSET 0) p WHERE p.owner = $1 \
             UNION SELECT DISTINCT i.instance_id FROM inbox i \
             CROSS JOIN LATERAL (SELECT s.owner, s.status, s.start_at FROM instances s WHERE s.id = i.instance_id OFFSET 0) s \
             WHERE i.visible_at <= $2 AND i.parked = 0 AND s.owner = $1 \
             AND s.status IN ('Pending', 'Running', 'ContinuedAsNew') \
             AND (s.start_at IS NULL OR s.start_at <= $2) LIMIT $3",
            to_start("id, owner", "$2")
        ))
        .bind(me)
        .bind(now)
        .bind(limit_of(limit))
        .fetch_all(self.pool())
        .await?;
        // A host that cannot renew its lease takes no new work.
        if hub.lease_lapsed() {
            return Ok(ids);
        }
        let claimed = sqlx::query(&format!(
            "WITH picked AS ( \
               SELECT s.id, s.owner AS previous FROM instances s WHERE s.id IN ( \
                   {to_start} \
                   UNION SELECT instance_id FROM inbox WHERE visible_at <= $2 AND parked = 0) \
                 AND s.status IN ('Pending', 'Running', 'ContinuedAsNew') \
                 AND (s.start_at IS NULL OR s.start_at <= $2) \
                 AND (s.owner IS NULL OR (s.owner <> $1 AND s.owner NOT IN ({live}))) \
               LIMIT $3 FOR UPDATE OF s SKIP LOCKED) \
             UPDATE instances SET owner = $1 FROM picked WHERE instances.id = picked.id \
             RETURNING instances.id AS id, picked.previous AS previous",
            live = SharedHub::live_hosts(),
            to_start = to_start("id", "$2")
        ))
        .bind(me)
        .bind(now)
        .bind(limit_of(claim))
        .fetch_all(self.pool())
        .await?;
        let claimed: Vec<String> = took_over(&claimed, "instances")?
            .iter()
            .map(|r| r.try_get("id"))
            .collect::<Result<_, _>>()?;
        ids.extend(claimed);
        Ok(ids)
    }

    /// Of instances another host gave something new, those active here
    /// that this host owns, and whether any is active and owned by no live
    /// host (a claim pass takes it): one indexed read in place of a pass,
    /// which would read every instance with work, for news that is mostly
    /// the other hosts'.
    pub async fn whose(&self, ids: &[String]) -> Result<(Vec<String>, bool), StoreError> {
        let (Some(hub), false) = (self.shared(), ids.is_empty()) else {
            return Ok((Vec::new(), false));
        };
        let Some(me) = hub.owner() else {
            return Ok((Vec::new(), false));
        };
        let mut mine = Vec::new();
        let mut orphaned = false;
        for chunk in ids.chunks(500) {
            let places: Vec<String> = (2..chunk.len() + 2).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT id, status, COALESCE(owner = $1, false) AS mine, \
                 (owner IS NULL OR owner NOT IN ({live})) AS orphaned FROM instances WHERE id IN ({})",
                places.join(", "),
                live = SharedHub::live_hosts()
            );
            let mut query = sqlx::query(&sql).bind(me);
            for id in chunk {
                query = query.bind(id);
            }
            // By key alone: a filter on the status let the planner read
            // the status index instead (0.6 ms for five ids).
            for row in query.fetch_all(self.pool()).await? {
                let status: String = row.try_get("status")?;
                if !matches!(status.as_str(), "Pending" | "Running" | "ContinuedAsNew") {
                    continue;
                }
                if row.try_get::<bool, _>("mine")? {
                    mine.push(row.try_get("id")?);
                } else if row.try_get::<bool, _>("orphaned")? {
                    orphaned = true;
                }
            }
        }
        Ok((mine, orphaned))
    }

    /// Tasks due now that this host should run: its own, and those of no
    /// live host, which it claims.
    pub(super) async fn claim_tasks(
        &self,
        hub: &SharedHub,
        now: i64,
        limit: usize,
        running_here: usize,
    ) -> Result<Vec<DueTask>, StoreError> {
        let Some(me) = hub.owner() else {
            return Ok(Vec::new());
        };
        let columns =
            "t.instance_id, t.execution, i.name, i.component_digest, t.task, t.call, t.attempt";
        let mut rows = sqlx::query(&format!(
            "SELECT {columns} FROM tasks t JOIN instances i ON i.id = t.instance_id AND i.execution = t.execution \
             WHERE t.owner = $1 AND t.due_at <= $2 ORDER BY t.due_at LIMIT $3"
        ))
        .bind(me)
        .bind(now)
        .bind(limit_of(limit.saturating_add(running_here)))
        .fetch_all(self.pool())
        .await?;
        if hub.lease_lapsed() {
            return rows.iter().map(super::tasks::due_from_row).collect();
        }
        let claimed = sqlx::query(&format!(
            "WITH picked AS ( \
               SELECT instance_id, execution, task, owner AS previous FROM tasks \
               WHERE due_at <= $2 AND (owner IS NULL OR (owner <> $1 AND owner NOT IN ({live}))) \
               ORDER BY due_at LIMIT $3 FOR UPDATE SKIP LOCKED), \
             claimed AS ( \
               UPDATE tasks SET owner = $1 FROM picked \
               WHERE tasks.instance_id = picked.instance_id AND tasks.execution = picked.execution AND tasks.task = picked.task \
               RETURNING tasks.instance_id, tasks.execution, tasks.task, tasks.call, tasks.attempt, picked.previous) \
             SELECT {columns}, t.previous FROM claimed t JOIN instances i ON i.id = t.instance_id AND i.execution = t.execution",
            live = SharedHub::live_hosts()
        ))
        .bind(me)
        .bind(now)
        .bind(limit_of(limit))
        .fetch_all(self.pool())
        .await?;
        took_over(&claimed, "tasks")?;
        rows.extend(claimed);
        rows.iter().map(super::tasks::due_from_row).collect()
    }

    /// Sessions with runs to execute that this host should work on: its
    /// own, and those of no live host, which it claims (`claim` at most).
    pub async fn claim_sessions(
        &self,
        claim: usize,
    ) -> Result<Vec<(SessionKey, Option<SessionFence>)>, StoreError> {
        let Some(hub) = self.shared() else {
            let sessions = self.sessions_with_unfinished_runs().await?;
            return Ok(sessions.into_iter().map(|s| (s, None)).collect());
        };
        let Some(me) = hub.owner() else {
            return Ok(Vec::new());
        };
        // What is read here is this host's fence of each session (its
        // executor need not read it again): read no earlier than this.
        let taken_at = now_ms();
        // Driven by the (small, indexed) set of unfinished runs, each
        // session looked up by its key, never by owner: a join the planner
        // may turn around read every session this host ever owned (one per
        // run made without a session id), on every pass: 2.4 ms a pass at
        // 8,000 sessions, and passes come with every run another host
        // queues. The lookup is a subquery the planner cannot pull up
        // (`OFFSET 0`; `FOR UPDATE` in the claim's), so it stays a nested
        // loop whatever the statistics.
        //
        // A session whose run waits for a human (an undecided tool call, no
        // stop asked) has nothing to do until a decision: left out, else
        // every pass would run it again (a history read, a locked write) and
        // tell its waiters, once a second for as long as the human takes.
        // The undecided calls are few and indexed (`approvals_undecided`).
        let unfinished =
            "WITH unfinished AS MATERIALIZED (SELECT DISTINCT agent, session_id FROM runs \
                          WHERE status IN ('pending', 'running') \
                        EXCEPT SELECT r.agent, r.session_id FROM approvals a \
                          JOIN runs r ON r.correlation_id = a.correlation_id \
                          WHERE a.decision IS NULL AND r.status IN ('pending', 'running') \
                          AND r.cancel_requested_at IS NULL)";
        // Read by a plain index scan, which marks the entries of runs that
        // ended as dead for the next pass: a bitmap scan (what the planner
        // picks) visits every one of them again each second until a vacuum,
        // thousands a second under load.
        let mut tx = self.pool().begin().await?;
        sqlx::query("SET LOCAL enable_bitmapscan = off")
            .execute(&mut *tx)
            .await?;
        let mut rows = sqlx::query(&format!(
            "{unfinished} SELECT s.agent, s.id, s.epoch FROM unfinished u \
             CROSS JOIN LATERAL (SELECT s.agent, s.id, s.epoch, s.owner FROM sessions s \
               WHERE s.agent = u.agent AND s.id = u.session_id OFFSET 0) s \
             WHERE s.owner = $1"
        ))
        .bind(me)
        .fetch_all(&mut *tx)
        .await?;
        if !hub.lease_lapsed() {
            let claimed = sqlx::query(&format!(
                "{unfinished}, picked AS ( \
                   SELECT p.agent, p.id, p.previous FROM unfinished u \
                   CROSS JOIN LATERAL (SELECT s.agent, s.id, s.owner AS previous FROM sessions s \
                     WHERE s.agent = u.agent AND s.id = u.session_id \
                     AND (s.owner IS NULL OR (s.owner <> $1 AND s.owner NOT IN ({live}))) \
                     FOR UPDATE OF s SKIP LOCKED) p \
                   LIMIT $2) \
                 UPDATE sessions SET owner = $1, epoch = sessions.epoch + 1 FROM picked \
                 WHERE sessions.agent = picked.agent AND sessions.id = picked.id \
                 RETURNING sessions.agent AS agent, sessions.id AS id, sessions.epoch AS epoch, \
                 picked.previous AS previous",
                live = SharedHub::live_hosts()
            ))
            .bind(me)
            .bind(limit_of(claim))
            .fetch_all(&mut *tx)
            .await?;
            took_over(&claimed, "sessions")?;
            rows.extend(claimed);
        }
        tx.commit().await?;
        rows.iter()
            .map(|row| {
                let fence = SessionFence {
                    owner: me.to_string(),
                    epoch: row.try_get("epoch")?,
                    taken_at,
                };
                Ok((session_key(row)?, Some(fence)))
            })
            .collect()
    }
}

fn session_key(row: &AnyRow) -> Result<SessionKey, StoreError> {
    Ok(SessionKey {
        agent: row.try_get("agent")?,
        session_id: row.try_get("id")?,
    })
}

/// Logs the rows claimed from a host whose lease expired (a `previous`
/// owner), as opposed to new ones; returns the rows.
fn took_over<'r>(rows: &'r [AnyRow], what: &str) -> Result<&'r [AnyRow], StoreError> {
    let mut from: Vec<String> = Vec::new();
    for row in rows {
        if let Some(previous) = row.try_get::<Option<String>, _>("previous")? {
            from.push(previous);
        }
    }
    if !from.is_empty() {
        // Rows with a previous owner only: a pass also claims new work.
        let count = from.len();
        from.sort();
        from.dedup();
        tracing::info!(what, count, hosts = ?from, "took over work of hosts whose lease expired; resuming it");
        crate::metrics::taken_over(count as u64);
    }
    Ok(rows)
}

fn limit_of(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::store::durable_records::Write;
    use crate::store::test_fixtures::{new, postgres_url};
    use crate::store::{Membership, Role, Store, StoreError, TaskHub};

    async fn host(url: &str, hub: &TaskHub, role: Role) -> Result<Store, StoreError> {
        let membership = Membership {
            role,
            lease: Duration::from_secs(5),
        };
        Store::open(url, hub, membership).await
    }

    /// What a worker does with news of instances it does not hold hot: its
    /// own it runs, one nobody live owns wakes its claim pass, another
    /// live host's it leaves alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn instances_another_host_names_are_looked_up_by_key() -> Result<(), StoreError> {
        let Some(url) = postgres_url() else {
            return Ok(());
        };
        let hub = TaskHub::new(&format!("whose{}", uuid::Uuid::new_v4().simple()))
            .map_err(|e| StoreError::Write(e.to_string()))?;
        let (a, b) = (
            host(&url, &hub, Role::Worker).await?,
            host(&url, &hub, Role::Worker).await?,
        );
        let front = host(&url, &hub, Role::Front).await?;
        a.committer().commit(Write::Start(new("of-a"))).await?;
        front
            .committer()
            .commit(Write::Start(new("nobodys")))
            .await?;
        let ids = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        assert_eq!(
            a.whose(&ids(&["of-a", "nobodys", "missing"])).await?,
            (ids(&["of-a"]), true)
        );
        assert_eq!(b.whose(&ids(&["of-a"])).await?, (Vec::new(), false));
        assert_eq!(
            front.whose(&ids(&["nobodys"])).await?,
            (Vec::new(), false),
            "a front runs nothing"
        );
        // Handed back as `a` leaves: now nobody's.
        a.close().await;
        assert_eq!(b.whose(&ids(&["of-a"])).await?, (Vec::new(), true));
        b.close().await;
        front.close().await;
        Ok(())
    }
}
