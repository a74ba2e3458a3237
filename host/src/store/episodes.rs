//! An instance's journal and inbox as an episode reads them, and committing
//! an episode's effects.

use rusqlite::{params, Connection};
use sqlx::Row;

use super::apply::{Applied, Target};
use super::group_commit::{Read, ReadOut, Write, Written};
use super::instances::from_json;
use super::{Store, StoreError};
use crate::core::effects::Effect;
use crate::core::journal::{Entry, Event};
use crate::core::lifecycle::arrivals::Arrival;

impl Store {
    /// The current execution's journal, in order, with each row's time.
    pub async fn journal(&self, id: &str) -> Result<Vec<(Entry, i64)>, StoreError> {
        match self.committer().read(Read::Journal(id.to_string())).await? {
            ReadOut::Journal(journal) => Ok(journal),
            other => Err(unexpected(other)),
        }
    }

    /// Inbox rows visible now, oldest first, with the execution each is for.
    pub async fn visible_inbox(&self, id: &str, now: i64) -> Result<Vec<Arrival>, StoreError> {
        let read = Read::Inbox {
            instance: id.to_string(),
            now,
        };
        match self.committer().read(read).await? {
            ReadOut::Inbox(arrivals) => Ok(arrivals),
            other => Err(unexpected(other)),
        }
    }

    /// Commits an episode's effects if the instance is still in the execution
    /// and an active status it ran on; `None` (nothing written) otherwise.
    /// Concurrent commits of many instances share one transaction.
    pub async fn commit_episode(
        &self,
        target: Target,
        effects: Vec<Effect>,
    ) -> Result<Option<Applied>, StoreError> {
        match self
            .committer()
            .commit(Write::Episode { target, effects })
            .await?
        {
            Written::Episode(applied) => Ok(applied),
            other => Err(StoreError::Write(format!(
                "the committer answered another write: {other:?}"
            ))),
        }
    }

    /// Instances with something to do now: new, restarted, or with visible
    /// inbox rows (and not suspended).
    pub async fn instances_with_work(
        &self,
        now: i64,
        limit: usize,
    ) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "SELECT id FROM instances WHERE status IN ('Pending', 'ContinuedAsNew') \
             UNION SELECT DISTINCT i.instance_id FROM inbox i JOIN instances s ON s.id = i.instance_id \
             WHERE i.visible_at <= ? AND s.status IN ('Pending', 'Running', 'ContinuedAsNew') LIMIT ?",
        )
        .bind(now)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await?;
        rows.iter().map(|r| Ok(r.try_get("id")?)).collect()
    }
}

fn unexpected(out: ReadOut) -> StoreError {
    StoreError::Write(format!("the committer answered another read: {out:?}"))
}

pub(super) fn journal(connection: &Connection, id: &str) -> Result<Vec<(Entry, i64)>, StoreError> {
    let mut statement = connection.prepare_cached(
        "SELECT entry, recorded_at FROM journal WHERE instance_id = ? ORDER BY seq",
    )?;
    let mut rows = statement.query([id])?;
    let mut journal = Vec::new();
    while let Some(row) = rows.next()? {
        let entry: String = row.get(0)?;
        journal.push((from_json(&entry, "journal entry")?, row.get(1)?));
    }
    Ok(journal)
}

pub(super) fn visible_inbox(
    connection: &Connection,
    id: &str,
    now: i64,
) -> Result<Vec<Arrival>, StoreError> {
    let mut statement = connection.prepare_cached(
        "SELECT id, execution, event FROM inbox WHERE instance_id = ? AND visible_at <= ? ORDER BY id",
    )?;
    let mut rows = statement.query(params![id, now])?;
    let mut arrivals = Vec::new();
    while let Some(row) = rows.next()? {
        let event: String = row.get(2)?;
        let event: Event = from_json(&event, "inbox event")?;
        arrivals.push((row.get(0)?, row.get(1)?, event));
    }
    Ok(arrivals)
}
