//! What a replay check of a new component version reads: the unfinished
//! instances of older versions of that component, and each one's journal.
//! Read on the pool, never on the writer (a check of thousands of instances
//! must not hold up a single commit), or, for `agenthost check-replay`, on
//! a read-only connection of its own ([`ReadOnlyHub`]) beside a host that
//! holds the store. Nothing here writes; an upgrade the check proves is an
//! episode write ([`Store::commit_episode`] with
//! [`crate::core::effects::Effect::Upgrade`]).

use std::path::Path;

use sqlx::any::AnyPoolOptions;
use sqlx::AnyPool;
use sqlx::{Executor, Row};

use super::durable_records::from_json;
use super::error::StoreError;
use super::hub::TaskHub;
use super::open::{Kind, Store};
use crate::core::journal::Entry;

/// One instance as a replay check replays it: its journal and the row it
/// was read with, which an upgrade takes as its fence.
#[derive(Debug, Clone)]
pub struct Checkable {
    pub id: String,
    /// The orchestration it runs.
    pub name: String,
    /// The version it runs now.
    pub digest: String,
    pub input: String,
    pub created_at: i64,
    pub execution: i64,
    /// The history count the journal was read at: the fence of a move.
    /// `None` when the instance took a step while it was read (the journal,
    /// one statement's read, is still one it had, and can be judged; it
    /// cannot be moved until a later check).
    pub fence: Option<u64>,
    pub journal: Vec<(Entry, i64)>,
}

/// The columns of an instance that say whether it changed.
#[derive(Debug, PartialEq)]
struct Stamp {
    digest: String,
    execution: i64,
    events: i64,
    status: String,
}

const UNFINISHED: &str = "('Pending', 'Running', 'Suspended')";

/// The reads of a replay check, wherever they go: a pool, the prefix its
/// tables need (a plain PostgreSQL connection sets no `search_path`), and
/// the host whose instances alone are listed (on a shared hub only an
/// instance's owner may write its next step, so each host checks its own).
pub struct CheckReads<'a> {
    pool: &'a AnyPool,
    prefix: &'a str,
    owner: Option<&'a str>,
}

impl CheckReads<'_> {
    /// Unfinished instances of component `component` that run a version
    /// other than `digest`, ids ascending, at most `limit`.
    pub async fn instances_on_other_versions(
        &self,
        component: &str,
        digest: &str,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let p = self.prefix;
        let owned = match self.owner {
            Some(_) => " AND i.owner = $4",
            None => "",
        };
        let sql = format!(
            "SELECT i.id AS id FROM {p}instances i JOIN {p}component_versions v ON v.digest = i.component_digest \
             WHERE v.name = $1 AND i.component_digest <> $2 AND i.status IN {UNFINISHED}{owned} \
             ORDER BY i.id LIMIT $3"
        );
        let mut query = sqlx::query(&sql)
            .bind(component)
            .bind(digest)
            .bind(i64::try_from(limit).unwrap_or(i64::MAX));
        if let Some(owner) = self.owner {
            query = query.bind(owner);
        }
        let rows = query.fetch_all(self.pool).await?;
        rows.iter().map(|r| Ok(r.try_get("id")?)).collect()
    }

    /// Instance `id` with its journal: `None` when it is gone or over.
    pub async fn checkable(&self, id: &str) -> Result<Option<Checkable>, StoreError> {
        let Some((before, _)) = self.stamp(id).await? else {
            return Ok(None);
        };
        let journal = self.journal(id).await?;
        let Some((after, row)) = self.stamp(id).await? else {
            return Ok(None);
        };
        let fence = (before == after).then(|| u64::try_from(after.events).unwrap_or(0));
        Ok(Some(Checkable {
            id: id.to_string(),
            name: row.0,
            digest: after.digest,
            input: row.1,
            created_at: row.2,
            execution: after.execution,
            fence,
            journal,
        }))
    }

    /// Whether the store keeps any version of component `component`: a
    /// name nothing was ever served as lists no instances, which must not
    /// read as "all compatible".
    pub async fn knows_component(&self, component: &str) -> Result<bool, StoreError> {
        let sql = format!(
            "SELECT COUNT(*) AS n FROM {}component_versions WHERE name = $1",
            self.prefix
        );
        let n: i64 = sqlx::query(&sql)
            .bind(component)
            .fetch_one(self.pool)
            .await?
            .try_get("n")?;
        Ok(n > 0)
    }

    async fn journal(&self, id: &str) -> Result<Vec<(Entry, i64)>, StoreError> {
        let sql = format!(
            "SELECT entry, recorded_at FROM {}journal WHERE instance_id = $1 ORDER BY seq",
            self.prefix
        );
        let rows = sqlx::query(&sql).bind(id).fetch_all(self.pool).await?;
        rows.iter()
            .map(|r| {
                Ok((
                    from_json::<Entry>(&r.try_get::<String, _>("entry")?, "journal entry")?,
                    r.try_get("recorded_at")?,
                ))
            })
            .collect()
    }

    /// The instance's stamp and (name, input, created_at), if unfinished.
    async fn stamp(&self, id: &str) -> Result<Option<(Stamp, (String, String, i64))>, StoreError> {
        let sql = format!(
            "SELECT name, input, created_at, component_digest, execution, history_events, status \
             FROM {}instances WHERE id = $1 AND status IN {UNFINISHED}",
            self.prefix
        );
        let Some(row) = sqlx::query(&sql).bind(id).fetch_optional(self.pool).await? else {
            return Ok(None);
        };
        Ok(Some((
            Stamp {
                digest: row.try_get("component_digest")?,
                execution: row.try_get("execution")?,
                events: row.try_get("history_events")?,
                status: row.try_get("status")?,
            },
            (
                row.try_get("name")?,
                row.try_get("input")?,
                row.try_get("created_at")?,
            ),
        )))
    }
}

impl Store {
    /// The reads of a replay check, on the pool.
    pub fn check_reads(&self) -> CheckReads<'_> {
        CheckReads {
            pool: self.pool(),
            prefix: "",
            owner: self.shared().map(|hub| hub.host.as_str()),
        }
    }
}

/// A read-only connection to a task hub's store, for a process that serves
/// none of it (`agenthost due`, `agenthost check-replay`): no migration, no
/// membership, no lock, and a session that refuses writes (SQLite
/// `mode=ro`, PostgreSQL `default_transaction_read_only`). A store that
/// holds no such hub says so.
pub struct ReadOnlyHub {
    pub(super) pool: AnyPool,
    pub(super) kind: Kind,
    /// The hub's PostgreSQL schema (empty on SQLite).
    pub(super) schema: String,
    /// What its tables need before their names: `schema.` on PostgreSQL.
    prefix: String,
}

impl ReadOnlyHub {
    pub async fn open(url: &str, hub: &TaskHub) -> Result<Self, StoreError> {
        sqlx::any::install_default_drivers();
        let postgres = url.starts_with("postgres://") || url.starts_with("postgresql://");
        let (kind, connect, schema) = if postgres {
            (Kind::Postgres, url.to_string(), hub.postgres_schema())
        } else {
            let named = url
                .strip_prefix("sqlite://")
                .ok_or_else(|| StoreError::Absent(format!("'{url}' is not a store URL")))?;
            let file = hub.sqlite_file(Path::new(named));
            if !file.exists() {
                return Err(StoreError::Absent(format!(
                    "no store at {} (no host has served task hub '{hub}' there)",
                    file.display()
                )));
            }
            let connect = format!("sqlite://{}?mode=ro", file.display());
            (Kind::Sqlite, connect, String::new())
        };
        let pool = AnyPoolOptions::new()
            .max_connections(2)
            // A store that does not answer is said in seconds, not the
            // pool's default half minute.
            .acquire_timeout(std::time::Duration::from_secs(5))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if postgres {
                        conn.execute("SET default_transaction_read_only = on")
                            .await?;
                    }
                    Ok(())
                })
            })
            .connect(&connect)
            .await?;
        let prefix = match kind {
            Kind::Postgres => format!("{schema}."),
            Kind::Sqlite => String::new(),
        };
        let reader = Self {
            pool,
            kind,
            schema,
            prefix,
        };
        let probe = format!("SELECT COUNT(*) AS n FROM {}instances", reader.prefix);
        if sqlx::query(&probe).fetch_one(&reader.pool).await.is_err() {
            reader.pool.close().await;
            return Err(StoreError::Absent(format!(
                "the store holds no task hub '{hub}' (no host has served it yet)"
            )));
        }
        Ok(reader)
    }

    /// The reads of a replay check: every host's instances.
    pub fn check_reads(&self) -> CheckReads<'_> {
        CheckReads {
            pool: &self.pool,
            prefix: &self.prefix,
            owner: None,
        }
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}
