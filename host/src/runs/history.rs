//! Hot sessions' histories, kept after each run so that the next run of
//! the session reads nothing: the store is written by this process alone
//! (SQLite; on a shared hub another host may have run the session, so
//! nothing is kept there), and a session's runs execute one at a time, so
//! the history a run ended with is the one the next run starts from. Any
//! doubt (a failed run, an expired session) drops the entry: a miss costs
//! one read, never a wrong answer.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::store::{SessionKey, StoredMessage};

struct Kept {
    messages: Vec<StoredMessage>,
    bytes: usize,
    /// When the session was last active, to honour its expiry.
    at: Instant,
}

pub(super) struct Histories {
    /// Bytes of messages kept at most; 0 keeps nothing.
    budget: usize,
    ttl: Option<Duration>,
    inner: Mutex<Inner>,
}

struct Inner {
    kept: LruCache<SessionKey, Kept>,
    bytes: usize,
}

fn size(messages: &[StoredMessage]) -> usize {
    messages
        .iter()
        .map(|m| {
            96 + m.correlation_id.len()
                + m.message.content.as_deref().map_or(0, str::len)
                + m.message
                    .tool_calls
                    .iter()
                    .map(|c| c.function.arguments.len() + c.function.name.len() + c.id.len())
                    .sum::<usize>()
        })
        .sum()
}

impl Histories {
    pub fn new(budget: usize, ttl: Option<Duration>) -> Self {
        Self {
            budget,
            ttl,
            inner: Mutex::new(Inner {
                kept: LruCache::unbounded(),
                bytes: 0,
            }),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the session's history if it is kept (and not expired); the
    /// entry is gone until [`Self::keep`] puts the run's result back.
    pub fn take(&self, session: &SessionKey) -> Option<Vec<StoredMessage>> {
        let mut inner = self.inner();
        let kept = inner.kept.pop(session)?;
        inner.bytes = inner.bytes.saturating_sub(kept.bytes);
        let expired = self.ttl.is_some_and(|ttl| kept.at.elapsed() >= ttl);
        (!expired).then_some(kept.messages)
    }

    /// Keeps the history a run of the session ended with (as stored).
    pub fn keep(&self, session: SessionKey, messages: Vec<StoredMessage>) {
        let bytes = size(&messages);
        if bytes > self.budget / 4 {
            return;
        }
        let mut inner = self.inner();
        if let Some(old) = inner.kept.put(
            session,
            Kept {
                messages,
                bytes,
                at: Instant::now(),
            },
        ) {
            inner.bytes = inner.bytes.saturating_sub(old.bytes);
        }
        inner.bytes += bytes;
        while inner.bytes > self.budget {
            match inner.kept.pop_lru() {
                Some((_, evicted)) => inner.bytes = inner.bytes.saturating_sub(evicted.bytes),
                None => break,
            }
        }
    }
}

impl Histories {
    /// Forgets a session whose stored history changed outside its runs
    /// (deleted through the API).
    pub fn forget(&self, session: &SessionKey) {
        let mut inner = self.inner();
        if let Some(old) = inner.kept.pop(session) {
            inner.bytes = inner.bytes.saturating_sub(old.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::chat::ChatMessage;

    fn key(id: &str) -> SessionKey {
        SessionKey {
            agent: "a".into(),
            session_id: id.into(),
        }
    }

    fn messages(n: usize) -> Vec<StoredMessage> {
        (0..n)
            .map(|i| StoredMessage {
                correlation_id: format!("c{i}"),
                message: ChatMessage::user("x".repeat(100)),
            })
            .collect()
    }

    #[test]
    fn a_kept_history_is_taken_once_and_the_oldest_go_past_the_budget() {
        let one = size(&messages(1));
        let histories = Histories::new(one * 16, None);
        histories.keep(key("a"), messages(1));
        assert_eq!(histories.take(&key("a")).map(|m| m.len()), Some(1));
        assert!(histories.take(&key("a")).is_none(), "taken, not copied");
        for id in ["a", "b", "c", "d", "e"] {
            histories.keep(key(id), messages(3));
        }
        assert!(histories.take(&key("a")).is_some(), "15 of 16 fit");
        histories.keep(key("a"), messages(3));
        histories.keep(key("f"), messages(3));
        assert!(histories.take(&key("b")).is_none(), "the oldest went");
        assert!(histories.take(&key("f")).is_some());
        histories.keep(key("big"), messages(5));
        assert!(
            histories.take(&key("big")).is_none(),
            "over a quarter of the budget is not kept"
        );
    }

    #[test]
    fn an_expired_session_is_not_served() {
        let histories = Histories::new(1 << 20, Some(Duration::ZERO));
        histories.keep(key("a"), messages(1));
        assert!(histories.take(&key("a")).is_none(), "expired");
    }
}
