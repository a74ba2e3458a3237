//! Tool calls waiting for a human's decision. Plain SQL both databases run
//! as written: these writes are rare (a request, a decision, a timeout), so
//! they take the pool rather than the run path's writer.

use serde::Serialize;
use sqlx::Row;

use super::clock::now_ms;
use super::error::StoreError;
use super::open::Store;
use super::records::SessionKey;
use super::sessions::holder_of;
use crate::core::fence::{self, SessionFence};

/// A tool call that needs a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingCall {
    pub call_id: String,
    pub tool: String,
    /// The arguments as the model wrote them (JSON text), shown to a person
    /// as the JSON object they are; text that is not JSON stays text.
    #[serde(serialize_with = "as_json")]
    pub arguments: String,
}

fn as_json<S: serde::Serializer>(text: &str, serializer: S) -> Result<S::Ok, S::Error> {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => value.serialize(serializer),
        Err(_) => serializer.serialize_str(text),
    }
}

/// A decision on a tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub approved: bool,
    pub reason: Option<String>,
}

/// What recording a decision found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    /// Recorded; the run's session is to be woken.
    Recorded(SessionKey),
    /// Decided before (the same way or not): nothing changed.
    Already { approved: bool },
    /// No such call waits in this run.
    Unknown,
}

impl Store {
    /// Asks for decisions on `calls` of a run (calls asked before keep their
    /// first request and deadline). On a shared hub the request carries the
    /// run's session fence, checked in the writing transaction with the
    /// session's row locked ([`fence::admits`]): a host that lost the
    /// session asks no human anything.
    pub async fn request_approvals(
        &self,
        session: &SessionKey,
        correlation_id: &str,
        calls: &[PendingCall],
        deadline: i64,
        held: Option<&SessionFence>,
    ) -> Result<(), StoreError> {
        // Written beside the writer: a start it holds goes first.
        self.release_run(correlation_id).await?;
        let now = now_ms();
        let mut tx = self.pool().begin().await?;
        if let Some(held) = held {
            let row = sqlx::query(
                "SELECT owner, epoch FROM sessions WHERE agent = $1 AND id = $2 FOR UPDATE",
            )
            .bind(&session.agent)
            .bind(&session.session_id)
            .fetch_optional(&mut *tx)
            .await?;
            if !fence::admits(holder_of(row)?.as_ref(), Some(held)) {
                return Err(StoreError::Fenced {
                    session: session.session_id.clone(),
                });
            }
        }
        for call in calls {
            sqlx::query(
                "INSERT INTO approvals (correlation_id, call_id, tool, arguments, requested_at, deadline) \
                 VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (correlation_id, call_id) DO NOTHING",
            )
            .bind(correlation_id)
            .bind(super::sessions::storable(&call.call_id))
            .bind(super::sessions::storable(&call.tool))
            .bind(super::sessions::storable(&call.arguments))
            .bind(now)
            .bind(deadline)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Decisions made on a run's calls, by call id.
    pub async fn decisions(
        &self,
        correlation_id: &str,
    ) -> Result<Vec<(String, Decision)>, StoreError> {
        let rows = sqlx::query(
            "SELECT call_id, decision, reason FROM approvals \
             WHERE correlation_id = $1 AND decision IS NOT NULL",
        )
        .bind(correlation_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                let decision: String = r.try_get("decision")?;
                Ok((
                    r.try_get("call_id")?,
                    Decision {
                        approved: decision == "approved",
                        reason: r.try_get("reason")?,
                    },
                ))
            })
            .collect()
    }

    /// How many calls wait for a decision, all runs together (for
    /// `/metrics`: read when scraped, so it holds across restarts and hosts).
    pub async fn count_pending_approvals(&self) -> Result<i64, StoreError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM approvals WHERE decision IS NULL")
                .fetch_one(self.pool())
                .await?,
        )
    }

    /// A run's calls still waiting for a decision.
    pub async fn pending_approvals(
        &self,
        correlation_id: &str,
    ) -> Result<Vec<PendingCall>, StoreError> {
        let rows = sqlx::query(
            "SELECT call_id, tool, arguments FROM approvals \
             WHERE correlation_id = $1 AND decision IS NULL ORDER BY requested_at, call_id",
        )
        .bind(correlation_id)
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok(PendingCall {
                    call_id: r.try_get("call_id")?,
                    tool: r.try_get("tool")?,
                    arguments: r.try_get("arguments")?,
                })
            })
            .collect()
    }

    /// Records a human's decision on a waiting call.
    pub async fn decide(
        &self,
        correlation_id: &str,
        call_id: &str,
        decision: &Decision,
    ) -> Result<Decided, StoreError> {
        let mut tx = self.pool().begin().await?;
        let changed = sqlx::query(
            "UPDATE approvals SET decision = $1, reason = $2, decided_at = $3 \
             WHERE correlation_id = $4 AND call_id = $5 AND decision IS NULL",
        )
        .bind(if decision.approved {
            "approved"
        } else {
            "denied"
        })
        .bind(decision.reason.as_deref().map(super::sessions::storable))
        .bind(now_ms())
        .bind(correlation_id)
        .bind(call_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let outcome = if changed > 0 {
            let row = sqlx::query("SELECT agent, session_id FROM runs WHERE correlation_id = $1")
                .bind(correlation_id)
                .fetch_one(&mut *tx)
                .await?;
            Decided::Recorded(SessionKey {
                agent: row.try_get("agent")?,
                session_id: row.try_get("session_id")?,
            })
        } else {
            let earlier: Option<Option<String>> = sqlx::query_scalar(
                "SELECT decision FROM approvals WHERE correlation_id = $1 AND call_id = $2",
            )
            .bind(correlation_id)
            .bind(call_id)
            .fetch_optional(&mut *tx)
            .await?;
            match earlier.flatten() {
                Some(d) => Decided::Already {
                    approved: d == "approved",
                },
                None => Decided::Unknown,
            }
        };
        tx.commit().await?;
        Ok(outcome)
    }

    /// Denies every call whose deadline passed; returns the sessions whose
    /// runs can now go on.
    ///
    /// Runs every second: when nothing is due (nearly always) it only reads.
    /// When something is, the write comes first in its transaction, so on
    /// SQLite it waits for the write lock (busy timeout) instead of failing
    /// as a read transaction does that the writer thread overtook
    /// (`SQLITE_BUSY_SNAPSHOT`).
    pub async fn expire_approvals(&self, now: i64) -> Result<Vec<SessionKey>, StoreError> {
        let due: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM approvals WHERE decision IS NULL AND deadline <= $1 LIMIT 1",
        )
        .bind(now)
        .fetch_optional(self.pool())
        .await?;
        if due.is_none() {
            return Ok(Vec::new());
        }
        let mut tx = self.pool().begin().await?;
        let denied: Vec<String> = sqlx::query_scalar(
            "UPDATE approvals SET decision = 'denied', reason = 'no decision before the approval deadline', \
             decided_at = $1 WHERE decision IS NULL AND deadline <= $1 RETURNING correlation_id",
        )
        .bind(now)
        .fetch_all(&mut *tx)
        .await?;
        let mut sessions = std::collections::BTreeSet::new();
        let mut runs: Vec<String> = denied;
        runs.sort();
        runs.dedup();
        for run in &runs {
            let row = sqlx::query("SELECT agent, session_id FROM runs WHERE correlation_id = $1")
                .bind(run)
                .fetch_optional(&mut *tx)
                .await?;
            if let Some(row) = row {
                sessions.insert(SessionKey {
                    agent: row.try_get("agent")?,
                    session_id: row.try_get("session_id")?,
                });
            }
        }
        tx.commit().await?;
        Ok(sessions.into_iter().collect())
    }
}
