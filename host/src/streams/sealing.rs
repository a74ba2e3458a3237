//! One sealer per stream at a time: two readers of an ended run whose
//! stream was never written (it ended held, or its host died before the
//! end) would otherwise both find nothing and both write the run's record
//! as the stream, twice over. The second waits for the first and then
//! finds the stream ended.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::OwnedMutexGuard;

/// The streams being settled in this process, each behind its own lock.
#[derive(Default)]
pub(super) struct Gates {
    open: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A stream's turn: held while its reader looks and, if need be, seals.
pub(super) struct Turn<'a> {
    gates: &'a Gates,
    id: String,
    held: Option<OwnedMutexGuard<()>>,
}

impl Gates {
    /// Waits for the stream `id`'s turn.
    pub(super) async fn turn(&self, id: &str) -> Turn<'_> {
        let lock = {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            open.entry(id.to_string()).or_default().clone()
        };
        Turn {
            gates: self,
            id: id.to_string(),
            held: Some(lock.lock_owned().await),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        drop(self.held.take());
        let mut open = self
            .gates
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // The map's own handle is the last one: nobody waits for this
        // stream any more.
        if open
            .get(&self.id)
            .is_some_and(|lock| Arc::strong_count(lock) == 1)
        {
            open.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_second_reader_waits_for_the_first_and_nothing_is_kept_after() {
        let gates = Arc::new(Gates::default());
        let first = gates.turn("run-1").await;
        let waiting = {
            let gates = gates.clone();
            tokio::spawn(async move {
                let _turn = gates.turn("run-1").await;
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !waiting.is_finished(),
            "the second turn came while the first was held"
        );
        // Another stream is not held up.
        drop(gates.turn("run-2").await);
        drop(first);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the second turn never came")
            .expect("the waiting task failed");
        assert_eq!(gates.len(), 0, "a settled stream's lock was kept");
    }
}
