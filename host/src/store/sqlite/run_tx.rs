//! [`RunTx`] on the SQLite writer thread's connection.

use rusqlite::{params, OptionalExtension};

use super::tx::SqliteTx;
use crate::core::fence::{self, SessionFence, SessionHolder};
use crate::store::error::StoreError;
use crate::store::records::NewStreamRow;
use crate::store::run_tx::{continues, Claimed, FencedEnd, RunEndRow, RunRow, RunTx, Touched};

impl RunTx for SqliteTx<'_> {
    async fn expire_idle_session(
        &mut self,
        agent: &str,
        id: &str,
        cutoff: i64,
    ) -> Result<bool, StoreError> {
        let deleted = self
            .0
            .prepare_cached(
                "DELETE FROM sessions WHERE agent = ?1 AND id = ?2 AND last_active_at < ?3 \
                 AND NOT EXISTS (SELECT 1 FROM runs WHERE agent = ?1 AND session_id = ?2 \
                 AND status IN ('pending', 'running', 'awaiting_approval'))",
            )?
            .execute(params![agent, id, cutoff])?;
        if deleted > 0 {
            self.0
                .prepare_cached("DELETE FROM messages WHERE agent = ? AND session_id = ?")?
                .execute(params![agent, id])?;
        }
        Ok(deleted > 0)
    }

    /// Read, then written: this connection is the file's one writer, and
    /// the transaction holds its lock from the read on.
    async fn touch_session(
        &mut self,
        agent: &str,
        id: &str,
        caller: Option<&str>,
        now: i64,
    ) -> Result<Touched, StoreError> {
        let owner: Option<Option<String>> = self
            .0
            .prepare_cached("SELECT caller FROM sessions WHERE agent = ? AND id = ?")?
            .query_row(params![agent, id], |row| row.get(0))
            .optional()?;
        match owner {
            None => {
                self.0
                    .prepare_cached(
                        "INSERT INTO sessions (agent, id, created_at, last_active_at, caller) \
                         VALUES (?, ?, ?, ?, ?)",
                    )?
                    .execute(params![agent, id, now, now, caller])?;
                Ok(Touched::New)
            }
            Some(owner) if continues(owner.as_deref(), caller) => {
                self.0
                    .prepare_cached(
                        "UPDATE sessions SET last_active_at = ? WHERE agent = ? AND id = ?",
                    )?
                    .execute(params![now, agent, id])?;
                Ok(Touched::Continued)
            }
            Some(_) => Ok(Touched::Refused),
        }
    }

    async fn claim_session(&mut self, _agent: &str, _id: &str) -> Result<Claimed, StoreError> {
        Ok(Claimed::Here(None))
    }

    /// A SQLite file is served by one process (an OS lock): sessions have
    /// no owners, and no write is ever fenced.
    async fn session_holder(
        &mut self,
        _agent: &str,
        _id: &str,
    ) -> Result<Option<SessionHolder>, StoreError> {
        Ok(None)
    }

    async fn has_unfinished_run(&mut self, agent: &str, id: &str) -> Result<bool, StoreError> {
        Ok(self
            .0
            .prepare_cached(
                "SELECT EXISTS (SELECT 1 FROM runs WHERE agent = ? AND session_id = ? \
                 AND status IN ('pending', 'running'))",
            )?
            .query_row(params![agent, id], |row| row.get::<_, bool>(0))?)
    }

    async fn insert_run(&mut self, run: &RunRow<'_>, now: i64) -> Result<(), StoreError> {
        self.0
            .prepare_cached(
                "INSERT INTO runs (correlation_id, agent, session_id, message, response_format, traceparent, caller, status, created_at, updated_at) \
                 VALUES (?, ?, ?, ?, ?, ?, ?, 'pending', ?, ?)",
            )?
            .execute(params![
                run.correlation_id,
                run.agent,
                run.session_id,
                run.message,
                run.response_format,
                run.traceparent,
                run.caller,
                now,
                now
            ])?;
        Ok(())
    }

    async fn append_messages(
        &mut self,
        agent: &str,
        id: &str,
        correlation_id: &str,
        bodies: &[String],
        now: i64,
    ) -> Result<(), StoreError> {
        let last: i64 = self
            .0
            .prepare_cached(
                "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE agent = ? AND session_id = ?",
            )?
            .query_row(params![agent, id], |row| row.get(0))?;
        let mut insert = self.0.prepare_cached(
            "INSERT INTO messages (agent, session_id, seq, correlation_id, body, created_at) \
             VALUES (?, ?, ?, ?, ?, ?)",
        )?;
        for (i, body) in bodies.iter().enumerate() {
            let seq = last + 1 + i64::try_from(i).unwrap_or(i64::MAX);
            insert.execute(params![agent, id, seq, correlation_id, body, now])?;
        }
        self.0
            .prepare_cached("UPDATE sessions SET last_active_at = ? WHERE agent = ? AND id = ?")?
            .execute(params![now, agent, id])?;
        Ok(())
    }

    async fn end_run(
        &mut self,
        correlation_id: &str,
        end: &RunEndRow,
        now: i64,
    ) -> Result<bool, StoreError> {
        let changed = self
            .0
            .prepare_cached(
                "UPDATE runs SET status = ?, response = ?, error = ?, error_code = ?, usage = ?, updated_at = ? \
                 WHERE correlation_id = ? AND status IN ('pending', 'running')",
            )?
            .execute(params![
                end.status,
                end.response,
                end.error,
                end.error_code,
                end.usage,
                now,
                correlation_id
            ])?;
        Ok(changed > 0)
    }

    /// Never called with a fence on SQLite (one process, no owners); kept
    /// to the rule all the same.
    async fn end_run_fenced(
        &mut self,
        session: (&str, &str),
        correlation_id: &str,
        end: &RunEndRow,
        now: i64,
        fence: &SessionFence,
        bodies: &[String],
    ) -> Result<FencedEnd, StoreError> {
        let holder = self.session_holder(session.0, session.1).await?;
        if !fence::admits(holder.as_ref(), Some(fence)) {
            return Ok(FencedEnd::Fenced);
        }
        if !self.end_run(correlation_id, end, now).await? {
            return Ok(FencedEnd::AlreadyEnded);
        }
        if !bodies.is_empty() {
            self.append_messages(session.0, session.1, correlation_id, bodies, now)
                .await?;
        }
        Ok(FencedEnd::Ended)
    }

    async fn insert_stream_rows(
        &mut self,
        rows: &[NewStreamRow],
        now: i64,
        expires_at: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let mut insert = self.0.prepare_cached(
            "INSERT INTO stream_entries (correlation_id, kind, data, created_at, expires_at, attempt) \
             VALUES (?, ?, ?, ?, ?, ?)",
        )?;
        let mut ids = Vec::with_capacity(rows.len());
        for row in rows {
            insert.execute(params![
                row.correlation_id,
                row.kind,
                row.data,
                now,
                expires_at,
                row.attempt
            ])?;
            ids.push(self.0.last_insert_rowid());
        }
        Ok(ids)
    }
}
