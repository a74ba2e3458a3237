//! Response streams kept in the store: the embedded backend of
//! the response streams service. Plain SQL both databases run as written.

use sqlx::Row;

use super::durable_records::{Write, Written};
use super::error::StoreError;
use super::open::Store;
use super::records::NewStreamRow;
use super::run_writes::{RunWrite, RunWritten};

/// One stored entry of a response stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRow {
    pub id: i64,
    /// `chunk`, `complete` or `failed`.
    pub kind: String,
    pub data: String,
    pub created_at: i64,
    /// The run attempt that wrote it.
    pub attempt: i64,
}

impl Store {
    /// Appends entries (many runs' at once), through the store's one writer
    /// and in its shared transactions; returns their ids in order.
    pub async fn append_stream_rows(
        &self,
        mut rows: Vec<NewStreamRow>,
        expires_at: i64,
    ) -> Result<Vec<i64>, StoreError> {
        for row in rows.iter_mut().filter(|r| r.data.contains('\0')) {
            row.data = super::sessions::storable(&row.data);
        }
        match self
            .committer()
            .commit(Write::Run(RunWrite::Stream { rows, expires_at }))
            .await?
        {
            Written::Run(RunWritten::Streamed(ids)) => Ok(ids),
            other => Err(StoreError::Write(format!(
                "the committer answered another write: {other:?}"
            ))),
        }
    }

    /// The run's unexpired entries after `after`, oldest first.
    pub async fn stream_rows_after(
        &self,
        correlation_id: &str,
        after: i64,
        limit: usize,
        now: i64,
    ) -> Result<Vec<StreamRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, kind, data, created_at, attempt FROM stream_entries \
             WHERE correlation_id = $1 AND id > $2 AND expires_at > $3 ORDER BY id LIMIT $4",
        )
        .bind(correlation_id)
        .bind(after)
        .bind(now)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(StreamRow {
                    id: r.try_get("id")?,
                    kind: r.try_get("kind")?,
                    data: r.try_get("data")?,
                    created_at: r.try_get("created_at")?,
                    attempt: r.try_get("attempt")?,
                })
            })
            .collect()
    }

    /// Deletes expired entries; returns how many.
    pub async fn expire_stream_rows(&self, now: i64) -> Result<u64, StoreError> {
        Ok(
            sqlx::query("DELETE FROM stream_entries WHERE expires_at <= $1")
                .bind(now)
                .execute(self.pool())
                .await?
                .rows_affected(),
        )
    }
}
