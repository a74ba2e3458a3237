//! Agent runs, sessions and their messages. Plain SQL that both databases
//! run as written (through sqlx's `Any` driver, placeholders `$1`…).

use std::time::Duration;

use sqlx::any::AnyRow;
use sqlx::AnyConnection;
use sqlx::Row;

use super::shared_hub::{notify, SharedHub};
use super::{now_ms, NewRun, RunRecord, RunStatus, SessionKey, Store, StoreError, StoredMessage};
use crate::core::chat::{ChatMessage, Usage};

const RUN_COLUMNS: &str = "correlation_id, agent, session_id, message, response_format, status, \
                           response, error, error_code, usage, created_at, updated_at";

impl Store {
    /// Stores a new run (pending) and touches its session. When the session has
    /// been idle longer than `ttl`, its history is dropped first, in the same
    /// transaction, so an expired thread never leaks into a new answer.
    ///
    /// The flag says whether this host executes the run: always on SQLite;
    /// on a shared hub, when it works and owns (or just claimed) the
    /// session. Otherwise the other hosts are told, in the same transaction.
    pub async fn enqueue_run(
        &self,
        run: &NewRun,
        ttl: Option<Duration>,
    ) -> Result<(RunRecord, bool), StoreError> {
        let now = now_ms();
        // Every transaction here begins with a write, so that SQLite takes
        // its write lock first: a read first could be invalidated by another
        // writer (SQLITE_BUSY_SNAPSHOT, which no busy timeout retries).
        let mut tx = self.pool().begin().await?;
        if let Some(ttl) = ttl {
            let cutoff = now - i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
            let expired = sqlx::query(
                "DELETE FROM sessions WHERE agent = $1 AND id = $2 AND last_active_at < $3",
            )
            .bind(&run.session.agent)
            .bind(&run.session.session_id)
            .bind(cutoff)
            .execute(&mut *tx)
            .await?;
            if expired.rows_affected() > 0 {
                delete_messages(&mut tx, &run.session).await?;
            }
        }
        sqlx::query(
            "INSERT INTO sessions (agent, id, created_at, last_active_at) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (agent, id) DO UPDATE SET last_active_at = excluded.last_active_at",
        )
        .bind(&run.session.agent)
        .bind(&run.session.session_id)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let format = run.response_format.as_ref().map(|f| f.to_string());
        sqlx::query(
            "INSERT INTO runs (correlation_id, agent, session_id, message, response_format, status, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, 'pending', $6, $7)",
        )
        .bind(&run.correlation_id)
        .bind(&run.session.agent)
        .bind(&run.session.session_id)
        .bind(&run.message)
        .bind(format)
        .bind(now)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        let run_here = match self.shared() {
            None => true,
            Some(hub) => {
                let claimed = match hub.owner() {
                    Some(me) => {
                        sqlx::query(&format!(
                            "UPDATE sessions SET owner = $1 WHERE agent = $2 AND id = $3 \
                             AND (owner IS NULL OR owner = $1 OR owner NOT IN ({}))",
                            SharedHub::live_hosts()
                        ))
                        .bind(me)
                        .bind(&run.session.agent)
                        .bind(&run.session.session_id)
                        .execute(&mut *tx)
                        .await?
                        .rows_affected()
                            > 0
                    }
                    None => false,
                };
                if !claimed {
                    notify(&mut *tx, &hub.channel, &hub.sessions_payload()).await?;
                }
                claimed
            }
        };
        tx.commit().await?;
        let record = RunRecord {
            correlation_id: run.correlation_id.clone(),
            agent: run.session.agent.clone(),
            thread_id: run.session.session_id.clone(),
            message: run.message.clone(),
            status: RunStatus::Pending,
            response_format: run.response_format.clone(),
            response: None,
            error: None,
            error_code: None,
            usage: None,
            created_at: now,
            updated_at: now,
        };
        Ok((record, run_here))
    }

    pub async fn run(&self, correlation_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let sql = format!("SELECT {RUN_COLUMNS} FROM runs WHERE correlation_id = $1");
        let row = sqlx::query(&sql)
            .bind(correlation_id)
            .fetch_optional(self.pool())
            .await?;
        row.map(|r| run_from_row(&r)).transpose()
    }

    /// The agent runs of an orchestration instance's execution, oldest
    /// first (their correlation ids are `{instance}:{execution}:…`).
    pub async fn runs_of_instance(
        &self,
        instance: &str,
        execution: i64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let prefix = format!("{instance}:{execution}:");
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE SUBSTR(correlation_id, 1, CAST($2 AS INTEGER)) = $1 ORDER BY seq"
        );
        let rows = sqlx::query(&sql)
            .bind(&prefix)
            .bind(i64::try_from(prefix.chars().count()).unwrap_or(i64::MAX))
            .fetch_all(self.pool())
            .await?;
        rows.iter().map(run_from_row).collect()
    }

    /// The oldest unfinished run of a session: the next one to execute. On
    /// a shared hub, only while this host owns the session: one that lost
    /// it (its lease lapsed and another host took over) stops there.
    pub async fn next_unfinished_run(
        &self,
        session: &SessionKey,
    ) -> Result<Option<RunRecord>, StoreError> {
        let owned = if self.owner_id().is_some() {
            " AND EXISTS (SELECT 1 FROM sessions WHERE agent = $1 AND id = $2 AND owner = $3)"
        } else {
            " AND $3 IS NULL"
        };
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE agent = $1 AND session_id = $2 \
             AND status IN ('pending', 'running'){owned} ORDER BY seq LIMIT 1"
        );
        let row = sqlx::query(&sql)
            .bind(&session.agent)
            .bind(&session.session_id)
            .bind(self.owner_id())
            .fetch_optional(self.pool())
            .await?;
        row.map(|r| run_from_row(&r)).transpose()
    }

    /// Sessions with work left over, e.g. from a host that died.
    pub async fn sessions_with_unfinished_runs(&self) -> Result<Vec<SessionKey>, StoreError> {
        let rows = sqlx::query(
            "SELECT agent, session_id, MIN(seq) AS first FROM runs WHERE status IN ('pending', 'running') \
             GROUP BY agent, session_id ORDER BY first",
        )
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(SessionKey {
                    agent: r.try_get("agent")?,
                    session_id: r.try_get("session_id")?,
                })
            })
            .collect()
    }

    pub async fn mark_running(&self, correlation_id: &str) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE runs SET status = 'running', updated_at = $1 WHERE correlation_id = $2",
        )
        .bind(now_ms())
        .bind(correlation_id)
        .execute(self.pool())
        .await?;
        Ok(())
    }

    pub async fn complete_run(
        &self,
        correlation_id: &str,
        response: &str,
        usage: Usage,
    ) -> Result<(), StoreError> {
        self.finish_run(
            correlation_id,
            RunStatus::Completed,
            Some(response),
            None,
            usage,
        )
        .await
    }

    pub async fn fail_run(
        &self,
        correlation_id: &str,
        error: &str,
        code: &str,
        usage: Usage,
    ) -> Result<(), StoreError> {
        self.finish_run(
            correlation_id,
            RunStatus::Failed,
            None,
            Some((error, code)),
            usage,
        )
        .await
    }

    async fn finish_run(
        &self,
        correlation_id: &str,
        status: RunStatus,
        response: Option<&str>,
        error: Option<(&str, &str)>,
        usage: Usage,
    ) -> Result<(), StoreError> {
        let usage =
            serde_json::to_string(&usage).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        // A run finishes once: a host that lost its session meanwhile
        // changes nothing.
        sqlx::query(
            "UPDATE runs SET status = $1, response = $2, error = $3, error_code = $4, usage = $5, updated_at = $6 \
             WHERE correlation_id = $7 AND status IN ('pending', 'running')",
        )
        .bind(status.as_str())
        .bind(response)
        .bind(error.map(|e| e.0))
        .bind(error.map(|e| e.1))
        .bind(usage)
        .bind(now_ms())
        .bind(correlation_id)
        .execute(self.pool())
        .await?;
        if let Some(hub) = self.shared() {
            notify(
                self.pool(),
                &hub.channel,
                &hub.run_finished_payload(correlation_id),
            )
            .await?;
        }
        Ok(())
    }

    /// The session's messages in order.
    pub async fn history(&self, session: &SessionKey) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = sqlx::query(
            "SELECT correlation_id, body FROM messages WHERE agent = $1 AND session_id = $2 ORDER BY seq",
        )
        .bind(&session.agent)
        .bind(&session.session_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let body: String = r.try_get("body")?;
                let message: ChatMessage = serde_json::from_str(&body)
                    .map_err(|e| StoreError::Corrupt(format!("message body: {e}")))?;
                Ok(StoredMessage {
                    correlation_id: r.try_get("correlation_id")?,
                    message,
                })
            })
            .collect()
    }

    /// Appends one message to a session's history. Only the session's single
    /// running run appends, so `MAX(seq) + 1` cannot race.
    pub async fn append_message(
        &self,
        session: &SessionKey,
        correlation_id: &str,
        message: &ChatMessage,
    ) -> Result<(), StoreError> {
        let body =
            serde_json::to_string(message).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let now = now_ms();
        let mut tx = self.pool().begin().await?;
        sqlx::query(
            "INSERT INTO messages (agent, session_id, seq, correlation_id, body, created_at) \
             SELECT $1, $2, COALESCE(MAX(seq), 0) + 1, $3, $4, $5 FROM messages WHERE agent = $1 AND session_id = $2",
        )
        .bind(&session.agent)
        .bind(&session.session_id)
        .bind(correlation_id)
        .bind(body)
        .bind(now)
        .execute(&mut *tx)
        .await?;
        sqlx::query("UPDATE sessions SET last_active_at = $1 WHERE agent = $2 AND id = $3")
            .bind(now)
            .bind(&session.agent)
            .bind(&session.session_id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Deletes sessions idle since before `cutoff_ms` that have no unfinished
    /// run; returns how many.
    pub async fn expire_sessions(&self, cutoff_ms: i64) -> Result<u64, StoreError> {
        let rows = sqlx::query(
            "SELECT agent, id FROM sessions s WHERE last_active_at < $1 AND NOT EXISTS \
             (SELECT 1 FROM runs r WHERE r.agent = s.agent AND r.session_id = s.id AND r.status IN ('pending', 'running'))",
        )
        .bind(cutoff_ms)
        .fetch_all(self.pool())
        .await?;
        // Each is deleted only if still idle and without work: a run may
        // have arrived since the read.
        let mut tx = self.pool().begin().await?;
        let mut expired = 0;
        for row in &rows {
            let key = SessionKey {
                agent: row.try_get("agent")?,
                session_id: row.try_get("id")?,
            };
            let deleted = sqlx::query(
                "DELETE FROM sessions WHERE agent = $1 AND id = $2 AND last_active_at < $3 AND NOT EXISTS \
                 (SELECT 1 FROM runs r WHERE r.agent = $1 AND r.session_id = $2 AND r.status IN ('pending', 'running'))",
            )
            .bind(&key.agent)
            .bind(&key.session_id)
            .bind(cutoff_ms)
            .execute(&mut *tx)
            .await?;
            if deleted.rows_affected() > 0 {
                delete_messages(&mut tx, &key).await?;
                expired += 1;
            }
        }
        tx.commit().await?;
        Ok(expired)
    }
}

/// A session's messages (its row is deleted by the caller).
async fn delete_messages(tx: &mut AnyConnection, key: &SessionKey) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM messages WHERE agent = $1 AND session_id = $2")
        .bind(&key.agent)
        .bind(&key.session_id)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

fn run_from_row(row: &AnyRow) -> Result<RunRecord, StoreError> {
    let status: String = row.try_get("status")?;
    let format: Option<String> = row.try_get("response_format")?;
    let usage: Option<String> = row.try_get("usage")?;
    let corrupt =
        |what: &str, e: serde_json::Error| StoreError::Corrupt(format!("run {what}: {e}"));
    Ok(RunRecord {
        correlation_id: row.try_get("correlation_id")?,
        agent: row.try_get("agent")?,
        thread_id: row.try_get("session_id")?,
        message: row.try_get("message")?,
        status: RunStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("run status '{status}'")))?,
        response_format: format
            .map(|f| serde_json::from_str(&f))
            .transpose()
            .map_err(|e| corrupt("format", e))?,
        response: row.try_get("response")?,
        error: row.try_get("error")?,
        error_code: row.try_get("error_code")?,
        usage: usage
            .map(|u| serde_json::from_str(&u))
            .transpose()
            .map_err(|e| corrupt("usage", e))?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}
