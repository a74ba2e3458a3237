//! Hot sessions' histories, kept after each run so that the next run of
//! the session need not read it: a session's runs execute one at a time,
//! so the history a run ended with is the one the next run starts from.
//! Where this process alone writes the store (SQLite) that is the truth.
//! On a hub other hosts share, another host may have run the session, or
//! deleted it, meanwhile: there a kept history is used only once one
//! indexed read of the session ([`SessionStamp`]) shows the store holds
//! exactly it, which costs the same however long the conversation is,
//! where reading it grows with every turn. Any doubt (a failed run, an
//! expired session, a stamp that differs) drops the entry: a miss costs
//! one read, never a wrong answer.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::store::{SessionKey, SessionStamp, StoredMessage};

/// What a run starts from besides the store.
pub(super) enum Kept {
    /// The session began with this run: there is nothing to read. `born`
    /// is the run's `created_at`: the session's where one clock reading
    /// stamped both (a run read back from the store). A run this host
    /// enqueued was stamped before its commit stamped the session, so its
    /// session's next run finds them apart and reads the store once.
    Fresh { born: i64 },
    /// The history a run of the session ended with here, and the session's
    /// `created_at` where it is known.
    Ended {
        messages: Vec<StoredMessage>,
        born: Option<i64>,
    },
}

/// Whether `messages` are what the store holds of the session, as `stamp`
/// shows it: the same life of the session (`born`), as many messages,
/// the last one written by the same run.
pub(super) fn is_stored(
    messages: &[StoredMessage],
    born: Option<i64>,
    stamp: &SessionStamp,
) -> bool {
    born == Some(stamp.created_at)
        && match (&stamp.last, messages.last()) {
            (None, None) => true,
            (Some((seq, run)), Some(last)) => {
                usize::try_from(*seq).ok() == Some(messages.len()) && *run == last.correlation_id
            }
            _ => false,
        }
}

struct Entry {
    messages: Vec<StoredMessage>,
    born: Option<i64>,
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
    kept: LruCache<SessionKey, Entry>,
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
    pub fn take(&self, session: &SessionKey) -> Option<Kept> {
        let mut inner = self.inner();
        let kept = inner.kept.pop(session)?;
        inner.bytes = inner.bytes.saturating_sub(kept.bytes);
        let expired = self.ttl.is_some_and(|ttl| kept.at.elapsed() >= ttl);
        (!expired).then_some(Kept::Ended {
            messages: kept.messages,
            born: kept.born,
        })
    }

    /// Keeps the history a run of the session ended with (as stored), and
    /// the session's `created_at` if the run knew it.
    pub fn keep(&self, session: SessionKey, messages: Vec<StoredMessage>, born: Option<i64>) {
        let bytes = size(&messages);
        if bytes > self.budget / 4 {
            return;
        }
        let mut inner = self.inner();
        if let Some(old) = inner.kept.put(
            session,
            Entry {
                messages,
                born,
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

    fn len(kept: Option<Kept>) -> Option<usize> {
        match kept? {
            Kept::Ended { messages, .. } => Some(messages.len()),
            Kept::Fresh { .. } => None,
        }
    }

    #[test]
    fn a_kept_history_is_taken_once_and_the_oldest_go_past_the_budget() {
        let one = size(&messages(1));
        let histories = Histories::new(one * 16, None);
        histories.keep(key("a"), messages(1), None);
        assert_eq!(len(histories.take(&key("a"))), Some(1));
        assert!(histories.take(&key("a")).is_none(), "taken, not copied");
        for id in ["a", "b", "c", "d", "e"] {
            histories.keep(key(id), messages(3), None);
        }
        assert!(histories.take(&key("a")).is_some(), "15 of 16 fit");
        histories.keep(key("a"), messages(3), None);
        histories.keep(key("f"), messages(3), None);
        assert!(histories.take(&key("b")).is_none(), "the oldest went");
        assert!(histories.take(&key("f")).is_some());
        histories.keep(key("big"), messages(5), None);
        assert!(
            histories.take(&key("big")).is_none(),
            "over a quarter of the budget is not kept"
        );
    }

    #[test]
    fn an_expired_session_is_not_served() {
        let histories = Histories::new(1 << 20, Some(Duration::ZERO));
        histories.keep(key("a"), messages(1), None);
        assert!(histories.take(&key("a")).is_none(), "expired");
    }

    #[test]
    fn a_kept_history_is_the_stored_one_only_in_the_same_life_of_the_session_to_its_last_run() {
        let mut kept = messages(3);
        kept[2].correlation_id = "r2".into();
        let stamp = |created_at: i64, last: Option<(i64, &str)>| SessionStamp {
            created_at,
            last: last.map(|(seq, run)| (seq, run.to_string())),
        };
        assert!(is_stored(&kept, Some(7), &stamp(7, Some((3, "r2")))));
        assert!(
            !is_stored(&kept, None, &stamp(7, Some((3, "r2")))),
            "the session's life unknown"
        );
        assert!(
            !is_stored(&kept, Some(6), &stamp(7, Some((3, "r2")))),
            "deleted and begun again"
        );
        assert!(
            !is_stored(&kept, Some(7), &stamp(7, Some((4, "r3")))),
            "another host ran a turn"
        );
        assert!(
            !is_stored(&kept, Some(7), &stamp(7, Some((3, "r9")))),
            "as many messages, another run's"
        );
        assert!(!is_stored(&kept, Some(7), &stamp(7, None)), "emptied");
        assert!(is_stored(&[], Some(7), &stamp(7, None)));
        assert!(!is_stored(&[], Some(7), &stamp(7, Some((1, "r0")))));
    }
}
