//! Following one run's stream: what is stored after the cursor, then each
//! entry as it is published, until the last entry. Gap-free and without
//! duplicates: the reader subscribes to published entries before it reads
//! the backend, entries are published only once stored and in order, so a
//! published entry newer than the last one read is always the next one.
//! Alone on its store, this process writes every stream it serves and
//! publishes every entry: a follower reads the backend when it begins and
//! when it fell behind, never on a timer. On a shared hub a writer in
//! another process publishes nothing here: a poll of the backend covers
//! it; the poll backs off while nothing comes (an idle follower reads once
//! a second, not twenty times).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};

use super::{Entry, EntryId, Follower, ResponseStreams, Stored, StreamError, READ_LIMIT};

/// The entries of a followed stream, in order; it ends after the last one.
pub type Follow = mpsc::Receiver<Result<Stored, StreamError>>;

/// How soon the backend is read again when nothing is published here,
/// right after an entry came; doubled after each empty read up to
/// [`POLL_LONGEST`].
const POLL: Duration = Duration::from_millis(50);
const POLL_LONGEST: Duration = Duration::from_secs(1);

/// Entries held for a slow reader before the follower waits for it (only
/// that reader waits: the writer and the others never do).
const BUFFER: usize = 64;

impl ResponseStreams {
    /// Follows the stream of `correlation_id` from after `after`, in the
    /// place `follower` holds. Gives up when no entry came for `idle_limit`.
    pub fn follow(
        self: &Arc<Self>,
        follower: Follower,
        correlation_id: &str,
        after: EntryId,
        idle_limit: Duration,
    ) -> Follow {
        let (sender, receiver) = mpsc::channel(BUFFER);
        let live = self.subscribe();
        // Before anything is read: from here on, the run's entries are
        // written (and published) as they come.
        let following = self
            .store
            .is_some()
            .then(|| self.taps.follow(correlation_id, &self.queue));
        let this = self.clone();
        let correlation_id = correlation_id.to_string();
        tokio::spawn(async move {
            this.settle_held(&correlation_id).await;
            this.feed(&correlation_id, after, idle_limit, live, sender)
                .await;
            drop(following);
            drop(follower);
        });
        receiver
    }

    /// A run that ended with nobody following wrote no entries, and none
    /// will come: its stream is written from its record now. (Its end may
    /// have come between the caller's look at the run and the follow.)
    async fn settle_held(&self, correlation_id: &str) {
        let Some(store) = &self.store else {
            return;
        };
        match store.run(correlation_id).await {
            Ok(Some(run)) if run.status.is_finished() => {
                if let Err(e) = self.settle(&run).await {
                    tracing::warn!(correlation_id, error = %e, "could not write the stream of a run that ended unfollowed");
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(correlation_id, error = %e, "could not read the followed run");
            }
        }
    }

    async fn feed(
        &self,
        correlation_id: &str,
        mut last: EntryId,
        idle_limit: Duration,
        mut live: broadcast::Receiver<Arc<(String, Stored)>>,
        sender: mpsc::Sender<Result<Stored, StreamError>>,
    ) {
        let mut idle = tokio::time::Instant::now() + idle_limit;
        let mut attempt = Attempt::default();
        let mut poll_every = POLL;
        loop {
            let stored = match self.read_after(correlation_id, &last).await {
                Ok(stored) => stored,
                Err(e) => {
                    let _ = sender.send(Err(e)).await;
                    return;
                }
            };
            let full = stored.len() >= READ_LIMIT;
            poll_every = if self.written_here {
                idle_limit
            } else if stored.is_empty() {
                // On a shared hub the run may have ended held on another
                // host: its stream is then its record.
                self.settle_held(correlation_id).await;
                (poll_every * 2).min(POLL_LONGEST)
            } else {
                POLL
            };
            for entry in stored {
                if !send(&sender, &mut last, &mut attempt, entry).await {
                    return;
                }
                idle = tokio::time::Instant::now() + idle_limit;
            }
            if full {
                continue;
            }
            let poll = tokio::time::sleep(poll_every);
            tokio::pin!(poll);
            loop {
                tokio::select! {
                    published = live.recv() => match published {
                        Ok(published) if published.0 == correlation_id => {
                            if published.1.id > last {
                                if !send(&sender, &mut last, &mut attempt, published.1.clone()).await {
                                    return;
                                }
                                idle = tokio::time::Instant::now() + idle_limit;
                                if !self.written_here {
                                    poll_every = POLL;
                                }
                            }
                        }
                        Ok(_) => {}
                        // Fell behind: the backend has what was missed.
                        Err(broadcast::error::RecvError::Lagged(_)) => break,
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    () = &mut poll => break,
                    () = sender.closed() => return,
                    () = tokio::time::sleep_until(idle) => return,
                }
            }
        }
    }
}

/// The attempt a reader follows, and whether it sent anything of it.
#[derive(Default)]
struct Attempt {
    newest: i64,
    sent: bool,
}

/// Sends one entry on; false when the stream is over (the last entry was
/// sent, or the reader went away). An entry of an older attempt than one
/// already read (a late writer, a host that lost the run) is skipped; the
/// first entry of a newer attempt is preceded by [`Entry::Restart`] when
/// something of an older one was sent.
async fn send(
    sender: &mpsc::Sender<Result<Stored, StreamError>>,
    last: &mut EntryId,
    attempt: &mut Attempt,
    entry: Stored,
) -> bool {
    *last = entry.id.clone();
    if entry.attempt < attempt.newest {
        return true;
    }
    if entry.attempt > attempt.newest {
        if attempt.sent {
            let restart = Stored {
                entry: Entry::Restart,
                ..entry.clone()
            };
            if sender.send(Ok(restart)).await.is_err() {
                return false;
            }
        }
        attempt.newest = entry.attempt;
    }
    attempt.sent = true;
    let end = entry.entry.is_last();
    sender.send(Ok(entry)).await.is_ok() && !end
}
