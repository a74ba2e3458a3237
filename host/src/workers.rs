//! One worker per key (a session, an instance) at a time, with no lost wake-ups.
//!
//! A worker runs until it finds no work. A wake that arrives while it runs
//! marks the key "look again", so work added between the worker's last look
//! and its exit is never stranded.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub struct KeyedWorkers<K> {
    active: Mutex<HashMap<K, bool>>,
}

impl<K: Eq + Hash + Clone> Default for KeyedWorkers<K> {
    fn default() -> Self {
        Self {
            active: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone> KeyedWorkers<K> {
    /// True when the caller must start a worker for `key`; false when one runs
    /// already (it is told to look again).
    pub fn claim(&self, key: &K) -> bool {
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        match active.get_mut(key) {
            Some(again) => {
                *again = true;
                false
            }
            None => {
                active.insert(key.clone(), false);
                true
            }
        }
    }

    /// Claims `key` only if no worker runs for it; unlike [`Self::claim`],
    /// a running worker is not told to look again (the caller has nothing
    /// for it yet, and tells it through `claim` once it does).
    pub fn try_claim(&self, key: &K) -> bool {
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        if active.contains_key(key) {
            return false;
        }
        active.insert(key.clone(), false);
        true
    }

    /// Called by a worker that found no work: true when it must look again,
    /// false when it has been released and must exit.
    pub fn look_again(&self, key: &K) -> bool {
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        match active.get_mut(key) {
            Some(again) if *again => {
                *again = false;
                true
            }
            _ => {
                active.remove(key);
                false
            }
        }
    }

    /// Releases `key` unconditionally (a worker stopping early).
    pub fn release(&self, key: &K) {
        self.active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

/// Stops new work (`stopping`) and waits up to `grace` for the tasks under
/// way; false when some were still running at the deadline. Whatever they
/// leave unfinished is in the store for the next start.
pub async fn drain(stopping: &CancellationToken, tracker: &TaskTracker, grace: Duration) -> bool {
    stopping.cancel();
    tracker.close();
    tokio::time::timeout(grace, tracker.wait()).await.is_ok()
}

#[cfg(test)]
mod tests {
    use super::KeyedWorkers;

    #[test]
    fn a_wake_during_work_makes_the_worker_look_again() {
        let workers = KeyedWorkers::default();
        assert!(workers.claim(&"s"));
        assert!(!workers.claim(&"s"), "one worker per key");
        assert!(workers.look_again(&"s"), "the second wake is not lost");
        assert!(!workers.look_again(&"s"));
        assert!(
            workers.claim(&"s"),
            "released: the next wake starts a worker"
        );
    }

    #[test]
    fn a_try_that_finds_a_worker_running_leaves_it_alone() {
        let workers = KeyedWorkers::default();
        assert!(workers.try_claim(&"s"));
        assert!(!workers.try_claim(&"s"));
        assert!(!workers.look_again(&"s"), "not told to look again");
        assert!(workers.try_claim(&"s"), "released");
    }
}
