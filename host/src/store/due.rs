//! Due work, read by a process that serves no part of the hub (`agenthost
//! due`, a platform's scaler): what a host would have to do now, or within
//! a lead time, and when the next timer falls due. A plain connection: no
//! migration, no hub membership, nothing written; a store that holds no
//! such hub says so.
//!
//! The one query ([`due_sql`]) is also what a scaler runs itself (KEDA's
//! PostgreSQL scaler takes a query that answers a number): a platform that
//! scaled to zero starts a host when it is above zero, before a timer is
//! late.

use sqlx::Row;

use super::clock::now_ms;
use super::error::StoreError;
use super::hub::TaskHub;
use super::open::Kind;
use super::replay_checks::ReadOnlyHub;

/// What a host of the hub would have to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueWork {
    /// Instances with work: to start (or started for a time reached),
    /// with inbox rows visible (a timer fired, an event, a result).
    pub instances: i64,
    /// Activities and agent calls waiting to run (a retry's time reached).
    pub tasks: i64,
    /// Agent runs queued or under way (a host died under them).
    pub runs: i64,
    /// When the next timer fires, retry falls due or scheduled start comes,
    /// after the moment asked about (Unix ms).
    pub next_at: Option<i64>,
}

impl DueWork {
    /// Everything a host would have to do: the scaler's number.
    pub fn total(&self) -> i64 {
        self.instances + self.tasks + self.runs
    }
}

/// The number of things due at `at` (a SQL expression of Unix ms) on a
/// store of `kind`, the hub's tables named bare (`schema.` prefixed for a
/// scaler's query on PostgreSQL).
pub fn due_sql(kind: Kind, schema: &str, at: &str) -> String {
    let t = |table: &str| match kind {
        Kind::Postgres => format!("{schema}.{table}"),
        Kind::Sqlite => table.to_string(),
    };
    format!(
        "SELECT \
         (SELECT COUNT(*) FROM {instances} WHERE status IN ('Pending', 'ContinuedAsNew') \
            AND (start_at IS NULL OR start_at <= {at})) \
         + (SELECT COUNT(DISTINCT i.instance_id) FROM {inbox} i JOIN {instances} s ON s.id = i.instance_id \
            WHERE i.visible_at <= {at} AND i.parked = 0 AND s.status = 'Running') \
         + (SELECT COUNT(*) FROM {tasks} WHERE due_at <= {at}) \
         + (SELECT COUNT(*) FROM {runs} WHERE status IN ('pending', 'running')) AS due",
        instances = t("instances"),
        inbox = t("inbox"),
        tasks = t("tasks"),
        runs = t("runs"),
    )
}

/// PostgreSQL's clock, in Unix ms, plus `ms`: what a scaler's query
/// compares with.
pub fn postgres_now_plus(ms: i64) -> String {
    format!("((EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT + {ms})")
}

/// Reads the due work of hub `hub` of the store at `url`, counting what
/// falls due within `within_ms` of now.
pub async fn due_work(url: &str, hub: &TaskHub, within_ms: i64) -> Result<DueWork, StoreError> {
    let reader = ReadOnlyHub::open(url, hub).await?;
    let (pool, kind, schema) = (reader.pool.clone(), reader.kind, reader.schema.clone());
    let at = now_ms() + within_ms;
    // Each count at the moment `at` ($1), the total as a scaler reads it.
    let count = |sql: String| {
        let pool = pool.clone();
        async move {
            let row = sqlx::query(&sql).bind(at).fetch_one(&pool).await?;
            Ok::<i64, StoreError>(row.try_get::<i64, _>(0)?)
        }
    };
    let total = count(due_sql(kind, &schema, "$1")).await?;
    let runs = count(format!(
        "SELECT COUNT(*) FROM {} WHERE status IN ('pending', 'running') AND $1 = $1",
        qualified(kind, &schema, "runs")
    ))
    .await?;
    let tasks = count(format!(
        "SELECT COUNT(*) FROM {} WHERE due_at <= $1",
        qualified(kind, &schema, "tasks")
    ))
    .await?;
    let next_at: Option<i64> = {
        let sql = super::tasks::next_due(kind);
        let sql = match kind {
            Kind::Postgres => qualify_next_due(&sql, &schema),
            Kind::Sqlite => sql,
        };
        sqlx::query_scalar(&sql).bind(at).fetch_one(&pool).await?
    };
    pool.close().await;
    Ok(DueWork {
        instances: total - runs - tasks,
        tasks,
        runs,
        next_at,
    })
}

fn qualified(kind: Kind, schema: &str, table: &str) -> String {
    match kind {
        Kind::Postgres => format!("{schema}.{table}"),
        Kind::Sqlite => table.to_string(),
    }
}

/// The next-due query with the hub's schema named before each table (the
/// plain connection sets no `search_path`).
fn qualify_next_due(sql: &str, schema: &str) -> String {
    ["inbox", "tasks", "instances"]
        .iter()
        .fold(sql.to_string(), |sql, table| {
            sql.replace(
                &format!("FROM {table} "),
                &format!("FROM {schema}.{table} "),
            )
        })
}
