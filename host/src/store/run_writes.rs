//! What each write of the agent run path means. A run costs two commits,
//! each shared with whatever else the writer takes at the moment: its start
//! (the session touched, the run stored) and its end (its messages and its
//! outcome); one where its start is held back ([`super::held_runs`]). Messages are stored in session order: a run's user message is
//! stored when the run executes (runs of a session execute one at a time),
//! never at enqueue, where another run of the session may still be adding
//! its own. Tool rounds store their messages as they happen, so a crash
//! never runs a tool call twice.

use super::error::StoreError;
use super::records::{NewRun, NewStreamRow};
use super::run_tx::{Claimed, FencedEnd, RunEndRow, RunRow, RunTx};
use crate::core::fence::{self, SessionFence};

/// A write of the run path.
#[derive(Debug, Clone)]
pub enum RunWrite {
    Start {
        run: NewRun,
        /// Sessions idle since before this are forgotten first.
        expire_before: Option<i64>,
    },
    Messages {
        agent: String,
        session_id: String,
        correlation_id: String,
        bodies: Vec<String>,
        fence: Option<SessionFence>,
    },
    End {
        agent: String,
        session_id: String,
        correlation_id: String,
        fence: Option<SessionFence>,
        /// Messages not stored yet (the user message and the answer of a
        /// run without tool calls), stored with the end.
        bodies: Vec<String>,
        end: RunEndRow,
    },
    /// Response stream entries.
    Stream {
        rows: Vec<NewStreamRow>,
        expires_at: i64,
    },
}

/// What a run-path write did.
#[derive(Debug)]
pub enum RunWritten {
    Started {
        /// The session's history was dropped (it had expired).
        expired: bool,
        /// The session did not exist before: it has no history.
        new_session: bool,
        /// This host executes the run (on a shared hub, it owns the session).
        run_here: bool,
        /// On a shared hub, the epoch this host holds the session at.
        epoch: Option<i64>,
        /// No other run of the session is waiting or running: this one is
        /// the next to execute.
        next_in_line: bool,
    },
    Stored,
    /// `changed` is false when the run had already ended.
    Ended {
        correlation_id: String,
        changed: bool,
    },
    Streamed(Vec<i64>),
    /// Refused: the session changed hands since its writer began the run.
    Fenced,
    /// A start refused: the session is another caller's
    /// ([`super::run_tx::continues`]). Nothing of the run was written.
    SessionOfAnother,
}

pub(super) async fn write_run(
    tx: &mut impl RunTx,
    write: RunWrite,
    now: i64,
) -> Result<RunWritten, StoreError> {
    match write {
        RunWrite::Start { run, expire_before } => {
            let (agent, id) = (&run.session.agent, &run.session.session_id);
            let expired = match expire_before {
                Some(cutoff) => tx.expire_idle_session(agent, id, cutoff).await?,
                None => false,
            };
            let format = run.response_format.as_ref().map(|f| f.to_string());
            let row = RunRow {
                correlation_id: &run.correlation_id,
                agent,
                session_id: id,
                message: &run.message,
                response_format: format.as_deref(),
                traceparent: run.traceparent.as_deref(),
                caller: run.caller.as_deref(),
            };
            let Some(opened) = tx.open_run(&row, now).await? else {
                return Ok(RunWritten::SessionOfAnother);
            };
            let (run_here, epoch) = match opened.claimed {
                Claimed::Here(epoch) => (true, epoch),
                Claimed::Elsewhere => (false, None),
            };
            let (new_session, next_in_line) = (opened.new_session, opened.next_in_line);
            Ok(RunWritten::Started {
                expired,
                new_session,
                run_here,
                epoch,
                next_in_line,
            })
        }
        RunWrite::Messages {
            agent,
            session_id,
            correlation_id,
            bodies,
            fence,
        } => {
            if !admitted(tx, &agent, &session_id, fence.as_ref()).await? {
                return Ok(RunWritten::Fenced);
            }
            tx.append_messages(&agent, &session_id, &correlation_id, &bodies, now)
                .await?;
            Ok(RunWritten::Stored)
        }
        RunWrite::End {
            agent,
            session_id,
            correlation_id,
            fence,
            bodies,
            end,
        } => {
            // A run another host ended meanwhile keeps that host's messages.
            let changed = match &fence {
                None => {
                    let changed = tx.end_run(&correlation_id, &end, now).await?;
                    if changed && !bodies.is_empty() {
                        tx.append_messages(&agent, &session_id, &correlation_id, &bodies, now)
                            .await?;
                    }
                    changed
                }
                Some(fence) => {
                    let session = (agent.as_str(), session_id.as_str());
                    match tx
                        .end_run_fenced(session, &correlation_id, &end, now, fence, &bodies)
                        .await?
                    {
                        FencedEnd::Fenced => return Ok(RunWritten::Fenced),
                        FencedEnd::Ended => true,
                        FencedEnd::AlreadyEnded => false,
                    }
                }
            };
            Ok(RunWritten::Ended {
                correlation_id,
                changed,
            })
        }
        RunWrite::Stream { rows, expires_at } => Ok(RunWritten::Streamed(
            tx.insert_stream_rows(&rows, now, expires_at).await?,
        )),
    }
}

/// Whether a fenced write still belongs to its writer ([`fence::admits`]),
/// read in the writing transaction; unfenced writes are not read for.
async fn admitted(
    tx: &mut impl RunTx,
    agent: &str,
    session_id: &str,
    fence: Option<&SessionFence>,
) -> Result<bool, StoreError> {
    if fence.is_none() {
        return Ok(true);
    }
    let holder = tx.session_holder(agent, session_id).await?;
    Ok(fence::admits(holder.as_ref(), fence))
}
