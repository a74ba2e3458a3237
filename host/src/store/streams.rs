//! Response streams kept in the store: the embedded backend of
//! [`crate::streams`]. Plain SQL both databases run as written.

use sqlx::Row;

use super::{Store, StoreError};

/// One stored entry of a response stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamRow {
    pub id: i64,
    /// `chunk`, `complete` or `failed`.
    pub kind: String,
    pub data: String,
    pub created_at: i64,
}

/// An entry to append: (correlation id, kind, data).
pub type NewStreamRow<'a> = (&'a str, &'static str, &'a str);

impl Store {
    /// Appends entries (many runs' at once, in one transaction); returns
    /// their ids in order.
    pub async fn append_stream_rows(
        &self,
        rows: &[NewStreamRow<'_>],
        now: i64,
        expires_at: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let mut tx = self.pool().begin().await?;
        let mut ids = Vec::with_capacity(rows.len());
        for (correlation_id, kind, data) in rows {
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO stream_entries (correlation_id, kind, data, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5) RETURNING id",
            )
            .bind(*correlation_id)
            .bind(*kind)
            .bind(*data)
            .bind(now)
            .bind(expires_at)
            .fetch_one(&mut *tx)
            .await?;
            ids.push(id);
        }
        tx.commit().await?;
        Ok(ids)
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
            "SELECT id, kind, data, created_at FROM stream_entries \
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
