//! Pacing of continue-as-new. An execution that continues as new at once,
//! forever, is a busy loop the episode's CPU budget never sees (each
//! generation is a short episode): six such instances ran ~3,500
//! generations a second each and held both cores. Each instance may
//! continue as new [`BURST`] times at once, then [`PER_SECOND`] times a
//! second: its next episode waits for its turn, off the episode slots, as
//! a retry waits for its delay. A generation that takes a tenth of a
//! second or more (it waits on a timer, an activity, an event) never waits.
//! Held in this process: a restart or another host starts a fresh bucket.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Generations an instance may start at once before it is paced.
pub const BURST: f64 = 20.0;
/// Generations a second an instance may start once its burst is spent.
pub const PER_SECOND: f64 = 10.0;
/// Buckets kept before the full ones (of instances that stopped looping)
/// are dropped.
const KEPT: usize = 1_024;

/// Each instance's bucket of generations.
#[derive(Debug, Default)]
pub struct ContinuePace {
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Generations it may start now (below zero: it owes time).
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refilled(self, now: Instant) -> Self {
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * PER_SECOND;
        Self {
            tokens: (self.tokens + earned).min(BURST),
            at: now,
        }
    }
}

impl ContinuePace {
    /// An execution of `id` ended by continuing as new: one generation spent.
    pub fn continued(&self, id: &str) {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= KEPT {
            buckets.retain(|_, b| b.refilled(now).tokens < BURST);
        }
        let bucket = buckets.entry(id.to_string()).or_insert(Bucket {
            tokens: BURST,
            at: now,
        });
        let mut refilled = bucket.refilled(now);
        refilled.tokens -= 1.0;
        *bucket = refilled;
    }

    /// How long `id` waits before its next episode, if it must.
    pub fn wait(&self, id: &str) -> Option<Duration> {
        let now = Instant::now();
        let buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        let owed = -buckets.get(id)?.refilled(now).tokens;
        (owed > 0.0).then(|| Duration::from_secs_f64(owed / PER_SECOND))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_runs_at_once_then_each_generation_waits_its_turn() {
        let pace = ContinuePace::default();
        assert_eq!(pace.wait("a"), None);
        for _ in 0..20 {
            pace.continued("a");
        }
        assert_eq!(pace.wait("a"), None, "the burst is free");
        pace.continued("a");
        let wait = pace.wait("a").unwrap_or_default();
        assert!(
            wait > Duration::from_millis(50) && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        assert_eq!(pace.wait("b"), None, "another instance is not paced");
    }

    #[test]
    fn a_generation_that_takes_its_time_never_waits() {
        let pace = ContinuePace::default();
        let start = Instant::now() - Duration::from_secs(60);
        pace.buckets.lock().unwrap().insert(
            "a".into(),
            Bucket {
                tokens: -1.0,
                at: start,
            },
        );
        assert_eq!(pace.wait("a"), None);
    }
}
