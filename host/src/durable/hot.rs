//! Hot instances: the state and journal of instances that ran recently, kept
//! in memory under a byte budget so that their next episode reads nothing but
//! their inbox. The store stays the write-ahead log: an entry is only ever
//! the image of rows already committed, and dropping one (eviction, a
//! management operation, a commit that did not apply) costs a read, never
//! correctness.

use std::sync::Mutex;

use lru::LruCache;

use crate::core::effects::Effect;
use crate::core::instance::RuntimeStatus;
use crate::core::journal::Entry;
use crate::store::Loaded;

/// One instance's committed state and journal.
#[derive(Debug, Clone)]
pub(super) struct HotInstance {
    pub loaded: Loaded,
    pub journal: Vec<(Entry, i64)>,
}

impl HotInstance {
    fn size(&self) -> usize {
        const OVERHEAD: usize = 512;
        usize::try_from(self.loaded.state.history.bytes).unwrap_or(usize::MAX)
            + self.loaded.input.len()
            + OVERHEAD
    }

    /// The instance after `effects` are committed, or `None` when they end
    /// its execution (its next state must come from the store).
    pub fn after(mut self, effects: &[Effect]) -> Option<Self> {
        for effect in effects {
            match effect {
                Effect::Append { entries, at } => {
                    let bytes: u64 = entries.iter().map(Entry::size).sum();
                    let state = &mut self.loaded.state;
                    state.history = state.history.plus(entries.len() as u64, bytes);
                    state.has_run = true;
                    self.journal
                        .extend(entries.iter().cloned().map(|e| (e, *at)));
                }
                Effect::SetStatus { status, .. } => {
                    if status.is_finished() || *status == RuntimeStatus::ContinuedAsNew {
                        return None;
                    }
                    self.loaded.state.status = *status;
                }
                Effect::NewExecution { .. } | Effect::Purge => return None,
                _ => {}
            }
        }
        Some(self)
    }
}

pub(super) struct HotInstances {
    budget: usize,
    inner: Mutex<Inner>,
}

struct Inner {
    entries: LruCache<String, HotInstance>,
    bytes: usize,
}

impl HotInstances {
    /// `budget` bytes at most (0 keeps nothing hot).
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            inner: Mutex::new(Inner {
                entries: LruCache::unbounded(),
                bytes: 0,
            }),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes an instance out for an episode: only its worker holds it then.
    pub fn take(&self, id: &str) -> Option<HotInstance> {
        let mut inner = self.inner();
        let hot = inner.entries.pop(id)?;
        inner.bytes = inner.bytes.saturating_sub(hot.size());
        Some(hot)
    }

    /// Keeps an instance hot, evicting the least recently used past the budget.
    pub fn put(&self, id: String, hot: HotInstance) {
        let size = hot.size();
        if size > self.budget {
            return;
        }
        let mut inner = self.inner();
        if let Some(old) = inner.entries.put(id, hot) {
            inner.bytes = inner.bytes.saturating_sub(old.size());
        }
        inner.bytes += size;
        while inner.bytes > self.budget {
            match inner.entries.pop_lru() {
                Some((_, evicted)) => inner.bytes = inner.bytes.saturating_sub(evicted.size()),
                None => break,
            }
        }
    }

    /// Forgets an instance whose state changed outside its episodes.
    pub fn forget(&self, id: &str) {
        drop(self.take(id));
    }

    /// (instances, bytes) held now.
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let inner = self.inner();
        (inner.entries.len(), inner.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::instance::{InstanceState, Size};
    use crate::core::journal::{Call, Event};

    fn hot(id: &str, bytes: u64) -> HotInstance {
        HotInstance {
            loaded: Loaded {
                state: InstanceState {
                    id: id.into(),
                    status: RuntimeStatus::Running,
                    execution: 1,
                    parent: None,
                    history: Size { events: 0, bytes },
                    has_run: true,
                },
                name: "o".into(),
                digest: "d".into(),
                input: String::new(),
                created_at: 0,
            },
            journal: Vec::new(),
        }
    }

    #[test]
    fn the_least_recently_used_are_evicted_past_the_budget() {
        let hot_instances = HotInstances::new(3 * 1_512);
        for id in ["a", "b", "c", "d"] {
            hot_instances.put(id.into(), hot(id, 1_000));
        }
        assert_eq!(hot_instances.held(), (3, 3 * 1_512));
        assert!(hot_instances.take("a").is_none(), "the oldest went first");
        assert!(hot_instances.take("d").is_some());
        assert_eq!(hot_instances.held(), (2, 2 * 1_512));
    }

    #[test]
    fn committed_effects_update_the_image_and_an_ending_drops_it() -> Result<(), String> {
        let entries = vec![
            Entry::Event(Event::TimerFired { task: 0 }),
            Entry::Call(Call::Now { value: 1 }),
        ];
        let next = hot("a", 0).after(&[
            Effect::Append { entries, at: 7 },
            Effect::SetStatus {
                status: RuntimeStatus::Running,
                output: None,
                custom_status: None,
            },
        ]);
        let next = next.ok_or("a running instance stays hot")?;
        assert_eq!(next.journal.len(), 2);
        assert_eq!(next.journal[1].1, 7);
        assert_eq!(next.loaded.state.history.events, 2);
        let ended = next.after(&[Effect::SetStatus {
            status: RuntimeStatus::Completed,
            output: None,
            custom_status: None,
        }]);
        assert!(ended.is_none());
        Ok(())
    }
}
