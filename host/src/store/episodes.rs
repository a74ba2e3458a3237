//! An instance's journal and inbox as an episode reads them, and committing
//! an episode's effects.

use sqlx::Row;

use super::durable_records::{
    from_json, Applied, Image, InboxRow, Read, ReadOut, Target, Write, Written,
};
use super::error::StoreError;
use super::open::{Kind, Store};
use crate::core::effects::Effect;
use crate::core::journal::Entry;

impl Store {
    /// The current execution's journal, in order, with each row's time, for
    /// callers outside the engine (history views): read through the pool, so
    /// a large journal never holds up the writer.
    pub async fn journal(&self, id: &str) -> Result<Vec<(Entry, i64)>, StoreError> {
        let rows = sqlx::query(
            "SELECT entry, recorded_at FROM journal WHERE instance_id = $1 ORDER BY seq",
        )
        .bind(id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    from_json(&r.try_get::<String, _>("entry")?, "journal entry")?,
                    r.try_get("recorded_at")?,
                ))
            })
            .collect()
    }

    /// The last `n` entries of the instance's journal, newest first (its
    /// end, read on the key without the rest).
    pub async fn journal_tail(&self, id: &str, n: usize) -> Result<Vec<Entry>, StoreError> {
        let rows = sqlx::query(
            "SELECT entry FROM journal WHERE instance_id = $1 ORDER BY seq DESC LIMIT $2",
        )
        .bind(id)
        .bind(i64::try_from(n).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| from_json(&r.try_get::<String, _>("entry")?, "journal entry"))
            .collect()
    }

    /// Everything an episode needs of a cold instance, read at one moment:
    /// its state, its journal and its whole inbox (timers not yet due too).
    pub async fn image(&self, id: &str) -> Result<Option<Image>, StoreError> {
        let ReadOut::Image(image) = self.committer().read(Read::Image(id.to_string())).await?;
        Ok(image)
    }

    /// The instance's inbox as stored now, read on the pool, not the
    /// writer: for a hot image whose only news is rows another host
    /// committed. Rows this host commits later reach the image's claim.
    pub async fn inbox(&self, id: &str) -> Result<Vec<InboxRow>, StoreError> {
        // One SQLite writer hands out ids in the order of commits; hosts
        // sharing PostgreSQL do not (see the `inbox_arrival` migration).
        let order = match self.kind() {
            Kind::Postgres => "arrival",
            Kind::Sqlite => "id",
        };
        let rows: Vec<(i64, i64, String, i64, i64)> = sqlx::query_as(&format!(
            "SELECT id, execution, event, visible_at, CAST(parked AS BIGINT) FROM inbox \
             WHERE instance_id = $1 ORDER BY {order}"
        ))
        .bind(id)
        .fetch_all(self.pool())
        .await?;
        rows.into_iter()
            .map(|(id, execution, event, visible_at, parked)| {
                InboxRow::stored(id, execution, &event, visible_at, parked)
            })
            .collect()
    }

    /// Commits an episode's effects if the instance is still as the episode
    /// ran on it: the execution, an active status, this host's, and the
    /// journal length it replayed (`replayed`); `None` (nothing written)
    /// otherwise. Concurrent commits of many instances share one transaction.
    pub async fn commit_episode(
        &self,
        target: Target,
        replayed: u64,
        effects: Vec<Effect>,
    ) -> Result<Option<Applied>, StoreError> {
        match self
            .committer()
            .commit(Write::Episode {
                target,
                replayed,
                effects,
            })
            .await?
        {
            Written::Episode(applied) => Ok(applied),
            other => Err(StoreError::Write(format!(
                "the committer answered another write: {other:?}"
            ))),
        }
    }

    /// Instances with something to do now: new, restarted, or with visible
    /// inbox rows (and not suspended). On a shared hub, those this host owns
    /// and up to [`CLAIM_AT_ONCE`] it claims.
    pub async fn instances_with_work(
        &self,
        now: i64,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        if let Some(hub) = self.shared() {
            return self.claim_instances(hub, now, limit, CLAIM_AT_ONCE).await;
        }
        let rows = sqlx::query(&ready())
            .bind(now)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX))
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(|r| Ok(r.try_get("id")?)).collect()
    }
}

/// The single host's ready query (`$1` now, `$2` the limit): instances to
/// start, and those with inbox rows due. The inbox arm is read from the
/// inbox's due rows (few) out (`CROSS JOIN` fixes SQLite's join order):
/// joined the other way, SQLite's planner read every Pending and Running
/// instance by status, each a lookup in the inbox, on every pass (30 ms at
/// 100,000 instances waiting for an event or for their time).
fn ready() -> String {
    format!(
        "{} \
         UNION SELECT DISTINCT i.instance_id FROM inbox i CROSS JOIN instances s \
         WHERE s.id = i.instance_id AND i.visible_at <= $1 AND i.parked = 0 \
         AND s.status IN ('Pending', 'Running', 'ContinuedAsNew') \
         AND (s.start_at IS NULL OR s.start_at <= $1) LIMIT $2",
        to_start("id", "$1")
    )
}

/// Instances to run for their start (new, or continued as new) that are
/// not started for later or are due at `now` (a placeholder), as `columns`.
/// Two arms, each read through its own partial index (`instances_to_start`;
/// `instances_scheduled_by_status`, by status and time): one condition, "not
/// scheduled or due", was read through the status index, every instance
/// waiting for its time with it, on every scheduler pass. The first arm
/// repeats its index's condition term for term: SQLite uses a partial index
/// only for a query that states what the index holds.
pub(super) fn to_start(columns: &str, now: &str) -> String {
    format!(
        "SELECT {columns} FROM instances WHERE status IN ('Pending', 'ContinuedAsNew') AND start_at IS NULL \
         UNION ALL SELECT {columns} FROM instances WHERE status IN ('Pending', 'ContinuedAsNew') AND start_at <= {now}"
    )
}

/// New or orphaned instances one scheduler pass claims at most: a burst of
/// starts is spread over the hosts that wake for it, rather than taken
/// whole by the first.
const CLAIM_AT_ONCE: usize = 32;

#[cfg(test)]
mod tests {
    use crate::core::instance::NewInstance;
    use crate::store::now_ms;
    use crate::store::test_fixtures::{both, new};

    /// On each store: an instance started for later has no work before its
    /// time, the scheduler is told when that is, and it has work from then
    /// on (all of it read from the store: a restarted host finds the same).
    #[tokio::test]
    async fn an_instance_started_for_later_has_work_from_its_time_on(
    ) -> Result<(), Box<dyn std::error::Error>> {
        for (store, _dir) in both("later").await? {
            let now = now_ms();
            let at = now + 60_000;
            let later = NewInstance {
                start_at: Some(at),
                ..new("later")
            };
            store.start(later).await?.ok_or("not created")?;
            store.start(new("now")).await?.ok_or("not created")?;
            // An event raised at it waits with it: it wakes nothing before
            // the time either (else every scheduler pass would run an
            // episode of it that decides nothing).
            let limits = std::sync::Arc::new(crate::core::limits::Limits::default());
            let (raised, _) = store.raise("later", "go", "1", limits).await?;
            raised?;
            assert_eq!(store.instances_with_work(now_ms(), 100).await?, vec!["now"]);
            assert_eq!(store.next_due_after(now).await?, Some(at));
            let mut due = store.instances_with_work(at, 100).await?;
            due.sort();
            assert_eq!(due, vec!["later", "now"]);
            let record = store.instance("later").await?.ok_or("not found")?;
            assert_eq!(record.start_at, Some(at));
        }
        Ok(())
    }

    /// On each store: the scheduler's ready query reads instances to start
    /// through the partial indexes of its arms and inbox rows from the due
    /// ones out, never through the status index, which listed every
    /// instance waiting for its time or for an event on every pass (what
    /// that cost an idle host: `make bench`, "Instances that wait, an idle
    /// host"). SQLite is left without statistics, as the host leaves it;
    /// PostgreSQL has them, as autovacuum gives them. (A hub's own claims,
    /// `store::claims`, read the inbox from its due rows by construction.)
    #[tokio::test]
    async fn the_ready_query_passes_over_instances_waiting_for_their_time_or_an_event(
    ) -> Result<(), Box<dyn std::error::Error>> {
        use crate::store::open::Kind;
        for (store, _dir) in both("plan").await? {
            let now = now_ms();
            let rows = match store.kind() {
                Kind::Sqlite => {
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) \
                     INSERT INTO instances (id, name, status, input, component_digest, created_at, updated_at, start_at, execution) \
                     SELECT 'later-' || i, 'x', 'Pending', 'null', '', $1, $1, $1 + 3600000 + i, 0 FROM n \
                     UNION ALL SELECT 'waits-' || i, 'x', 'Running', 'null', '', $1, $1, NULL, 0 FROM n"
                }
                Kind::Postgres => {
                    "INSERT INTO instances (id, name, status, input, component_digest, created_at, updated_at, start_at, execution) \
                     SELECT 'later-' || i, 'x', 'Pending', 'null', '', $1, $1, $1 + 3600000 + i, 0 \
                     FROM generate_series(1, 3000) AS i \
                     UNION ALL SELECT 'waits-' || i, 'x', 'Running', 'null', '', $1, $1, NULL, 0 \
                     FROM generate_series(1, 3000) AS i"
                }
            };
            sqlx::query(rows).bind(now).execute(store.pool()).await?;
            store.start(new("now")).await?.ok_or("not created")?;
            if store.kind() == Kind::Postgres {
                sqlx::query("ANALYZE instances")
                    .execute(store.pool())
                    .await?;
            }
            let plan = plan_of(&store, &super::ready(), now, Some(100)).await?;
            assert!(plan.contains("instances_to_start"), "{plan}");
            assert!(plan.contains("instances_scheduled_by_status"), "{plan}");
            // And the scheduler's next due time reads the same index.
            let next = plan_of(
                &store,
                &crate::store::tasks::next_due(store.kind()),
                now,
                None,
            )
            .await?;
            assert!(next.contains("instances_scheduled_by_status"), "{next}");
            assert!(!plan.contains("instances_by_status"), "{plan}");
            assert_eq!(store.instances_with_work(now_ms(), 100).await?, vec!["now"]);
            // What the arms find is as before: an event at a waiting one.
            let limits = std::sync::Arc::new(crate::core::limits::Limits::default());
            let (raised, _) = store.raise("waits-7", "go", "1", limits).await?;
            raised?;
            let mut ready = store.instances_with_work(now_ms(), 100).await?;
            ready.sort();
            assert_eq!(ready, vec!["now", "waits-7"]);
        }
        Ok(())
    }

    /// The plan `store` makes for `sql` (`$1` now, `$2` a `limit` if given),
    /// its steps one a line.
    async fn plan_of(
        store: &crate::store::Store,
        sql: &str,
        now: i64,
        limit: Option<i64>,
    ) -> Result<String, Box<dyn std::error::Error>> {
        use sqlx::Row;

        use crate::store::open::Kind;
        let explain = match store.kind() {
            Kind::Sqlite => "EXPLAIN QUERY PLAN",
            Kind::Postgres => "EXPLAIN",
        };
        let explained = format!("{explain} {sql}");
        let mut query = sqlx::query(&explained).bind(now);
        if let Some(limit) = limit {
            query = query.bind(limit);
        }
        let steps = query
            .fetch_all(store.pool())
            .await?
            .iter()
            .map(|row| match store.kind() {
                Kind::Sqlite => row.try_get::<String, _>(3),
                Kind::Postgres => row.try_get::<String, _>(0),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(steps.join("\n"))
    }
}
