//! Agent runs as their readers see them: one by id, those waited for, an
//! instance's, a session's next, the sessions with work left, and a run
//! another host assigned here. Plain SQL both databases run as written;
//! a run's record also arrives as JSON in a notification
//! ([`super::records::run_from_array`]).

use sqlx::Row;

use super::clock::now_ms;
use super::error::StoreError;
use super::open::Store;
use super::records::{run_from_row, RunRecord, SessionKey, RUN_COLUMNS};
use crate::core::fence::SessionFence;
use crate::core::ids::is_agent_call_of;

impl Store {
    pub async fn run(&self, correlation_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE correlation_id = $1");
        let row = sqlx::query(&sql)
            .bind(correlation_id)
            .fetch_optional(self.pool())
            .await?;
        row.map(|r| run_from_row(&r)).transpose()
    }

    /// A run another host queued for a session it gave this one
    /// ([`super::postgres::Assigned`]), with this host's fence of the session, in one
    /// read: `None` when the run is no longer pending or running, or the
    /// session is not this host's (any more). The flag says whether the
    /// session holds messages: a run told of as a new session's may have
    /// been found and begun first (a late notification), and then it has.
    pub async fn assigned_run(
        &self,
        correlation_id: &str,
    ) -> Result<Option<(RunRecord, SessionFence, bool)>, StoreError> {
        let Some(me) = self.owner_id() else {
            return Ok(None);
        };
        let taken_at = now_ms();
        let sql = format!(
            "SELECT {RUN_COLUMNS}, (SELECT s.epoch FROM sessions s WHERE s.agent = runs.agent \
             AND s.id = runs.session_id AND s.owner = $2) AS fence_epoch, \
             EXISTS (SELECT 1 FROM messages m WHERE m.agent = runs.agent \
             AND m.session_id = runs.session_id) AS has_messages \
             FROM runs WHERE correlation_id = $1 AND status IN ('pending', 'running')"
        );
        let Some(row) = sqlx::query(&sql)
            .bind(correlation_id)
            .bind(me)
            .fetch_optional(self.pool())
            .await?
        else {
            return Ok(None);
        };
        let Some(epoch) = row.try_get::<Option<i64>, _>("fence_epoch")? else {
            return Ok(None);
        };
        let fence = SessionFence {
            owner: me.to_string(),
            epoch,
            taken_at,
        };
        let has_messages: bool = row.try_get("has_messages")?;
        Ok(Some((run_from_row(&row)?, fence, has_messages)))
    }

    /// Those of `ids` whose runs have ended, in one read per 500 ids: how
    /// the waiters of a host on a shared hub learn of an end whose
    /// notification was lost, without a read per waiter.
    pub async fn finished_runs(&self, ids: &[String]) -> Result<Vec<RunRecord>, StoreError> {
        let mut finished = Vec::new();
        for chunk in ids.chunks(500) {
            let places: Vec<String> = (1..=chunk.len()).map(|i| format!("${i}")).collect();
            let sql = format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE correlation_id IN ({}) \
                 AND status IN ('completed', 'failed')",
                places.join(", ")
            );
            let mut query = sqlx::query(&sql);
            for id in chunk {
                query = query.bind(id);
            }
            for row in query.fetch_all(self.pool()).await? {
                let run = run_from_row(&row)?;
                if run.status.is_finished() {
                    finished.push(run);
                }
            }
        }
        Ok(finished)
    }

    /// The agent runs of an orchestration instance's execution, oldest
    /// first (their correlation ids are `{instance}:{execution}:{task}:{attempt}`;
    /// the prefix selects, the core's rule keeps only this instance's).
    pub async fn runs_of_instance(
        &self,
        instance: &str,
        execution: i64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let prefix = format!("{instance}:{execution}:");
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE SUBSTR(correlation_id, 1, CAST($2 AS INTEGER)) = $1 ORDER BY seq"
        );
        let rows = sqlx::query(&sql)
            .bind(&prefix)
            .bind(i64::try_from(prefix.chars().count()).unwrap_or(i64::MAX))
            .fetch_all(self.pool())
            .await?;
        let runs: Result<Vec<RunRecord>, StoreError> = rows.iter().map(run_from_row).collect();
        Ok(runs?
            .into_iter()
            .filter(|run| is_agent_call_of(instance, execution, &run.correlation_id))
            .collect())
    }

    /// The oldest unfinished run of a session: the next one to execute. On
    /// a shared hub, only while this host owns the session: one that lost
    /// it (its lease lapsed and another host took over) stops there.
    pub async fn next_unfinished_run(
        &self,
        session: &SessionKey,
    ) -> Result<Option<RunRecord>, StoreError> {
        let owned = if self.owner_id().is_some() {
            " AND EXISTS (SELECT 1 FROM sessions WHERE agent = $1 AND id = $2 AND owner = $3)"
        } else {
            " AND $3 IS NULL"
        };
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE agent = $1 AND session_id = $2 \
             AND status IN ('pending', 'running'){owned} ORDER BY seq LIMIT 1"
        );
        let row = sqlx::query(&sql)
            .bind(&session.agent)
            .bind(&session.session_id)
            .bind(self.owner_id())
            .fetch_optional(self.pool())
            .await?;
        row.map(|r| run_from_row(&r)).transpose()
    }

    /// Sessions with work left over, e.g. from a host that died.
    pub async fn sessions_with_unfinished_runs(&self) -> Result<Vec<SessionKey>, StoreError> {
        let rows = sqlx::query(
            "SELECT agent, session_id, MIN(seq) AS first FROM runs WHERE status IN ('pending', 'running') \
             GROUP BY agent, session_id ORDER BY first",
        )
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(SessionKey {
                    agent: r.try_get("agent")?,
                    session_id: r.try_get("session_id")?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::chat::Usage;
    use crate::store::test_fixtures;
    use crate::store::{NewRun, RunOutcome};

    fn new_run(id: &str) -> NewRun {
        NewRun {
            correlation_id: id.into(),
            session: SessionKey {
                agent: "a".into(),
                session_id: format!("s-{id}"),
            },
            message: "hi".into(),
            response_format: None,
            traceparent: None,
            caller: None,
        }
    }

    #[tokio::test]
    async fn the_runs_waited_for_are_read_at_once_and_only_the_ended_ones_come_back(
    ) -> Result<(), StoreError> {
        let (_dir, store) = test_fixtures::sqlite().await?;
        let ids: Vec<String> = (0..1_200).map(|i| format!("r{i}")).collect();
        for id in &ids {
            store.enqueue_run(&new_run(id), None).await?;
        }
        // Ended in the first, second and third chunk of the read.
        for id in ["r3", "r700", "r1100"] {
            let run = new_run(id);
            let completed = RunOutcome::Completed {
                response: "done",
                usage: Usage::default(),
            };
            assert!(
                store
                    .end_run(&run.session, id, &[], completed, None)
                    .await?
            );
        }
        let mut ended: Vec<String> = store
            .finished_runs(&ids)
            .await?
            .into_iter()
            .map(|r| r.correlation_id)
            .collect();
        ended.sort();
        assert_eq!(ended, ["r1100", "r3", "r700"]);
        assert!(store.finished_runs(&[]).await?.is_empty());
        Ok(())
    }
}
