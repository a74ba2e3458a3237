//! How many times in a row SDK workers gave an item back: abandoned it,
//! went away with it, or let it go unanswered past its patience. Past
//! [`LIMIT`] the item fails with the reason rather than being sent again
//! for good: a worker that cannot run it (an entity id its SDK refuses), or
//! an answer larger than the gRPC server takes, would otherwise make it run
//! again and again with nothing written. Counted in memory: a restart
//! begins the count again, which only delays the end.

use std::collections::HashMap;
use std::sync::Mutex;

/// Gives-back in a row after which an item fails.
pub(super) const LIMIT: u32 = 10;

#[derive(Default)]
pub(super) struct GivenBack(Mutex<HashMap<String, u32>>);

impl GivenBack {
    /// Counts one more give-back of `key`; true when that makes
    /// [`LIMIT`] in a row (the count is then forgotten: the item fails).
    pub(super) fn again(&self, key: &str) -> bool {
        let mut counts = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let count = counts.entry(key.to_string()).or_default();
        *count += 1;
        if *count >= LIMIT {
            counts.remove(key);
            return true;
        }
        false
    }

    /// `key` was answered: its count starts over.
    pub(super) fn answered(&self, key: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
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
}
