//! Durable Task SDK workers connected to this host (over the gRPC edge's
//! `GetWorkItems` stream), and the activities they run for the hub's
//! orchestrations: a wasm orchestration's call to an activity no component
//! serves goes to a connected worker, and its answer comes back as the
//! task's outcome, through the same store path as a wasm activity's.
//!
//! Only what is in flight lives here, never what is owed: the task row stays
//! in the store until its outcome is committed, so a worker that goes away
//! (its stream ends) or abandons an item only makes the task run again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Notify};

/// One activity for a worker to run.
#[derive(Debug, Clone)]
pub struct ActivityItem {
    /// Names this dispatch: the worker echoes it with its answer.
    pub token: String,
    pub name: String,
    /// JSON text.
    pub input: String,
    pub instance_id: String,
    /// The call's position in its instance: the protocol's task id.
    pub task_id: i32,
}

/// What became of a dispatched activity.
#[derive(Debug)]
pub enum Answer {
    /// The worker ran it: its JSON result, or why it failed.
    Done(Result<String, String>),
    /// The worker gave it back, or went away: it runs again later.
    Abandoned,
}

/// A worker's stream of items; dropping it disconnects the worker and gives
/// back what it was running.
pub struct Connection {
    pub items: mpsc::Receiver<ActivityItem>,
    id: u64,
    workers: Arc<SdkWorkers>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.workers.disconnect(self.id);
    }
}

struct Worker {
    items: mpsc::Sender<ActivityItem>,
    /// Items sent and not answered: the least busy worker gets the next.
    in_flight: usize,
}

struct InFlight {
    worker: u64,
    answer: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct Inner {
    next_id: u64,
    workers: HashMap<u64, Worker>,
    in_flight: HashMap<String, InFlight>,
}

/// The connected workers and their items in flight; one per host.
pub struct SdkWorkers {
    inner: Mutex<Inner>,
    /// Told when a worker connects, for the activities waiting for one.
    connected: Notify,
    /// How long an activity no component serves waits for a worker to
    /// connect before it fails: zero unless the gRPC endpoint is served.
    wait_for_worker: Duration,
}

/// Items a worker may have queued on its stream before a send waits: the
/// SDKs run items concurrently and answer each on its own call.
const STREAM_BUFFER: usize = 256;

impl SdkWorkers {
    pub fn new(wait_for_worker: Duration) -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::default(),
            connected: Notify::new(),
            wait_for_worker,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Nothing panics while holding it; a poisoned lock is still consistent.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a worker; its items arrive on the connection.
    pub fn connect(self: &Arc<Self>) -> Connection {
        let (items, receiver) = mpsc::channel(STREAM_BUFFER);
        let mut inner = self.lock();
        inner.next_id += 1;
        let id = inner.next_id;
        inner.workers.insert(
            id,
            Worker {
                items,
                in_flight: 0,
            },
        );
        tracing::info!(
            worker = id,
            workers = inner.workers.len(),
            "an SDK worker connected"
        );
        drop(inner);
        self.connected.notify_waiters();
        Connection {
            items: receiver,
            id,
            workers: self.clone(),
        }
    }

    fn disconnect(&self, id: u64) {
        let mut inner = self.lock();
        inner.workers.remove(&id);
        // Their senders dropped: each waiting task hears `Abandoned`.
        inner.in_flight.retain(|_, item| item.worker != id);
        tracing::info!(
            worker = id,
            workers = inner.workers.len(),
            "an SDK worker disconnected; what it ran runs again"
        );
    }

    /// Sends the activity to the least busy connected worker and waits for
    /// its answer. With no worker connected it waits up to the setting for
    /// one (a worker restarting, or not started yet); `None` when none came.
    pub async fn run_activity(
        &self,
        name: &str,
        input: &str,
        instance_id: &str,
        task_id: i32,
    ) -> Option<Answer> {
        let deadline = tokio::time::Instant::now() + self.wait_for_worker;
        let token = uuid::Uuid::new_v4().simple().to_string();
        let (answer, answered) = oneshot::channel();
        let mut answer = Some(answer);
        let sender = loop {
            // Listening before looking: a worker that connects in between
            // is not missed.
            let connected = self.connected.notified();
            tokio::pin!(connected);
            connected.as_mut().enable();
            if let Some(sender) = self.choose(&token, &mut answer) {
                break sender;
            }
            if tokio::time::timeout_at(deadline, connected).await.is_err() {
                return None;
            }
        };
        let item = ActivityItem {
            token: token.clone(),
            name: name.to_string(),
            input: input.to_string(),
            instance_id: instance_id.to_string(),
            task_id,
        };
        if sender.send(item).await.is_err() {
            // The worker went away between the choice and the send.
            self.settle(&token);
            return Some(Answer::Abandoned);
        }
        Some(answered.await.unwrap_or(Answer::Abandoned))
    }

    /// Books `token` on the least busy worker; its stream, or `None` when no
    /// worker is connected (`answer` is then left for the next try).
    fn choose(
        &self,
        token: &str,
        answer: &mut Option<oneshot::Sender<Answer>>,
    ) -> Option<mpsc::Sender<ActivityItem>> {
        let mut inner = self.lock();
        let worker = inner
            .workers
            .iter()
            .min_by_key(|(_, w)| w.in_flight)
            .map(|(id, _)| *id)?;
        let answer = answer.take()?;
        let chosen = inner.workers.get_mut(&worker)?;
        chosen.in_flight += 1;
        let sender = chosen.items.clone();
        inner
            .in_flight
            .insert(token.to_string(), InFlight { worker, answer });
        Some(sender)
    }

    /// Takes the item `token` off the books; its sender, if it was still there.
    fn settle(&self, token: &str) -> Option<oneshot::Sender<Answer>> {
        let mut inner = self.lock();
        let item = inner.in_flight.remove(token)?;
        if let Some(worker) = inner.workers.get_mut(&item.worker) {
            worker.in_flight = worker.in_flight.saturating_sub(1);
        }
        Some(item.answer)
    }

    /// A worker's answer for `token`; false when nothing waits for it (an
    /// answer after a reconnect or a second answer: the task has moved on).
    pub fn answer(&self, token: &str, answer: Answer) -> bool {
        match self.settle(token) {
            Some(waiting) => waiting.send(answer).is_ok(),
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_activity_goes_to_a_connected_worker_and_its_answer_comes_back() {
        let workers = SdkWorkers::new(Duration::ZERO);
        assert!(workers.run_activity("a", "1", "i", 1).await.is_none());
        let mut connection = workers.connect();
        let asking = {
            let workers = workers.clone();
            tokio::spawn(async move { workers.run_activity("greet", "\"x\"", "i", 3).await })
        };
        let item = connection.items.recv().await.expect("an item");
        assert_eq!((item.name.as_str(), item.task_id), ("greet", 3));
        assert!(workers.answer(&item.token, Answer::Done(Ok("\"hi\"".into()))));
        assert!(!workers.answer(&item.token, Answer::Done(Ok("again".into()))));
        let answer = asking.await.expect("joined");
        assert!(matches!(answer, Some(Answer::Done(Ok(ref s))) if s == "\"hi\""));
    }

    #[tokio::test]
    async fn a_worker_that_goes_away_gives_back_what_it_ran() {
        let workers = SdkWorkers::new(Duration::ZERO);
        let mut connection = workers.connect();
        let asking = {
            let workers = workers.clone();
            tokio::spawn(async move { workers.run_activity("slow", "null", "i", 1).await })
        };
        let item = connection.items.recv().await.expect("an item");
        drop(connection);
        assert!(matches!(
            asking.await.expect("joined"),
            Some(Answer::Abandoned)
        ));
        assert!(!workers.answer(&item.token, Answer::Done(Ok("late".into()))));
        assert!(
            workers.run_activity("b", "null", "i", 2).await.is_none(),
            "none left"
        );
    }

    #[tokio::test]
    async fn an_activity_waits_a_while_for_a_worker_to_connect() {
        let workers = SdkWorkers::new(Duration::from_secs(30));
        let asking = {
            let workers = workers.clone();
            tokio::spawn(async move { workers.run_activity("late", "null", "i", 1).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut connection = workers.connect();
        let item = connection
            .items
            .recv()
            .await
            .expect("an item once connected");
        assert!(workers.answer(&item.token, Answer::Done(Err("no".into()))));
        assert!(matches!(
            asking.await.expect("joined"),
            Some(Answer::Done(Err(_)))
        ));
        let impatient = SdkWorkers::new(Duration::from_millis(20));
        assert!(impatient.run_activity("x", "null", "i", 1).await.is_none());
    }
}
