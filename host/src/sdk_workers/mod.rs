//! Durable Task SDK workers connected to this host (over the gRPC edge's
//! `GetWorkItems` stream), and what they run for the hub: the episodes of
//! orchestrations written with an SDK (see [`crate::core::sdk_history`]),
//! and activities no component serves, which any orchestration, wasm or
//! SDK, calls by name. A worker's answer comes back as the episode's or
//! the task's outcome, through the same store path as a wasm one's.
//!
//! Only what is in flight lives here, never what is owed: the inbox row or
//! the task row stays in the store until its outcome is committed, so a
//! worker that goes away (its stream ends), abandons an item, or does not
//! answer in time only makes the episode or the task run again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Notify};

mod items;

pub use items::{
    ActivityItem, Answer, Capacity, EntityAnswer, EntityItem, EpisodeAnswer, EpisodeItem, Item,
    Patience, Reply, Runs,
};

/// A worker's stream of items; dropping it disconnects the worker and gives
/// back what it was running.
pub struct Connection {
    pub items: mpsc::Receiver<Item>,
    id: u64,
    workers: Arc<SdkWorkers>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.workers.disconnect(self.id);
    }
}

struct Worker {
    items: mpsc::Sender<Item>,
    /// Items sent and not answered: the least busy worker gets the next.
    in_flight: usize,
    /// The same, by kind ([`Wanted::kind`]), against the worker's capacity.
    busy: [usize; 3],
    runs: Runs,
}

/// What an item asks a worker to run, to choose one that runs it.
#[derive(Clone, Copy)]
enum Wanted<'a> {
    Activity(&'a str),
    /// An episode of the orchestration `name`, of the instance's `version`.
    Orchestration {
        name: &'a str,
        version: Option<&'a str>,
    },
    Entity(&'a str),
}

impl Wanted<'_> {
    /// Which of a worker's three capacities the item takes from.
    fn kind(self) -> usize {
        match self {
            Wanted::Activity(_) => 0,
            Wanted::Orchestration { .. } => 1,
            Wanted::Entity(_) => 2,
        }
    }

    /// Whether `reply` is the kind of answer this item asks for; one of
    /// another kind gives the item back (it runs again).
    fn answered_by(self, reply: &Reply) -> bool {
        let fits = matches!(
            (self, reply),
            (Wanted::Activity(_), Reply::Activity(_))
                | (Wanted::Orchestration { .. }, Reply::Episode(_))
                | (Wanted::Entity(_), Reply::Entity(_))
        );
        if !fits {
            tracing::warn!("an SDK worker answered an item with an answer of another kind; the item runs again");
        }
        fits
    }
}

impl Worker {
    fn runs(&self, wanted: Wanted<'_>) -> bool {
        let (names, name) = match wanted {
            Wanted::Activity(name) => (&self.runs.activities, name),
            Wanted::Orchestration { name, version } => {
                // A filter that lists versions runs those alone: an
                // instance of another version, or of none, waits for a
                // worker that runs it (the protocol's strict matching).
                return self.runs.orchestrations.as_ref().is_none_or(|filters| {
                    filters
                        .iter()
                        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                        .any(|(_, versions)| {
                            versions.is_empty()
                                || version.is_some_and(|v| versions.iter().any(|w| w == v))
                        })
                });
            }
            Wanted::Entity(name) => (&self.runs.entities, name),
        };
        // The SDKs register entity names in lower case.
        names
            .as_ref()
            .is_none_or(|n| n.contains(name) || n.iter().any(|n| n.eq_ignore_ascii_case(name)))
    }

    /// Whether it has room for one more item like `wanted`.
    fn has_room(&self, wanted: Wanted<'_>) -> bool {
        let capacity = match wanted {
            Wanted::Activity(_) => self.runs.capacity.activities,
            Wanted::Orchestration { .. } => self.runs.capacity.episodes,
            Wanted::Entity(_) => self.runs.capacity.entities,
        };
        capacity.is_none_or(|most| self.busy[wanted.kind()] < most)
    }
}

/// Where an item can go now.
enum Choice {
    Sent(mpsc::Sender<Item>),
    /// Workers that run it are connected, each at its capacity.
    Busy,
    /// No connected worker runs it.
    Absent,
}

struct InFlight {
    worker: u64,
    kind: usize,
    answer: oneshot::Sender<Reply>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    workers: HashMap<u64, Worker>,
    in_flight: HashMap<String, InFlight>,
    /// The host is stopping: no worker connects, none is sent anything.
    closed: bool,
}

/// The connected workers and their items in flight; one per host.
pub struct SdkWorkers {
    inner: Mutex<Inner>,
    /// Told when a worker connects or goes away and when an item is
    /// settled, for the items waiting for a worker or for room on one.
    changed: Notify,
    patience: Patience,
}

/// Items a worker may have queued on its stream before a send waits: the
/// SDKs run items concurrently and answer each on its own call.
const STREAM_BUFFER: usize = 256;

/// Takes an item off the books when its wait ends in any way (answered,
/// timed out, or the waiting task dropped at shutdown).
struct Booked<'a> {
    workers: &'a SdkWorkers,
    token: String,
}

impl Drop for Booked<'_> {
    fn drop(&mut self) {
        self.workers.settle(&self.token);
    }
}

impl SdkWorkers {
    pub fn new(patience: Patience) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::default(),
            changed: Notify::new(),
            patience,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Nothing panics while holding it; a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a worker that runs what `runs` says; its items arrive on
    /// the connection. `None` once the host is stopping.
    pub fn connect(self: &Arc<Self>, runs: Runs) -> Option<Connection> {
        let (items, receiver) = mpsc::channel(STREAM_BUFFER);
        let mut inner = self.lock();
        if inner.closed {
            return None;
        }
        inner.next_id += 1;
        let id = inner.next_id;
        inner.workers.insert(
            id,
            Worker {
                items,
                in_flight: 0,
                busy: [0; 3],
                runs,
            },
        );
        tracing::info!(
            worker = id,
            workers = inner.workers.len(),
            "an SDK worker connected"
        );
        drop(inner);
        self.changed.notify_waiters();
        Some(Connection {
            items: receiver,
            id,
            workers: self.clone(),
        })
    }

    fn disconnect(&self, id: u64) {
        let mut inner = self.lock();
        if inner.workers.remove(&id).is_none() {
            return;
        }
        // Their senders dropped: each waiting task hears `Abandoned`.
        inner.in_flight.retain(|_, item| item.worker != id);
        tracing::info!(
            worker = id,
            workers = inner.workers.len(),
            "an SDK worker disconnected; what it ran runs again"
        );
        drop(inner);
        // Items waiting for room on it wait for a worker again.
        self.changed.notify_waiters();
    }

    /// The host stops: every worker's stream ends (so the gRPC server can
    /// stop), what they ran runs again at the next start, none connects.
    pub fn close(&self) {
        let mut inner = self.lock();
        inner.closed = true;
        inner.workers.clear();
        inner.in_flight.clear();
        drop(inner);
        // Activities waiting for a worker give up too.
        self.changed.notify_waiters();
    }

    /// Whether a connected worker runs orchestration `name` of `version`
    /// (busy or not).
    pub fn runs_orchestration(&self, name: &str, version: Option<&str>) -> bool {
        let wanted = Wanted::Orchestration { name, version };
        self.lock().workers.values().any(|w| w.runs(wanted))
    }

    /// Sends the activity to the least busy connected worker that runs it
    /// and waits for its answer, up to the patience for one. With no such
    /// worker connected it waits for one to connect, up to the patience for
    /// that; `None` when none came. Workers that run it but are at their
    /// declared capacity are waited for without bound (busy, not absent).
    pub async fn run_activity(
        &self,
        name: &str,
        input: &str,
        instance_id: &str,
        execution: i64,
        task_id: i32,
    ) -> Option<Answer> {
        let item = |token| {
            Item::Activity(ActivityItem {
                token,
                name: name.to_string(),
                input: input.to_string(),
                instance_id: instance_id.to_string(),
                execution,
                task_id,
            })
        };
        let patience = self.patience;
        let replied = self
            .dispatch(
                Wanted::Activity(name),
                item,
                patience.for_a_worker,
                patience.for_an_answer,
            )
            .await?;
        Some(match replied {
            Some(Reply::Activity(result)) => Answer::Done(result),
            _ => Answer::Abandoned,
        })
    }

    /// Sends an episode of orchestration `name` (of the instance's
    /// `version`) to the least busy worker that runs it and waits up to
    /// `for_an_answer`. Waits at most
    /// `for_a_worker` for one to connect (the scheduler offers the
    /// instance again later); `None` when none came. The episode gave its
    /// slot up before it asked (`durable/episode_slot.rs`).
    pub async fn run_episode(
        &self,
        name: &str,
        version: Option<&str>,
        item: EpisodeItem,
        for_a_worker: Duration,
        for_an_answer: Duration,
    ) -> Option<EpisodeAnswer> {
        let build = move |token| {
            let mut item = item;
            item.token = token;
            Item::Episode(item)
        };
        let replied = self
            .dispatch(
                Wanted::Orchestration { name, version },
                build,
                for_a_worker,
                for_an_answer,
            )
            .await?;
        Some(match replied {
            Some(Reply::Episode(answer)) => EpisodeAnswer::Done(answer),
            _ => EpisodeAnswer::Abandoned,
        })
    }

    /// Sends a batch of operations on entity `name` to the least busy
    /// worker that runs it and waits up to `for_an_answer`, as an episode;
    /// `None` when no such worker is connected.
    pub async fn run_entity(
        &self,
        name: &str,
        item: EntityItem,
        for_an_answer: Duration,
    ) -> Option<EntityAnswer> {
        let build = move |token| {
            let mut item = item;
            item.token = token;
            Item::Entity(item)
        };
        let replied = self
            .dispatch(Wanted::Entity(name), build, Duration::ZERO, for_an_answer)
            .await?;
        Some(match replied {
            Some(Reply::Entity(result)) => EntityAnswer::Done(result),
            _ => EntityAnswer::Abandoned,
        })
    }

    /// Books an item on the least busy worker that runs `wanted` and has
    /// room for it (waiting up to `for_a_worker` for one to connect, `None`
    /// when none came; for room on one, without bound),
    /// sends it and waits up to `for_an_answer` for the reply; `Some(None)`
    /// when it was given back, its worker went away or the time ran out.
    async fn dispatch(
        &self,
        wanted: Wanted<'_>,
        item: impl FnOnce(String) -> Item,
        for_a_worker: Duration,
        for_an_answer: Duration,
    ) -> Option<Option<Reply>> {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let (answer, answered) = oneshot::channel();
        let mut answer = Some(answer);
        // A worker that runs the item but is at its capacity is busy, not
        // absent: the item waits for room as long as it takes. The patience
        // for a worker counts from when none that runs it is connected.
        let mut absent_since = None;
        let sender = loop {
            // Listening before looking: a change in between is not missed.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if self.lock().closed {
                return Some(None);
            }
            match self.choose(wanted, &token, &mut answer) {
                Choice::Sent(sender) => break sender,
                Choice::Busy => {
                    absent_since = None;
                    changed.await;
                }
                Choice::Absent => {
                    let since = *absent_since.get_or_insert_with(tokio::time::Instant::now);
                    if tokio::time::timeout_at(since + for_a_worker, changed)
                        .await
                        .is_err()
                    {
                        return None;
                    }
                }
            }
        };
        let _booked = Booked {
            workers: self,
            token: token.clone(),
        };
        let item = item(token);
        let sent_and_answered = async move {
            // A send fails when the worker went away between the choice and
            // the send. The stream is not held past it: closing it must end
            // the worker's stream.
            let sent = sender.send(item).await;
            drop(sender);
            sent.ok()?;
            answered.await.ok()
        };
        match tokio::time::timeout(for_an_answer, sent_and_answered).await {
            Ok(replied) => Some(replied.filter(|reply| wanted.answered_by(reply))),
            Err(_) => {
                let what = match wanted {
                    Wanted::Activity(name) => format!("activity '{name}'"),
                    Wanted::Orchestration { name, .. } => format!("an episode of '{name}'"),
                    Wanted::Entity(name) => format!("operations on entity '{name}'"),
                };
                tracing::warn!(patience = ?for_an_answer, "an SDK worker did not answer in time ({what}); it is taken back and runs again");
                Some(None)
            }
        }
    }

    /// Books `token` on the least busy worker that runs `wanted` and has
    /// room for it: its stream. Otherwise (`answer` is then left for the
    /// next try) whether such workers are busy or absent.
    fn choose(
        &self,
        wanted: Wanted<'_>,
        token: &str,
        answer: &mut Option<oneshot::Sender<Reply>>,
    ) -> Choice {
        let mut inner = self.lock();
        let runs_it = inner.workers.values().any(|w| w.runs(wanted));
        let free = inner
            .workers
            .iter()
            .filter(|(_, w)| w.runs(wanted) && w.has_room(wanted))
            .min_by_key(|(_, w)| w.in_flight)
            .map(|(id, _)| *id);
        let Some(worker) = free else {
            return if runs_it {
                Choice::Busy
            } else {
                Choice::Absent
            };
        };
        let Some(answer) = answer.take() else {
            return Choice::Busy;
        };
        let kind = wanted.kind();
        let Some(chosen) = inner.workers.get_mut(&worker) else {
            return Choice::Busy;
        };
        chosen.in_flight += 1;
        chosen.busy[kind] += 1;
        let sender = chosen.items.clone();
        inner.in_flight.insert(
            token.to_string(),
            InFlight {
                worker,
                kind,
                answer,
            },
        );
        Choice::Sent(sender)
    }

    /// Takes the item `token` off the books; its sender, if it was still there.
    fn settle(&self, token: &str) -> Option<oneshot::Sender<Reply>> {
        let mut inner = self.lock();
        let item = inner.in_flight.remove(token)?;
        if let Some(worker) = inner.workers.get_mut(&item.worker) {
            worker.in_flight = worker.in_flight.saturating_sub(1);
            worker.busy[item.kind] = worker.busy[item.kind].saturating_sub(1);
        }
        drop(inner);
        // Room on its worker for an item waiting.
        self.changed.notify_waiters();
        Some(item.answer)
    }

    /// A worker's answer for `token`; false when nothing waits for it (an
    /// answer after a reconnect, a timeout or a second answer: the task has
    /// moved on).
    pub fn answer(&self, token: &str, reply: Reply) -> bool {
        match self.settle(token) {
            Some(waiting) => waiting.send(reply).is_ok(),
            None => false,
        }
    }

    /// The worker gives the item `token` back: it runs again. False when
    /// nothing waits for it.
    pub fn abandon(&self, token: &str) -> bool {
        // The dropped sender tells the waiting side.
        self.settle(token).is_some()
    }

    /// Items booked and not answered, on every worker (for tests).
    #[cfg(test)]
    fn in_flight(&self) -> usize {
        self.lock().in_flight.len()
    }
}

#[cfg(test)]
mod tests;
