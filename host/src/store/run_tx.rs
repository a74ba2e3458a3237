//! The statements of the agent run path, inside the committer's
//! transaction: sessions, runs, their messages, response stream entries.
//! A second trait beside [`super::tx::Tx`] (the durable engine's), on the
//! same two connections, so that every write of a store goes through its
//! one writer and shares its transactions (group commit): on SQLite there
//! is one writer anyway, and a write waiting for the lock costs more than
//! one waiting in the queue.

use std::future::Future;

use super::error::StoreError;
use super::records::NewStreamRow;
use crate::core::fence::{SessionFence, SessionHolder};

/// A run as it is inserted.
pub(super) struct RunRow<'a> {
    pub correlation_id: &'a str,
    pub agent: &'a str,
    pub session_id: &'a str,
    pub message: &'a str,
    pub response_format: Option<&'a str>,
    pub traceparent: Option<&'a str>,
    pub caller: Option<&'a str>,
}

/// How a run ended, as it is written.
#[derive(Debug, Clone)]
pub(super) struct RunEndRow {
    pub status: &'static str,
    pub response: Option<String>,
    pub error: Option<String>,
    pub error_code: Option<String>,
    pub usage: String,
}

pub(super) trait RunTx {
    /// Deletes the session and its messages if it was idle since before
    /// `cutoff`; true when it did.
    fn expire_idle_session(
        &mut self,
        agent: &str,
        id: &str,
        cutoff: i64,
    ) -> impl Future<Output = Result<bool, StoreError>>;
    /// Creates the session, claimed for `caller`, or marks it active if
    /// `caller` may continue it ([`continues`]); one it may not is left as
    /// it was.
    fn touch_session(
        &mut self,
        agent: &str,
        id: &str,
        caller: Option<&str>,
        now: i64,
    ) -> impl Future<Output = Result<Touched, StoreError>>;
    /// Takes the session for this host if no live host has it: whether this
    /// host executes its runs (always on SQLite), and on a shared hub the
    /// epoch it holds the session at.
    fn claim_session(
        &mut self,
        agent: &str,
        id: &str,
    ) -> impl Future<Output = Result<Claimed, StoreError>>;
    /// The session's owner and epoch, locked until the transaction ends.
    fn session_holder(
        &mut self,
        agent: &str,
        id: &str,
    ) -> impl Future<Output = Result<Option<SessionHolder>, StoreError>>;
    /// Whether the session has a run not ended yet.
    fn has_unfinished_run(
        &mut self,
        agent: &str,
        id: &str,
    ) -> impl Future<Output = Result<bool, StoreError>>;
    fn insert_run(
        &mut self,
        run: &RunRow<'_>,
        now: i64,
    ) -> impl Future<Output = Result<(), StoreError>>;
    /// Appends messages (JSON bodies) after the session's last one.
    fn append_messages(
        &mut self,
        agent: &str,
        id: &str,
        correlation_id: &str,
        bodies: &[String],
        now: i64,
    ) -> impl Future<Output = Result<(), StoreError>>;
    /// Ends a run still pending or running; false when it had ended.
    fn end_run(
        &mut self,
        correlation_id: &str,
        end: &RunEndRow,
        now: i64,
    ) -> impl Future<Output = Result<bool, StoreError>>;
    /// Ends a run still pending or running, if `fence` still holds its
    /// session ([`crate::core::fence::admits`]), the session's row locked
    /// until the transaction ends, and, when this ends it, stores `bodies`
    /// after the session's last message: in one statement where the
    /// database allows it, so neither the fence nor the messages cost a
    /// round trip of their own.
    fn end_run_fenced(
        &mut self,
        session: (&str, &str),
        correlation_id: &str,
        end: &RunEndRow,
        now: i64,
        fence: &SessionFence,
        bodies: &[String],
    ) -> impl Future<Output = Result<FencedEnd, StoreError>>;
    /// Queues a run: the session created (claimed for the run's caller) or
    /// marked active and claimed, whether it waits behind another run read,
    /// and the run stored. `None`, with nothing written, when the session
    /// is another caller's ([`continues`]). Steps of their own by default;
    /// one statement where the database allows it.
    fn open_run(
        &mut self,
        run: &RunRow<'_>,
        now: i64,
    ) -> impl Future<Output = Result<Option<Opened>, StoreError>> {
        async move {
            let (agent, id) = (run.agent, run.session_id);
            let new_session = match self.touch_session(agent, id, run.caller, now).await? {
                Touched::New => true,
                Touched::Continued => false,
                Touched::Refused => return Ok(None),
            };
            let claimed = self.claim_session(agent, id).await?;
            let next_in_line = !self.has_unfinished_run(agent, id).await?;
            self.insert_run(run, now).await?;
            Ok(Some(Opened {
                new_session,
                claimed,
                next_in_line,
            }))
        }
    }
    /// Response stream entries; their ids.
    fn insert_stream_rows(
        &mut self,
        rows: &[NewStreamRow],
        now: i64,
        expires_at: i64,
    ) -> impl Future<Output = Result<Vec<i64>, StoreError>>;
}

/// Whether a run of `caller` may go on with a session that `owner`'s first
/// message claimed: the one rule of who continues a conversation, applied
/// by the store in the transaction that stores the run (never by a read
/// before it, which two callers racing for one new session both pass).
/// `None` as the run's caller (no keys, an admin key, an orchestration, an
/// Agent Framework session) continues any session; an invoke key only one
/// it claimed, not one a caller without a key started, whose runs it could
/// not see either (`http::caller`). PostgreSQL's statements say the same in
/// SQL: `$caller IS NULL OR s.caller = $caller`.
pub(crate) fn continues(owner: Option<&str>, caller: Option<&str>) -> bool {
    caller.is_none() || owner == caller
}

/// What touching a session for a run found ([`RunTx::touch_session`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Touched {
    /// There was no such session: it is the run's caller's now.
    New,
    /// The run's caller may continue it: marked active.
    Continued,
    /// Another caller's: left as it was.
    Refused,
}

/// Who executes a session's runs, as an enqueue found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claimed {
    /// Another live host owns the session (or this one runs no work).
    Elsewhere,
    /// This host: with the session's epoch on a shared hub.
    Here(Option<i64>),
}

/// What queueing a run found ([`RunTx::open_run`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Opened {
    /// The session did not exist before.
    pub new_session: bool,
    pub claimed: Claimed,
    /// No other run of the session was waiting or running.
    pub next_in_line: bool,
}

/// What a fenced end of a run found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FencedEnd {
    /// Ended by this write.
    Ended,
    /// The fence held, but the run had ended already.
    AlreadyEnded,
    /// The session changed hands since the fence was read: nothing written.
    Fenced,
}

#[cfg(test)]
mod tests {
    use super::continues;

    #[test]
    fn a_session_is_continued_by_its_first_caller_and_by_callers_without_a_key() {
        assert!(continues(Some("key:a"), Some("key:a")));
        assert!(!continues(Some("key:a"), Some("key:b")));
        assert!(
            !continues(None, Some("key:a")),
            "an admin's or an orchestration's session"
        );
        assert!(continues(Some("key:a"), None) && continues(None, None));
    }
}
