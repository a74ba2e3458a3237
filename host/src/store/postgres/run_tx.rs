//! [`RunTx`] on the PostgreSQL writer's connection. A host that works
//! claims a session it enqueues to unless a live host has it.

use super::shared_hub::SharedHub;
use super::tx::PgTx;
use crate::core::fence::{SessionFence, SessionHolder};
use crate::store::error::StoreError;
use crate::store::records::NewStreamRow;
use crate::store::run_tx::{Claimed, FencedEnd, Opened, RunEndRow, RunRow, RunTx, Touched};

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

    async fn touch_session(
        &mut self,
        agent: &str,
        id: &str,
        caller: Option<&str>,
        now: i64,
    ) -> Result<Touched, StoreError> {
        // `xmax = 0` only on a row this statement inserted. A session
        // another caller claimed is locked and left as it was: no row.
        let new: Option<bool> = sqlx::query_scalar(
            "INSERT INTO sessions AS s (agent, id, created_at, last_active_at, caller) \
             VALUES ($1, $2, $3, $3, $4) \
             ON CONFLICT (agent, id) DO UPDATE SET last_active_at = excluded.last_active_at \
             WHERE $4::TEXT IS NULL OR s.caller = $4 \
             RETURNING (xmax = 0)",
        )
        .bind(agent)
        .bind(id)
        .bind(now)
        .bind(caller)
        .fetch_optional(&mut *self.0)
        .await?;
        Ok(match new {
            Some(true) => Touched::New,
            Some(false) => Touched::Continued,
            None => Touched::Refused,
        })
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
            "INSERT INTO runs (correlation_id, agent, session_id, message, response_format, traceparent, caller, status, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $8, 'pending', $7, $7)",
        )
        .bind(run.correlation_id)
        .bind(run.agent)
        .bind(run.session_id)
        .bind(run.message)
        .bind(run.response_format)
        .bind(run.traceparent)
        .bind(now)
        .bind(run.caller)
        .execute(&mut *self.0)
        .await?;
        Ok(())
    }

    async fn open_run(&mut self, run: &RunRow<'_>, now: i64) -> Result<Option<Opened>, StoreError> {
        // The claim rides on the upsert (a fresh session is born claimed, at
        // epoch 1, as a claim right after its insert would leave it), and so
        // does the session's caller: set by the insert, and an existing
        // session another caller claimed is locked and left as it was
        // (`continues`), which leaves `touched` empty and stores no run. A
        // session inserted meanwhile by another host's transaction is waited
        // for and then read as it committed. The final SELECT reads the
        // runs as they were before this one.
        let sql = format!(
            "WITH touched AS ( \
               INSERT INTO sessions AS s (agent, id, created_at, last_active_at, owner, epoch, caller) \
               VALUES ($1, $2, $3, $3, $4, CASE WHEN $4::TEXT IS NULL THEN 0 ELSE 1 END, $9) \
               ON CONFLICT (agent, id) DO UPDATE SET last_active_at = excluded.last_active_at, \
                 owner = CASE WHEN $4::TEXT IS NOT NULL AND (s.owner IS NULL OR s.owner = $4 OR s.owner NOT IN ({live})) \
                   THEN $4 ELSE s.owner END, \
                 epoch = CASE WHEN $4::TEXT IS NOT NULL AND s.owner IS DISTINCT FROM $4 AND (s.owner IS NULL OR s.owner NOT IN ({live})) \
                   THEN s.epoch + 1 ELSE s.epoch END \
               WHERE $9::TEXT IS NULL OR s.caller = $9 \
               RETURNING (xmax = 0) AS new_session, owner, epoch \
             ), queued AS ( \
               INSERT INTO runs (correlation_id, agent, session_id, message, response_format, traceparent, caller, status, created_at, updated_at) \
               SELECT $5, $1, $2, $6, $7, $8, $9, 'pending', $3, $3 WHERE EXISTS (SELECT 1 FROM touched) \
             ) \
             SELECT t.new_session, t.owner, t.epoch, EXISTS (SELECT 1 FROM runs WHERE agent = $1 AND session_id = $2 \
               AND status IN ('pending', 'running')) AS busy FROM touched t",
            live = SharedHub::live_hosts()
        );
        let opened: Option<(bool, Option<String>, i64, bool)> = sqlx::query_as(&sql)
            .bind(run.agent)
            .bind(run.session_id)
            .bind(now)
            .bind(self.1)
            .bind(run.correlation_id)
            .bind(run.message)
            .bind(run.response_format)
            .bind(run.traceparent)
            .bind(run.caller)
            .fetch_optional(&mut *self.0)
            .await?;
        let Some((new_session, owner, epoch, busy)) = opened else {
            return Ok(None);
        };
        let claimed = match (self.1, owner) {
            (Some(me), Some(owner)) if me == owner => Claimed::Here(Some(epoch)),
            _ => Claimed::Elsewhere,
        };
        Ok(Some(Opened {
            new_session,
            claimed,
            next_in_line: !busy,
        }))
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
            "WITH added AS ( \
               INSERT INTO messages (agent, session_id, seq, correlation_id, body, created_at) \
               SELECT $1, $2, (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE agent = $1 AND session_id = $2) + b.n, \
                      $3, b.body, $5 \
               FROM UNNEST($4::TEXT[]) WITH ORDINALITY AS b(body, n) \
             ) \
             UPDATE sessions SET last_active_at = $5 WHERE agent = $1 AND id = $2",
        )
        .bind(agent)
        .bind(id)
        .bind(correlation_id)
        .bind(bodies)
        .bind(now)
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
        bodies: &[String],
    ) -> Result<FencedEnd, StoreError> {
        // The session's row is locked (a take-over waits for this commit),
        // the fence checked, the run ended and its messages stored, in one
        // statement. The parts see one snapshot: the messages follow the
        // session's last one as it stood, which no other run adds to (a
        // session's runs execute one at a time).
        let (admitted, changed): (i64, i64) = sqlx::query_as(
            "WITH held AS ( \
               SELECT 1 FROM sessions WHERE agent = $8 AND id = $9 AND owner = $10 AND epoch = $11 FOR UPDATE \
             ), ended AS ( \
               UPDATE runs SET status = $1, response = $2, error = $3, error_code = $4, usage = $5, updated_at = $6 \
               WHERE correlation_id = $7 AND status IN ('pending', 'running') AND EXISTS (SELECT 1 FROM held) \
               RETURNING 1 \
             ), added AS ( \
               INSERT INTO messages (agent, session_id, seq, correlation_id, body, created_at) \
               SELECT $8, $9, (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE agent = $8 AND session_id = $9) + b.n, \
                      $7, b.body, $6 \
               FROM UNNEST($12::TEXT[]) WITH ORDINALITY AS b(body, n) WHERE EXISTS (SELECT 1 FROM ended) \
             ), touched AS ( \
               UPDATE sessions SET last_active_at = $6 WHERE agent = $8 AND id = $9 \
               AND cardinality($12::TEXT[]) > 0 AND EXISTS (SELECT 1 FROM ended) \
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
        .bind(bodies)
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
        rows: &[NewStreamRow],
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
