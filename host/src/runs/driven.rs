//! A session's worker driven by the caller that waits for its run, in the
//! caller's own task, until the caller stops waiting.
//!
//! A worker spawned as its own task costs a lone caller two hand-offs per
//! run: the spawn wakes an idle runtime thread, which steals it, and the
//! run's end wakes the caller's task across threads. A `writer` run at one
//! connection made 2.4 context switches, both runtime threads in each.
//! A caller that waits for the whole answer polls the worker itself, so the
//! run executes on the thread that reads and answers the request (by hand,
//! alternating builds: 3,373–3,615 → 3,681–3,813 runs/s at one connection).
//!
//! The run must not depend on the caller: a caller that stops waiting (its
//! budget spent, its connection gone and its request's future dropped)
//! hands the worker, as far as it got, to a task of its own. The worker is
//! counted by the runs' tracker from its start, so a drain waits for it
//! wherever it is polled.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_util::task::TaskTracker;

type Work = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A worker polled by its caller; spawned, as it stands, when dropped
/// before it ended.
pub(super) struct Driven {
    work: Option<Work>,
}

impl Driven {
    pub(super) fn new(
        tracker: &TaskTracker,
        work: impl Future<Output = ()> + Send + 'static,
    ) -> Self {
        Self {
            work: Some(Box::pin(tracker.track_future(work))),
        }
    }

    /// Whether the worker ended (nothing is left to hand over).
    pub(super) fn ended(&self) -> bool {
        self.work.is_none()
    }
}

impl Future for Driven {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Ready(());
        };
        match work.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.work = None;
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        if let Some(work) = self.work.take() {
            // Already counted by the tracker: spawned as it is. Outside a
            // runtime (the process is ending) nobody can take it: the run is
            // left as a killed host leaves it (a held run nothing, any other
            // as stored, resumed at the next start).
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(work);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// A worker whose caller stops polling it goes on in a task of its
    /// own, and the tracker counts it until it ends.
    #[tokio::test]
    async fn a_worker_dropped_before_its_end_goes_on_alone() {
        let tracker = TaskTracker::new();
        let (go, gate) = tokio::sync::oneshot::channel::<()>();
        let ended = Arc::new(AtomicBool::new(false));
        let flag = ended.clone();
        let mut driven = Driven::new(&tracker, async move {
            let _ = gate.await;
            flag.store(true, Ordering::SeqCst);
        });
        let polled = tokio::time::timeout(Duration::from_millis(20), &mut driven).await;
        assert!(polled.is_err(), "the worker waits for its gate");
        assert!(!driven.ended());
        drop(driven);
        tracker.close();
        assert_eq!(tracker.len(), 1, "the worker is still counted");
        go.send(()).ok();
        tokio::time::timeout(Duration::from_secs(10), tracker.wait())
            .await
            .expect("the handed-over worker ended");
        assert!(ended.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_worker_polled_to_its_end_leaves_nothing() {
        let tracker = TaskTracker::new();
        let mut driven = Driven::new(&tracker, async {});
        (&mut driven).await;
        assert!(driven.ended());
        drop(driven);
        tracker.close();
        assert!(tracker.is_empty());
    }
}
