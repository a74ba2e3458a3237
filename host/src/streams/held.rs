//! Streams nobody follows stay in memory. Most runs are asked for their
//! whole answer and never streamed; writing their chunks to the store cost
//! five rows a run (the largest part of a run's write). A run executing here
//! keeps its entries in memory until a reader asks for its stream, at which
//! point what it holds is written and the rest goes straight through; a run
//! that ends with no reader writes nothing, and its stream is the answer in
//! its record (written whole as the stream when a reader asks later:
//! [`super::ResponseStreams::settle`]).
//!
//! Streams in the store only (Redis keeps its own). Alone on its store, a
//! process holds every run's entries: its readers all ask it. On a shared
//! hub a reader on another host could not, so only a run whose caller waits
//! here for the whole answer is held (nobody else knows its id before it
//! ends; if the caller's wait runs out, what is held is written before the
//! id is handed out).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::{Job, Outgoing};

/// Runs executing here whose entries are held, and the streams readers
/// follow (a writer begun while one is followed never holds).
pub(super) struct Taps {
    inner: Mutex<Inner>,
    /// How long a kept run is remembered: its stream's lifetime. A run
    /// that waits and then ends with no new execution here (its approval
    /// ran out, another host went on with it, it was canceled) is never
    /// told ended; past this, its stream is gone and keeping it means
    /// nothing.
    keep_for: Duration,
}

#[derive(Default)]
struct Inner {
    held: HashMap<String, Arc<Held>>,
    followed: HashMap<String, usize>,
    /// Runs whose stream was written while they wait (for a human), with
    /// when each was last kept: their next execution writes through, so the
    /// stream stays whole.
    kept: HashMap<String, Instant>,
    /// When each was kept, oldest first (an entry whose run was kept again
    /// or ended since is passed over when its time comes).
    kept_at: VecDeque<(Instant, String)>,
}

/// One execution's entries while nobody follows its stream.
pub(super) struct Held {
    state: Mutex<State>,
}

enum State {
    Holding(Vec<Outgoing>),
    /// Written through: a reader asked, or the run came to wait.
    Open,
    /// Ended with nobody following: nothing was or will be written.
    Dropped,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl Taps {
    pub fn new(keep_for: Duration) -> Self {
        Self {
            inner: Mutex::default(),
            keep_for,
        }
    }

    /// Where a new execution of `correlation_id` keeps its entries: `None`
    /// when a reader already follows it (they are written at once).
    pub fn begin(&self, correlation_id: &str) -> Option<Arc<Held>> {
        let mut inner = lock(&self.inner);
        if inner.followed.contains_key(correlation_id) || inner.kept.contains_key(correlation_id) {
            return None;
        }
        let held = Arc::new(Held {
            state: Mutex::new(State::Holding(Vec::new())),
        });
        // An older execution of the run (retried after a store error) is
        // not the answer: its entries are forgotten.
        inner.held.insert(correlation_id.to_string(), held.clone());
        Some(held)
    }

    /// A reader follows `correlation_id` until the guard drops: what its
    /// execution here holds is written now, the rest as it comes.
    pub fn follow(self: &Arc<Self>, correlation_id: &str, queue: &Queue) -> Following {
        let mut inner = lock(&self.inner);
        *inner
            .followed
            .entry(correlation_id.to_string())
            .or_default() += 1;
        if let Some(held) = inner.held.remove(correlation_id) {
            held.open(queue);
        }
        Following {
            taps: self.clone(),
            correlation_id: correlation_id.to_string(),
        }
    }

    /// Writes what the execution of `correlation_id` holds, if it holds
    /// anything; true when something was queued.
    pub fn release(&self, correlation_id: &str, queue: &Queue) -> bool {
        let held = lock(&self.inner).held.remove(correlation_id);
        held.is_some_and(|held| held.open(queue))
    }

    /// The execution of `correlation_id` comes to wait: what it holds is
    /// written, and so is everything its next execution writes.
    pub fn keep(&self, correlation_id: &str, queue: &Queue) {
        let held = {
            let mut inner = lock(&self.inner);
            let now = Instant::now();
            inner.forget_kept_before(now.checked_sub(self.keep_for));
            inner.kept.insert(correlation_id.to_string(), now);
            inner.kept_at.push_back((now, correlation_id.to_string()));
            inner.held.remove(correlation_id)
        };
        if let Some(held) = held {
            held.open(queue);
        }
    }

    /// A stream written through got its last entry.
    pub fn ended(&self, correlation_id: &str) {
        let mut inner = lock(&self.inner);
        if !inner.kept.is_empty() {
            inner.kept.remove(correlation_id);
        }
    }

    /// Forgets an execution that ended held (and nothing newer).
    fn end(&self, correlation_id: &str, held: &Held) {
        let mut inner = lock(&self.inner);
        if inner
            .held
            .get(correlation_id)
            .is_some_and(|h| std::ptr::eq(Arc::as_ptr(h), held))
        {
            inner.held.remove(correlation_id);
        }
    }
}

impl Inner {
    /// Forgets the runs kept before `before` (all of them when the whole
    /// lifetime has not passed since the clock's start: none).
    fn forget_kept_before(&mut self, before: Option<Instant>) {
        let Some(before) = before else {
            return;
        };
        while self.kept_at.front().is_some_and(|(at, _)| *at < before) {
            if let Some((at, id)) = self.kept_at.pop_front() {
                if self.kept.get(&id) == Some(&at) {
                    self.kept.remove(&id);
                }
            }
        }
    }
}

pub(super) type Queue = mpsc::UnboundedSender<Job>;

impl Held {
    /// From now on entries go straight through; what was held goes first.
    fn open(&self, queue: &Queue) -> bool {
        let mut state = lock(&self.state);
        match std::mem::replace(&mut *state, State::Open) {
            State::Holding(entries) => {
                let any = !entries.is_empty();
                for entry in entries {
                    let _ = queue.send(Job::Entry(entry));
                }
                any
            }
            State::Open => false,
            State::Dropped => {
                *state = State::Dropped;
                false
            }
        }
    }

    /// Takes one entry: held, written through, or (the last one, nobody
    /// following) dropped with everything held.
    pub fn push(&self, taps: &Taps, outgoing: Outgoing, queue: &Queue) {
        let mut state = lock(&self.state);
        match &mut *state {
            State::Holding(entries) if outgoing.entry.is_last() => {
                entries.clear();
                *state = State::Dropped;
                drop(state);
                taps.end(&outgoing.correlation_id, self);
            }
            State::Holding(entries) => entries.push(outgoing),
            // Under the lock: an entry never overtakes those a reader's
            // arrival just queued.
            State::Open => {
                let _ = queue.send(Job::Entry(outgoing));
            }
            State::Dropped => {}
        }
    }
}

/// A reader following a stream ([`Taps::follow`]).
pub(super) struct Following {
    taps: Arc<Taps>,
    correlation_id: String,
}

impl Drop for Following {
    fn drop(&mut self) {
        let mut inner = lock(&self.taps.inner);
        if let Some(count) = inner.followed.get_mut(&self.correlation_id) {
            *count -= 1;
            if *count == 0 {
                inner.followed.remove(&self.correlation_id);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Entry, Job, Outgoing};
    use super::{lock, Taps};
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::sync::mpsc;

    fn entry(text: Option<&str>) -> Outgoing {
        Outgoing {
            correlation_id: "run".into(),
            attempt: 1,
            entry: text.map_or(Entry::Complete, |t| Entry::Chunk(t.into())),
        }
    }

    fn queued(jobs: &mut mpsc::UnboundedReceiver<Job>) -> Vec<Entry> {
        let mut out = Vec::new();
        while let Ok(Job::Entry(outgoing)) = jobs.try_recv() {
            out.push(outgoing.entry);
        }
        out
    }

    #[test]
    fn a_run_nobody_follows_queues_nothing_and_is_forgotten() {
        let (queue, mut jobs) = mpsc::unbounded_channel();
        let taps = Arc::new(Taps::new(Duration::from_secs(3600)));
        let held = taps.begin("run").expect("held");
        held.push(&taps, entry(Some("a")), &queue);
        held.push(&taps, entry(None), &queue);
        assert!(queued(&mut jobs).is_empty());
        assert!(!taps.release("run", &queue), "nothing left to write");
    }

    #[test]
    fn a_reader_mid_run_gets_what_was_held_first_then_the_rest_in_order() {
        let (queue, mut jobs) = mpsc::unbounded_channel();
        let taps = Arc::new(Taps::new(Duration::from_secs(3600)));
        let held = taps.begin("run").expect("held");
        held.push(&taps, entry(Some("a")), &queue);
        held.push(&taps, entry(Some("b")), &queue);
        let following = taps.follow("run", &queue);
        held.push(&taps, entry(Some("c")), &queue);
        held.push(&taps, entry(None), &queue);
        let chunk = |t: &str| Entry::Chunk(t.into());
        assert_eq!(
            queued(&mut jobs),
            vec![chunk("a"), chunk("b"), chunk("c"), Entry::Complete]
        );
        // While followed, a new execution writes through.
        assert!(taps.begin("run").is_none());
        drop(following);
        assert!(taps.begin("run").is_some());
    }

    #[test]
    fn a_run_kept_while_it_waits_writes_its_next_execution_through() {
        let (queue, mut jobs) = mpsc::unbounded_channel();
        let taps = Arc::new(Taps::new(Duration::from_secs(3600)));
        let held = taps.begin("run").expect("held");
        held.push(&taps, entry(Some("a")), &queue);
        taps.keep("run", &queue);
        assert_eq!(queued(&mut jobs), vec![Entry::Chunk("a".into())]);
        assert!(taps.begin("run").is_none(), "kept: written through");
        taps.ended("run");
        assert!(taps.begin("run").is_some());
    }

    /// A run kept while it waits that never comes back here is forgotten
    /// once its stream's lifetime has passed (it was remembered for good).
    #[test]
    fn a_kept_run_that_never_ends_here_is_forgotten_after_its_streams_lifetime() {
        let (queue, _jobs) = mpsc::unbounded_channel();
        let taps = Arc::new(Taps::new(Duration::from_millis(50)));
        taps.keep("gone", &queue);
        taps.keep("again", &queue);
        assert!(taps.begin("gone").is_none(), "kept");
        std::thread::sleep(Duration::from_millis(60));
        taps.keep("again", &queue);
        assert!(taps.begin("gone").is_some(), "forgotten: held again");
        assert!(taps.begin("again").is_none(), "kept anew: still kept");
        let inner = lock(&taps.inner);
        assert_eq!(inner.kept.len(), 1);
        assert_eq!(inner.kept_at.len(), 1);
    }
}
