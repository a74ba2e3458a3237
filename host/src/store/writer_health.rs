//! Whether the store's one writer is alive and making progress. Every
//! durable write goes through it, so a writer that died (a panic) or hangs
//! (a database that stopped answering, a lock held by another process) stops
//! the whole host while its HTTP front still answers. Health must say so,
//! and the binary must exit so that a supervisor restarts it: a host that
//! looks green but cannot write is the worst kind of failure.
//!
//! The writer loops report here; nothing here decides what to do about it.

use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::clock::now_ms;

// 0: running (the default).
const CLOSED: u8 = 1;
const DEAD: u8 = 2;

/// What the writer loops report.
#[derive(Default)]
pub(crate) struct WriterHealth {
    /// When the batch under way began (ms), 0 when the writer waits for work.
    busy_since: AtomicI64,
    /// When batches began to fail whole (ms), 0 while they commit.
    failing_since: AtomicI64,
    /// Why the last whole batch failed, or why the writer died.
    reason: Mutex<String>,
    state: AtomicU8,
}

/// The writer's condition, worst first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriterCheck {
    /// It stopped for good (a panic, or its loop ended without a close).
    Dead(String),
    /// A batch has been under way for longer than the deadline.
    Stalled(String),
    /// Its last batches failed whole (disk full, database refusing writes);
    /// it keeps trying.
    Failing(String),
    Healthy,
}

impl WriterCheck {
    /// Why the host cannot write now, if it cannot.
    pub fn problem(&self) -> Option<&str> {
        match self {
            WriterCheck::Dead(r) | WriterCheck::Stalled(r) | WriterCheck::Failing(r) => Some(r),
            WriterCheck::Healthy => None,
        }
    }
}

impl WriterHealth {
    fn set_reason(&self, reason: String) {
        if let Ok(mut held) = self.reason.lock() {
            *held = reason;
        }
    }

    fn reason(&self) -> String {
        self.reason.lock().map(|r| r.clone()).unwrap_or_default()
    }

    pub(super) fn batch_started(&self) {
        self.busy_since.store(now_ms().max(1), Ordering::Relaxed);
    }

    /// A batch ended: `failure` is why it failed whole, if it did.
    pub(super) fn batch_ended(&self, failure: Option<String>) {
        match failure {
            Some(reason) => {
                self.set_reason(reason);
                let _ = self.failing_since.compare_exchange(
                    0,
                    now_ms().max(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            None => self.failing_since.store(0, Ordering::Relaxed),
        }
        self.busy_since.store(0, Ordering::Relaxed);
    }

    pub(super) fn closed(&self) {
        self.state.store(CLOSED, Ordering::Relaxed);
    }

    /// Held by the writer loop for its whole life: if the loop ends other
    /// than by a close (a panic unwinding through it), the writer is dead.
    pub(super) fn guard(self: &Arc<Self>) -> LoopGuard {
        LoopGuard(self.clone())
    }

    pub fn check(&self, deadline: Duration) -> WriterCheck {
        if self.state.load(Ordering::Relaxed) == DEAD {
            return WriterCheck::Dead(self.reason());
        }
        let now = now_ms();
        let busy_since = self.busy_since.load(Ordering::Relaxed);
        let deadline_ms = i64::try_from(deadline.as_millis()).unwrap_or(i64::MAX);
        if busy_since > 0 && now - busy_since > deadline_ms {
            return WriterCheck::Stalled(format!(
                "the store's writer has been on one batch for {:.1} s (deadline {deadline:?}): the database does not answer, or another process holds its lock",
                (now - busy_since) as f64 / 1000.0
            ));
        }
        let failing_since = self.failing_since.load(Ordering::Relaxed);
        if failing_since > 0 {
            return WriterCheck::Failing(format!(
                "the store has refused every write for {:.1} s: {}",
                (now - failing_since) as f64 / 1000.0,
                self.reason()
            ));
        }
        WriterCheck::Healthy
    }
}

pub(super) struct LoopGuard(Arc<WriterHealth>);

impl Drop for LoopGuard {
    fn drop(&mut self) {
        if self.0.state.load(Ordering::Relaxed) == CLOSED {
            return;
        }
        let reason = if std::thread::panicking() {
            "the store's writer panicked (see the log above): no write can be committed; restart the host"
        } else {
            "the store's writer stopped: no write can be committed; restart the host"
        };
        tracing::error!(reason, "store writer gone");
        self.0.set_reason(reason.to_string());
        self.0.state.store(DEAD, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_in_the_writer_loop_marks_it_dead() {
        let health = Arc::new(WriterHealth::default());
        let guard = health.guard();
        let joined = std::thread::spawn(move || {
            let _guard = guard;
            panic!("boom");
        })
        .join();
        assert!(joined.is_err());
        let check = health.check(Duration::from_secs(30));
        assert!(matches!(check, WriterCheck::Dead(_)), "{check:?}");
        assert!(check.problem().unwrap_or("").contains("panicked"));
    }

    #[test]
    fn a_closed_writer_is_not_dead() {
        let health = Arc::new(WriterHealth::default());
        {
            let _guard = health.guard();
            health.closed();
        }
        assert_eq!(health.check(Duration::from_secs(30)), WriterCheck::Healthy);
    }

    #[test]
    fn a_long_batch_is_a_stall_and_a_failed_one_is_failing_until_one_commits() {
        let health = WriterHealth::default();
        health.busy_since.store(now_ms() - 5_000, Ordering::Relaxed);
        assert!(matches!(
            health.check(Duration::from_secs(1)),
            WriterCheck::Stalled(_)
        ));
        assert_eq!(health.check(Duration::from_secs(60)), WriterCheck::Healthy);
        health.batch_ended(Some("disk full".into()));
        let check = health.check(Duration::from_secs(1));
        assert!(
            matches!(&check, WriterCheck::Failing(r) if r.contains("disk full")),
            "{check:?}"
        );
        health.batch_started();
        health.batch_ended(None);
        assert_eq!(health.check(Duration::from_secs(1)), WriterCheck::Healthy);
    }
}
