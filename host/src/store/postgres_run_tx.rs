//! [`RunTx`] on the PostgreSQL writer's connection. A host that works
//! claims a session it enqueues to unless a live host has it.

use super::postgres_tx::PgTx;
use super::run_tx::{Claimed, FencedEnd, RunEndRow, RunRow, RunTx};
use super::shared_hub::SharedHub;
use super::StoreError;
use crate::core::fence::{SessionFence, SessionHolder};

impl RunTx for PgTx<'_> {
    async fn expire_idle_session(
        &mut self,
        agent: &str,
        id: &str,
        cutoff: i64,
    ) -> Result<bool, StoreError> {
        let deleted = sqlx::query(
            "DELETE FROM sessions WHERE agent = $1 AND id = $2 AND last_active_at < $3 \
             AND NOT EXISTS (SELECT 1 FROM runs WHERE agent = $1 AND session_id = $2 \
             AND status IN ('pending', 'running', 'awaiting_approval'))",
        )
        .bind(agent)
        .bind(id)
        .bind(cutoff)
        .execute(&mut *self.0)
        .await?
        .rows_affected();
        if deleted > 0 {
            sqlx::query("DELETE FROM messages WHERE agent = $1 AND session_id = $2")
                .bind(agent)
                .bind(id)
                .execute(&mut *self.0)
                .await?;
        }
        Ok(deleted > 0)
    }

    async fn touch_session(&mut self, agent: &str, id: &str, now: i64) -> Result<bool, StoreError> {
        // `xmax = 0` only on a row this statement inserted.
        Ok(sqlx::query_scalar(
            "INSERT INTO sessions (agent, id, created_at, last_active_at) VALUES ($1, $2, $3, $3) \
             ON CONFLICT (agent, id) DO UPDATE SET last_active_at = excluded.last_active_at \
             RETURNING (xmax = 0)",
        )
        .bind(agent)
        .bind(id)
        .bind(now)
        .fetch_one(&mut *self.0)
        .await?)
    }

    async fn claim_session(&mut self, agent: &str, id: &str) -> Result<Claimed, StoreError> {
        let Some(me) = self.1 else {
            return Ok(Claimed::Elsewhere);
        };
        let epoch: Option<i64> = sqlx::query_scalar(&format!(
            "UPDATE sessions SET owner = $1, \
             epoch = CASE WHEN owner IS DISTINCT FROM $1 THEN epoch + 1 ELSE epoch END \
             WHERE agent = $2 AND id = $3 AND (owner IS NULL OR owner = $1 OR owner NOT IN ({})) \
             RETURNING epoch",
            SharedHub::live_hosts()
        ))
        .bind(me)
        .bind(agent)
        .bind(id)
        .fetch_optional(&mut *self.0)
        .await?;
        Ok(epoch.map_or(Claimed::Elsewhere, |epoch| Claimed::Here(Some(epoch))))
    }

    async fn session_holder(
        &mut self,
        agent: &str,
        id: &str,
    ) -> Result<Option<SessionHolder>, StoreError> {
        let row: Option<(Option<String>, i64)> = sqlx::query_as(
            "SELECT owner, epoch FROM sessions WHERE agent = $1 AND id = $2 FOR UPDATE",
        )
        .bind(agent)
        .bind(id)
        .fetch_optional(&mut *self.0)
        .await?;
        Ok(row.map(|(owner, epoch)| SessionHolder { owner, epoch }))
    }

    async fn has_unfinished_run(&mut self, agent: &str, id: &str) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE agent = $1 AND session_id = $2 \
             AND status IN ('pending', 'running'))",
        )
        .bind(agent)
        .bind(id)
        .fetch_one(&mut *self.0)
        .await?)
    }

    async fn insert_run(&mut self, run: &RunRow<'_>, now: i64) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO runs (correlation_id, agent, session_id, message, response_format, traceparent, status, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $7)",
        )
        .bind(run.correlation_id)
        .bind(run.agent)
        .bind(run.session_id)
        .bind(run.message)
        .bind(run.response_format)
        .bind(run.traceparent)
        .bind(now)
        .execute(&mut *self.0)
        .await?;
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
        sqlx::query(
            "INSERT INTO messages (agent, session_id, seq, correlation_id, body, created_at) \
             SELECT $1, $2, (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE agent = $1 AND session_id = $2) + b.n, \
                    $3, b.body, $5 \
             FROM UNNEST($4::TEXT[]) WITH ORDINALITY AS b(body, n)",
        )
        .bind(agent)
        .bind(id)
        .bind(correlation_id)
        .bind(bodies)
        .bind(now)
        .execute(&mut *self.0)
        .await?;
        sqlx::query("UPDATE sessions SET last_active_at = $1 WHERE agent = $2 AND id = $3")
            .bind(now)
            .bind(agent)
            .bind(id)
            .execute(&mut *self.0)
            .await?;
        Ok(())
    }

    async fn end_run(
        &mut self,
        correlation_id: &str,
        end: &RunEndRow,
        now: i64,
    ) -> Result<bool, StoreError> {
        Ok(sqlx::query(
            "UPDATE runs SET status = $1, response = $2, error = $3, error_code = $4, usage = $5, updated_at = $6 \
             WHERE correlation_id = $7 AND status IN ('pending', 'running')",
        )
        .bind(end.status)
        .bind(&end.response)
        .bind(&end.error)
        .bind(&end.error_code)
        .bind(&end.usage)
        .bind(now)
        .bind(correlation_id)
        .execute(&mut *self.0)
        .await?
        .rows_affected()
            > 0)
    }

    async fn end_run_fenced(
        &mut self,
        session: (&str, &str),
        correlation_id: &str,
        end: &RunEndRow,
        now: i64,
        fence: &SessionFence,
    ) -> Result<FencedEnd, StoreError> {
        // The session's row is locked (a take-over waits for this commit),
        // the fence checked and the run ended, in one statement.
        let (admitted, changed): (i64, i64) = sqlx::query_as(
            "WITH held AS ( \
               SELECT 1 FROM sessions WHERE agent = $8 AND id = $9 AND owner = $10 AND epoch = $11 FOR UPDATE \
             ), ended AS ( \
               UPDATE runs SET status = $1, response = $2, error = $3, error_code = $4, usage = $5, updated_at = $6 \
               WHERE correlation_id = $7 AND status IN ('pending', 'running') AND EXISTS (SELECT 1 FROM held) \
               RETURNING 1 \
             ) \
             SELECT (SELECT count(*) FROM held), (SELECT count(*) FROM ended)",
        )
        .bind(end.status)
        .bind(&end.response)
        .bind(&end.error)
        .bind(&end.error_code)
        .bind(&end.usage)
        .bind(now)
        .bind(correlation_id)
        .bind(session.0)
        .bind(session.1)
        .bind(&fence.owner)
        .bind(fence.epoch)
        .fetch_one(&mut *self.0)
        .await?;
        Ok(match (admitted > 0, changed > 0) {
            (false, _) => FencedEnd::Fenced,
            (true, true) => FencedEnd::Ended,
            (true, false) => FencedEnd::AlreadyEnded,
        })
    }

    async fn insert_stream_rows(
        &mut self,
        rows: &[super::NewStreamRow],
        now: i64,
        expires_at: i64,
    ) -> Result<Vec<i64>, StoreError> {
        let mut ids: Vec<i64> = sqlx::query_scalar(
            "INSERT INTO stream_entries (correlation_id, kind, data, created_at, expires_at, attempt) \
             SELECT c, k, d, $4, $5, a FROM UNNEST($1::TEXT[], $2::TEXT[], $3::TEXT[], $6::BIGINT[]) \
             WITH ORDINALITY AS r(c, k, d, a, n) ORDER BY n RETURNING id",
        )
        .bind(rows.iter().map(|r| r.correlation_id.as_str()).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.kind).collect::<Vec<_>>())
        .bind(rows.iter().map(|r| r.data.as_str()).collect::<Vec<_>>())
        .bind(now)
        .bind(expires_at)
        .bind(rows.iter().map(|r| r.attempt).collect::<Vec<_>>())
        .fetch_all(&mut *self.0)
        .await?;
        // Ids come from one sequence in insertion order.
        ids.sort_unstable();
        Ok(ids)
    }
}
