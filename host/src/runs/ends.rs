//! Runs' ends, told to those who wait for that run alone. A broadcast to
//! every waiter woke each of them at every end: with sixteen callers
//! waiting, one run's end woke sixteen tasks, fifteen of them for nothing,
//! and a thousand orchestrations waiting on agent runs made a thousand
//! wake-ups an end (and, past the channel's capacity, a re-read each).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;

use super::Finished;

/// Each run's waiters, each by its key.
type Watchers = HashMap<String, Vec<(u64, mpsc::UnboundedSender<Finished>)>>;

/// Who waits for which run's end.
#[derive(Default)]
pub(super) struct Ends {
    watchers: Mutex<Watchers>,
    next: AtomicU64,
}

/// One waiter's ear for one run's ends (a run that comes to wait for a
/// human is told too, then again when it ends), from the moment it was
/// made: made before the run is stored or woken, nothing is missed.
pub(super) struct EndWatch {
    ends: Arc<Ends>,
    correlation_id: String,
    key: u64,
    heard: mpsc::UnboundedReceiver<Finished>,
}

impl Ends {
    /// Listens for the ends of the run `correlation_id`.
    pub(super) fn watch(self: &Arc<Self>, correlation_id: &str) -> EndWatch {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let (tell, heard) = mpsc::unbounded_channel();
        self.lock()
            .entry(correlation_id.to_string())
            .or_default()
            .push((key, tell));
        EndWatch {
            ends: self.clone(),
            correlation_id: correlation_id.to_string(),
            key,
            heard,
        }
    }

    /// Tells the run's waiters, if any, that it ended (or waits).
    pub(super) fn tell(&self, finished: Finished) {
        let watchers = self.lock();
        if let Some(watchers) = watchers.get(&finished.correlation_id) {
            for (_, tell) in watchers {
                let _ = tell.send(finished.clone());
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watchers> {
        self.watchers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[cfg(test)]
    fn watched(&self) -> usize {
        self.lock().len()
    }
}

impl EndWatch {
    /// The next end heard of the run.
    pub(super) async fn recv(&mut self) -> Option<Finished> {
        self.heard.recv().await
    }
}

impl Drop for EndWatch {
    fn drop(&mut self) {
        let mut watchers = self.ends.lock();
        if let Some(of_run) = watchers.get_mut(&self.correlation_id) {
            of_run.retain(|(key, _)| *key != self.key);
            if of_run.is_empty() {
                watchers.remove(&self.correlation_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(id: &str) -> Finished {
        Finished {
            correlation_id: id.to_string(),
            record: None,
        }
    }

    #[tokio::test]
    async fn an_end_reaches_the_waiters_of_its_run_and_no_other() {
        let ends = Arc::new(Ends::default());
        let mut a1 = ends.watch("a");
        let mut a2 = ends.watch("a");
        let mut b = ends.watch("b");
        ends.tell(end("a"));
        ends.tell(end("c"));
        assert_eq!(
            a1.recv().await.map(|f| f.correlation_id).as_deref(),
            Some("a")
        );
        assert_eq!(
            a2.recv().await.map(|f| f.correlation_id).as_deref(),
            Some("a")
        );
        assert!(b.heard.try_recv().is_err(), "b heard of another run's end");
        drop((a1, a2));
        assert_eq!(
            ends.watched(),
            1,
            "a run nobody waits for any more is still listed"
        );
        drop(b);
        assert_eq!(ends.watched(), 0);
    }
}
