//! Agent runs, sessions and their messages. Plain SQL that both databases
//! run as written (through sqlx's `Any` driver, placeholders `$1`…).

use std::time::Duration;

use sqlx::any::AnyRow;
use sqlx::AnyConnection;
use sqlx::Row;

use super::clock::now_ms;
use super::durable_records::to_json;
use super::durable_records::{Write, Written};
use super::error::StoreError;
use super::open::Store;
use super::records::{NewRun, RunRecord, RunStatus, SessionKey, StoredMessage};
use super::run_tx::RunEndRow;
use super::run_writes::{RunWrite, RunWritten};
use crate::core::chat::{ChatMessage, Usage};
use crate::core::fence::{self, SessionFence, SessionHolder};

impl Store {
    /// Stores a new run (pending) and touches its session, in one write
    /// shared with whatever else the writer commits.
    /// When the session has been idle longer than `ttl`, its history is
    /// dropped first, in the same transaction, so an expired thread never
    /// leaks into a new answer. On a shared hub, a host that works claims
    /// the session unless a live host has it; the others are told of a run
    /// it does not take.
    /// The session is its first caller's ([`super::run_tx::continues`]),
    /// decided in the same transaction: a run of another caller is refused
    /// with [`StoreError::SessionOfAnother`], nothing of it stored, and the
    /// other writes of its batch go on.
    pub async fn enqueue_run(
        &self,
        run: &NewRun,
        ttl: Option<Duration>,
    ) -> Result<Enqueued, StoreError> {
        let now = now_ms();
        let expire_before = ttl.map(|ttl| now - i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX));
        let (start, record) = Self::start_of(run, expire_before, now);
        let written = self.committer().commit(start).await?;
        if let Written::Run(RunWritten::SessionOfAnother) = written {
            return Err(StoreError::SessionOfAnother {
                agent: run.session.agent.clone(),
                session: run.session.session_id.clone(),
            });
        }
        let Written::Run(RunWritten::Started {
            expired,
            new_session,
            run_here,
            epoch,
            next_in_line,
        }) = written
        else {
            return Err(unexpected(written));
        };
        // Read in the enqueue's transaction, which began after `now`.
        let fence = epoch.zip(self.owner_id()).map(|(epoch, me)| SessionFence {
            owner: me.to_string(),
            epoch,
            taken_at: now,
        });
        Ok(Enqueued {
            record,
            run_here,
            fence,
            new_session: new_session || expired,
            next_in_line,
        })
    }

    /// Stores messages of a run as they exist (a tool round).
    /// `fence` is what this host held when it began the run (see
    /// [`Store::session_fence`]): a session taken over since refuses it.
    pub async fn append_messages(
        &self,
        session: &SessionKey,
        correlation_id: &str,
        messages: &[ChatMessage],
        fence: Option<&SessionFence>,
    ) -> Result<(), StoreError> {
        let bodies = messages.iter().map(to_json).collect::<Result<_, _>>()?;
        let written = self
            .commit_run(
                correlation_id,
                Write::Run(RunWrite::Messages {
                    agent: session.agent.clone(),
                    session_id: session.session_id.clone(),
                    correlation_id: correlation_id.to_string(),
                    bodies,
                    fence: fence.cloned(),
                }),
            )
            .await?;
        match written {
            Written::Run(RunWritten::Stored) => Ok(()),
            Written::Run(RunWritten::Fenced) => Err(StoreError::Fenced {
                session: session.session_id.clone(),
            }),
            other => Err(unexpected(other)),
        }
    }

    /// Ends a run: its last messages (the answer) and its outcome, in one
    /// write. False when the run had already ended (another host did it),
    /// or when the session changed hands since `fence` (its new owner ends it).
    pub async fn end_run(
        &self,
        session: &SessionKey,
        correlation_id: &str,
        unsaved: &[ChatMessage],
        outcome: RunOutcome<'_>,
        fence: Option<&SessionFence>,
    ) -> Result<bool, StoreError> {
        let bodies = unsaved.iter().map(to_json).collect::<Result<_, _>>()?;
        let end = match outcome {
            RunOutcome::Completed { response, usage } => RunEndRow {
                status: RunStatus::Completed.as_str(),
                response: Some(storable(response)),
                error: None,
                error_code: None,
                usage: to_json(&usage)?,
            },
            RunOutcome::Failed { error, code, usage } => RunEndRow {
                status: RunStatus::Failed.as_str(),
                response: None,
                error: Some(storable(error)),
                error_code: Some(code.to_string()),
                usage: to_json(&usage)?,
            },
        };
        let written = self
            .commit_run(
                correlation_id,
                Write::Run(RunWrite::End {
                    agent: session.agent.clone(),
                    session_id: session.session_id.clone(),
                    correlation_id: correlation_id.to_string(),
                    fence: fence.cloned(),
                    bodies,
                    end,
                }),
            )
            .await?;
        match written {
            Written::Run(RunWritten::Ended { changed, .. }) => Ok(changed),
            Written::Run(RunWritten::Fenced) => {
                tracing::warn!(agent = %session.agent, session = %session.session_id, correlation_id, "this host lost the session while it ran; the run's outcome here is dropped (its new owner ends it)");
                Ok(false)
            }
            other => Err(unexpected(other)),
        }
    }

    /// Whether `held` still holds by this host's unbroken lease alone, so
    /// that it need not be read again ([`crate::core::fence::unbroken`]).
    pub fn holds_by_lease(&self, held: &SessionFence) -> bool {
        self.shared().is_some_and(|hub| hub.holds_by_lease(held))
    }

    /// What this host holds of a session it is about to execute a run of:
    /// `None` on a store one process serves (nothing to fence); on a shared
    /// hub its owner id and the session's epoch, or [`StoreError::Fenced`]
    /// when another host owns it now.
    pub async fn session_fence(
        &self,
        session: &SessionKey,
    ) -> Result<Option<SessionFence>, StoreError> {
        let Some(me) = self.owner_id() else {
            return Ok(None);
        };
        let taken_at = now_ms();
        // Born this host's when its held start commits.
        if self.holds_held(session) {
            return Ok(Some(SessionFence {
                owner: me.to_string(),
                epoch: fence::BORN_AT,
                taken_at,
            }));
        }
        let epoch: Option<i64> = sqlx::query_scalar(
            "SELECT epoch FROM sessions WHERE agent = $1 AND id = $2 AND owner = $3",
        )
        .bind(&session.agent)
        .bind(&session.session_id)
        .bind(me)
        .fetch_optional(self.pool())
        .await?;
        match epoch {
            Some(epoch) => Ok(Some(SessionFence {
                owner: me.to_string(),
                epoch,
                taken_at,
            })),
            None => Err(StoreError::Fenced {
                session: session.session_id.clone(),
            }),
        }
    }

    /// Whether `held` (what this host held when it began a run) still holds
    /// the session, by the rule the writes are fenced with
    /// ([`fence::admits`]): asked before an action whose effect is outside
    /// the store (a model turn), which no transaction can refuse afterwards.
    pub async fn still_holds(
        &self,
        session: &SessionKey,
        held: &SessionFence,
    ) -> Result<bool, StoreError> {
        // A session whose run's start is held is this host's, and has no
        // row yet. Asked before the row is read: a start committed in
        // between is then read with it.
        if self.holds_held(session) {
            let mine = self.owner_id() == Some(held.owner.as_str());
            return Ok(mine && held.epoch == fence::BORN_AT);
        }
        let row = sqlx::query("SELECT owner, epoch FROM sessions WHERE agent = $1 AND id = $2")
            .bind(&session.agent)
            .bind(&session.session_id)
            .fetch_optional(self.pool())
            .await?;
        Ok(fence::admits(holder_of(row)?.as_ref(), Some(held)))
    }

    /// Until when (ms, [`now_ms`]'s clock) this host may send a model
    /// request for `session`, by the rule of [`fence::send_by`]; `None`
    /// when `held` no longer holds the session. The lease is read before
    /// the owner check: the check proves the session was this host's while
    /// that lease ran, and no longer. No deadline on a store that no other
    /// host shares.
    pub async fn send_by(
        &self,
        session: &SessionKey,
        held: &SessionFence,
    ) -> Result<Option<i64>, StoreError> {
        let lease = self.shared().map(|hub| hub.lease());
        // Held since the fence was read by an unbroken lease: no read.
        let unbroken = self.shared().is_some_and(|hub| hub.holds_by_lease(held));
        if !unbroken && !self.still_holds(session, held).await? {
            return Ok(None);
        }
        Ok(Some(lease.map_or(i64::MAX, |(renewed_at, lease_ms)| {
            fence::send_by(renewed_at, lease_ms)
        })))
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
            .map(|r| stored_message(r, &r.try_get::<String, _>("body")?))
            .collect()
    }

    /// The session's messages in order, and when this life of the session
    /// began (`None` when there is no such session), in one read: what a
    /// host that keeps histories on a hub needs to check them next time.
    pub async fn history_and_birth(
        &self,
        session: &SessionKey,
    ) -> Result<(Vec<StoredMessage>, Option<i64>), StoreError> {
        let rows = sqlx::query(
            "SELECT s.created_at, m.correlation_id, m.body FROM sessions s \
             LEFT JOIN messages m ON m.agent = s.agent AND m.session_id = s.id \
             WHERE s.agent = $1 AND s.id = $2 ORDER BY m.seq",
        )
        .bind(&session.agent)
        .bind(&session.session_id)
        .fetch_all(self.pool())
        .await?;
        let born = match rows.first() {
            Some(row) => Some(row.try_get("created_at")?),
            None => None,
        };
        let mut messages = Vec::with_capacity(rows.len());
        for row in &rows {
            let Some(body) = row.try_get::<Option<String>, _>("body")? else {
                continue;
            };
            messages.push(stored_message(row, &body)?);
        }
        Ok((messages, born))
    }

    /// Where the session's stored conversation stands, in one indexed read
    /// however long it is: a host that kept a history in memory checks it
    /// against this before trusting it on a hub other hosts write too.
    /// `None` when there is no such session.
    pub async fn session_stamp(
        &self,
        session: &SessionKey,
    ) -> Result<Option<SessionStamp>, StoreError> {
        let row = sqlx::query(
            "SELECT s.created_at, m.seq, m.correlation_id FROM sessions s \
             LEFT JOIN messages m ON m.agent = s.agent AND m.session_id = s.id \
             AND m.seq = (SELECT MAX(seq) FROM messages WHERE agent = $1 AND session_id = $2) \
             WHERE s.agent = $1 AND s.id = $2",
        )
        .bind(&session.agent)
        .bind(&session.session_id)
        .fetch_optional(self.pool())
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let seq: Option<i64> = row.try_get("seq")?;
        let correlation_id: Option<String> = row.try_get("correlation_id")?;
        Ok(Some(SessionStamp {
            created_at: row.try_get("created_at")?,
            last: seq.zip(correlation_id),
        }))
    }

    /// Tokens the session's runs used, summed.
    pub async fn session_usage(&self, session: &SessionKey) -> Result<Usage, StoreError> {
        let rows: Vec<Option<String>> = sqlx::query_scalar(
            "SELECT usage FROM runs WHERE agent = $1 AND session_id = $2 AND usage IS NOT NULL",
        )
        .bind(&session.agent)
        .bind(&session.session_id)
        .fetch_all(self.pool())
        .await?;
        let mut total = Usage::default();
        for text in rows.into_iter().flatten() {
            total += serde_json::from_str::<Usage>(&text)
                .map_err(|e| StoreError::Corrupt(format!("run usage: {e}")))?;
        }
        Ok(total)
    }

    /// How many messages the session holds.
    pub async fn message_count(&self, session: &SessionKey) -> Result<u64, StoreError> {
        let count: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM messages WHERE agent = $1 AND session_id = $2",
        )
        .bind(&session.agent)
        .bind(&session.session_id)
        .fetch_one(self.pool())
        .await?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// A page of the session's messages after `after` (a message number),
    /// oldest first; `None` when there is no such session.
    pub async fn messages_page(
        &self,
        session: &SessionKey,
        after: i64,
        limit: usize,
    ) -> Result<Option<Vec<(i64, StoredMessage)>>, StoreError> {
        let exists: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM sessions WHERE agent = $1 AND id = $2")
                .bind(&session.agent)
                .bind(&session.session_id)
                .fetch_optional(self.pool())
                .await?;
        if exists.is_none() {
            return Ok(None);
        }
        let rows = sqlx::query(
            "SELECT seq, correlation_id, body FROM messages WHERE agent = $1 AND session_id = $2 \
             AND seq > $3 ORDER BY seq LIMIT $4",
        )
        .bind(&session.agent)
        .bind(&session.session_id)
        .bind(after)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(self.pool())
        .await?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("seq")?,
                    stored_message(r, &r.try_get::<String, _>("body")?)?,
                ))
            })
            .collect::<Result<Vec<_>, StoreError>>()
            .map(Some)
    }

    /// Forgets a session and its messages, unless a run of it has not
    /// ended (a run under way would write to it).
    pub async fn delete_session(&self, session: &SessionKey) -> Result<Deletion, StoreError> {
        let mut tx = self.pool().begin().await?;
        if self.is_shared() {
            // PostgreSQL, read committed: a DELETE that waits on the row
            // lock of a run's enqueue re-checks the row once that commits,
            // but its `NOT EXISTS` keeps the snapshot taken before, which
            // does not see the new run. Locking first lets the DELETE take
            // its snapshot after the enqueue committed. (SQLite has one
            // writer at a time, and its DELETE reads what committed last.)
            sqlx::query("SELECT 1 FROM sessions WHERE agent = $1 AND id = $2 FOR UPDATE")
                .bind(&session.agent)
                .bind(&session.session_id)
                .fetch_optional(&mut *tx)
                .await?;
        }
        let deleted = sqlx::query(
            "DELETE FROM sessions WHERE agent = $1 AND id = $2 AND NOT EXISTS \
             (SELECT 1 FROM runs r WHERE r.agent = $1 AND r.session_id = $2 AND r.status IN ('pending', 'running', 'awaiting_approval'))",
        )
        .bind(&session.agent)
        .bind(&session.session_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let outcome = if deleted > 0 {
            delete_messages(&mut tx, session).await?;
            Deletion::Done
        } else {
            let exists: Option<i64> =
                sqlx::query_scalar("SELECT 1 FROM sessions WHERE agent = $1 AND id = $2")
                    .bind(&session.agent)
                    .bind(&session.session_id)
                    .fetch_optional(&mut *tx)
                    .await?;
            if exists.is_some() {
                Deletion::Busy
            } else {
                Deletion::Missing
            }
        };
        tx.commit().await?;
        Ok(outcome)
    }

    /// Deletes sessions idle since before `cutoff_ms` that have no
    /// unfinished run, of the agents `of_agent` picks; returns how many.
    /// `only`: the one agent it picks, whose sessions alone are read (an
    /// agent whose sessions expire within seconds is swept as often: a read
    /// of every agent's idle sessions each time cost milliseconds per
    /// thousand sessions).
    pub async fn expire_sessions(
        &self,
        cutoff_ms: i64,
        only: Option<&str>,
        of_agent: &(dyn Fn(&str) -> bool + Sync),
    ) -> Result<u64, StoreError> {
        let idle = "SELECT agent, id FROM sessions s WHERE last_active_at < $1 AND NOT EXISTS \
             (SELECT 1 FROM runs r WHERE r.agent = s.agent AND r.session_id = s.id AND r.status IN ('pending', 'running', 'awaiting_approval'))";
        let rows = match only {
            Some(agent) => {
                sqlx::query(&format!("{idle} AND s.agent = $2"))
                    .bind(cutoff_ms)
                    .bind(agent)
                    .fetch_all(self.pool())
                    .await?
            }
            None => {
                sqlx::query(idle)
                    .bind(cutoff_ms)
                    .fetch_all(self.pool())
                    .await?
            }
        };
        // Each is deleted only if still idle and without work: a run may
        // have arrived since the read.
        let mut tx = self.pool().begin().await?;
        let mut expired = 0;
        for row in &rows {
            let key = SessionKey {
                agent: row.try_get("agent")?,
                session_id: row.try_get("id")?,
            };
            if !of_agent(&key.agent) {
                continue;
            }
            let deleted = sqlx::query(
                "DELETE FROM sessions WHERE agent = $1 AND id = $2 AND last_active_at < $3 AND NOT EXISTS \
                 (SELECT 1 FROM runs r WHERE r.agent = $1 AND r.session_id = $2 AND r.status IN ('pending', 'running', 'awaiting_approval'))",
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

/// A message as a row holds it (its run's `correlation_id`, and `body`).
fn stored_message(row: &AnyRow, body: &str) -> Result<StoredMessage, StoreError> {
    let message: ChatMessage = serde_json::from_str(body)
        .map_err(|e| StoreError::Corrupt(format!("message body: {e}")))?;
    Ok(StoredMessage {
        correlation_id: row.try_get("correlation_id")?,
        message,
    })
}

/// Where a session's stored conversation stands ([`Store::session_stamp`]).
/// A kept history of as many messages as the last one's number, the last
/// written by the same run, is the stored one: messages are only appended,
/// numbered from 1 without gaps, a run's id is never used by another run,
/// and once another host takes the session the old host's writes are
/// refused. The session's `created_at` (each host's clock) tells a session
/// deleted or expired and begun again from its old life besides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionStamp {
    /// When this life of the session began (ms).
    pub created_at: i64,
    /// Its last message's number and the run that wrote it.
    pub last: Option<(i64, String)>,
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

/// A session row's owner and epoch (`SELECT owner, epoch …`), if the
/// session exists.
pub(super) fn holder_of(row: Option<AnyRow>) -> Result<Option<SessionHolder>, StoreError> {
    row.map(|r| {
        Ok(SessionHolder {
            owner: r.try_get("owner")?,
            epoch: r.try_get("epoch")?,
        })
    })
    .transpose()
}

/// What storing a new run found.
pub struct Enqueued {
    pub record: RunRecord,
    /// This host executes it.
    pub run_here: bool,
    /// On a shared hub, what this host holds of the session (read by the
    /// enqueue itself: the run's executor need not read it again).
    pub fence: Option<SessionFence>,
    /// The session has no history before this run (it is new, or it had
    /// expired).
    pub new_session: bool,
    /// No other run of the session waits or runs: this one executes next.
    pub next_in_line: bool,
}

/// How a run ended, as it is stored.
pub enum RunOutcome<'a> {
    Completed {
        response: &'a str,
        usage: Usage,
    },
    Failed {
        error: &'a str,
        code: &'a str,
        usage: Usage,
    },
}

fn unexpected(written: Written) -> StoreError {
    StoreError::Write(format!("the committer answered another write: {written:?}"))
}

/// What deleting a session found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deletion {
    Done,
    /// A run of the session has not ended.
    Busy,
    Missing,
}

/// Text as both databases keep it: PostgreSQL refuses a NUL character in
/// text, and refused it for the whole batch that carried it, so text that
/// comes from a model, a tool or a guest has each NUL replaced (U+FFFD).
/// Ids are never changed this way: the edge refuses them instead.
pub(super) fn storable(text: &str) -> String {
    text.replace('\0', "\u{FFFD}")
}
