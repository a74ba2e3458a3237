//! How many times in a row SDK workers gave an item back: abandoned it,
//! went away with it, or let it go unanswered past its patience. Past
//! [`LIMIT`] the item fails with the reason rather than being sent again
//! for good: a worker that cannot run it (an entity id its SDK refuses), or
//! an answer larger than the gRPC server takes, would otherwise make it run
//! again and again with nothing written. Counted in memory: a restart
//! begins the count again, which only delays the end. The counts of items
//! that end otherwise (their instance terminated or purged) are never
//! answered: the least recently given back are forgotten past [`KEPT`].

use std::num::NonZeroUsize;
use std::sync::Mutex;

use lru::LruCache;

/// Gives-back in a row after which an item fails.
pub(super) const LIMIT: u32 = 10;

/// Items whose count is kept; forgetting one only delays its end. Past this
/// many items given back in turn (a fan-out wider than it, every item given
/// back round-robin), counts are forgotten before they reach the limit:
/// such items run again rather than fail.
const KEPT: NonZeroUsize = NonZeroUsize::MIN.saturating_add(65_535);

pub(super) struct GivenBack(Mutex<LruCache<String, u32>>);

impl Default for GivenBack {
    fn default() -> Self {
        Self(Mutex::new(LruCache::new(KEPT)))
    }
}

impl GivenBack {
    /// Counts one more give-back of `key`; true when that makes
    /// [`LIMIT`] in a row (the count is then forgotten: the item fails).
    pub(super) fn again(&self, key: &str) -> bool {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let count = counts.get(key).copied().unwrap_or(0) + 1;
        if count >= LIMIT {
            counts.pop(key);
            return true;
        }
        counts.put(key.to_string(), count);
        false
    }

    /// `key` was answered: its count starts over.
    pub(super) fn answered(&self, key: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).pop(key);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_fails_after_the_limit_of_gives_back_in_a_row_and_an_answer_resets_it() {
        let given = GivenBack::default();
        for _ in 1..LIMIT {
            assert!(!given.again("a"));
        }
        given.answered("a");
        for _ in 1..LIMIT {
            assert!(!given.again("a"));
        }
        assert!(given.again("a"), "the tenth in a row");
        assert!(!given.again("a"), "counted afresh once it failed");
        assert!(!given.again("b"), "each item its own count");
    }

    #[test]
    fn counts_of_items_never_answered_are_forgotten_past_a_bound() {
        let given = GivenBack::default();
        for i in 0..3 * KEPT.get() {
            given.again(&format!("ended-{i}"));
        }
        assert_eq!(given.len(), KEPT.get());
        // The newest still counts.
        let newest = format!("ended-{}", 3 * KEPT.get() - 1);
        for _ in 2..LIMIT {
            assert!(!given.again(&newest));
        }
        assert!(given.again(&newest));
    }
}
