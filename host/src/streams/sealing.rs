//! A run's stream written from its record: the run ended but its stream
//! does not say so (it ended held, with nobody following, or its host died
//! between the two writes), and a reader asks for it.
//!
//! One sealer per stream at a time: two readers of such a run would
//! otherwise both find nothing and both write the record as the stream,
//! twice over. The second waits for the first and then finds the stream
//! ended.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;

use super::{ResponseStreams, StreamError};
use crate::store::{now_ms, RunRecord, RunStatus};

impl ResponseStreams {
    /// Ends the stream of a run whose end is stored but whose stream does
    /// not say so: its host died between the two writes (the run's record
    /// is the truth; the stream's entries are written after it). The
    /// stored outcome is written whole as a newer attempt, so readers see
    /// `restart`, the answer, and the end: the stream reads as the record.
    pub fn seal(&self, correlation_id: &str, ending: Result<&str, &str>) {
        let attempt = i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis(),
        )
        .unwrap_or(i64::MAX);
        let writer = self.writing(correlation_id, attempt);
        match ending {
            Ok(answer) => {
                writer.chunk(answer);
                writer.complete();
            }
            Err(error) => writer.fail(error),
        }
    }

    /// Whether a finished run's stream can still be read: false once it has
    /// expired. A stream whose run's end is stored but which does not say so
    /// within a moment (its host died between the two writes, or the backend
    /// lost the entries) is sealed with the stored outcome first.
    pub async fn settle(&self, run: &RunRecord) -> Result<bool, StreamError> {
        const END_WRITTEN_WITHIN: Duration = Duration::from_secs(2);
        let id = &run.correlation_id;
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let written_by = run.updated_at.saturating_add(ms(END_WRITTEN_WITHIN));
        let expired = now_ms() >= run.updated_at.saturating_add(ms(self.ttl));
        if self.store.is_some() {
            // Entries a reader's arrival queued are in the store first.
            self.flush().await;
        }
        let _turn = self.sealing.turn(id).await;
        loop {
            match self.ended(id).await? {
                None if expired => return Ok(false),
                Some(true) => return Ok(true),
                // Nothing written: the run ended held, with nobody
                // following ([`super::held`]). (Entries of its execution still on
                // their way, from another host, are of an older attempt
                // than this one: readers skip them.)
                None if self.store.is_some() => {
                    self.seal(id, ending_of(run));
                    self.flush().await;
                    return Ok(true);
                }
                None | Some(false) if now_ms() < written_by => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                None | Some(false) => {
                    tracing::warn!(correlation_id = %id, "the run ended but its stream did not say so (its host died in between, or the backend lost the entries); the stream is ended with the stored outcome");
                    self.seal(id, ending_of(run));
                    self.flush().await;
                    return Ok(true);
                }
            }
        }
    }
}

/// A finished run's outcome as its stream's ending.
fn ending_of(run: &RunRecord) -> Result<&str, &str> {
    match run.status {
        RunStatus::Completed => Ok(run.response.as_deref().unwrap_or_default()),
        _ => Err(run.error.as_deref().unwrap_or("the run failed")),
    }
}

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
