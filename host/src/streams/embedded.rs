//! Streams in the store (the default): one row an entry, ids from the
//! store's sequence, expiry swept by the writer.

use std::time::Duration;

use super::{Entry, EntryId, Outgoing, Stored, StreamBackend, StreamError};
use crate::store::{now_ms, NewStreamRow, Store};

pub(super) struct Embedded {
    store: Store,
}

impl Embedded {
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

fn kind_and_data(entry: &Entry) -> (&'static str, &str) {
    match entry {
        Entry::Chunk(text) => ("chunk", text),
        Entry::Complete => ("complete", ""),
        Entry::Failed(error) => ("failed", error),
        Entry::Restart => ("restart", ""),
    }
}

impl StreamBackend for Embedded {
    async fn append(
        &self,
        entries: &[Outgoing],
        ttl: Duration,
    ) -> Result<Vec<EntryId>, StreamError> {
        let rows: Vec<NewStreamRow> = entries
            .iter()
            .map(|outgoing| {
                let (kind, data) = kind_and_data(&outgoing.entry);
                NewStreamRow {
                    correlation_id: outgoing.correlation_id.clone(),
                    attempt: outgoing.attempt,
                    kind,
                    data: data.to_string(),
                }
            })
            .collect();
        let expires = now_ms().saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let ids = self.store.append_stream_rows(rows, expires).await?;
        Ok(ids.into_iter().map(|id| EntryId(id.to_string())).collect())
    }

    async fn read_after(
        &self,
        correlation_id: &str,
        after: &EntryId,
        limit: usize,
    ) -> Result<Vec<Stored>, StreamError> {
        // A cursor from another backend (a Redis id) reads from its number.
        let after = i64::try_from(after.key().0).unwrap_or(i64::MAX);
        let rows = self
            .store
            .stream_rows_after(correlation_id, after, limit, now_ms())
            .await?;
        rows.into_iter()
            .map(|row| {
                let entry = match row.kind.as_str() {
                    "chunk" => Entry::Chunk(row.data),
                    "complete" => Entry::Complete,
                    "failed" => Entry::Failed(row.data),
                    "restart" => Entry::Restart,
                    other => return Err(StreamError::Corrupt(format!("entry kind '{other}'"))),
                };
                Ok(Stored {
                    id: EntryId(row.id.to_string()),
                    entry,
                    at_ms: row.created_at,
                    attempt: row.attempt,
                })
            })
            .collect()
    }

    async fn sweep(&self) -> Result<u64, StreamError> {
        let store = &self.store;
        Ok(store
            .within("expired stream entries", store.expire_stream_rows(now_ms()))
            .await?)
    }
}
