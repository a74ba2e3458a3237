//! Work handed out by the thousand (a commit's fan-out, a scheduler pass's
//! due tasks) started a chunk at a time.
//!
//! Each task or instance runs in a task of its own on the async runtime, and
//! a task spawned is ready at once: its first poll only finds out it must
//! wait (for its component's slots, for a runner). Spawned together, an
//! instance's 5,000 activities filled the runtime's shared queue, which is
//! first come, first served, and every task woken from outside the runtime
//! queued behind them there, each write's answer from the store's writer
//! thread among them: another tenant's agent run waited for the whole
//! fan-out (2.2 s, debug build, 5,000 activities). A chunk at a time, with
//! a yield between, the queue holds one chunk and what was woken meanwhile.

/// Started before each yield.
const AT_ONCE: usize = 64;

/// Calls `start` on each of `items`, [`AT_ONCE`] at a time, yielding to the
/// runtime between chunks.
pub(super) async fn each<T>(items: impl IntoIterator<Item = T>, mut start: impl FnMut(T)) {
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        items.by_ref().take(AT_ONCE).for_each(&mut start);
        if items.peek().is_some() {
            tokio::task::yield_now().await;
        }
    }
}

/// Whether `count` items fit in one chunk (started at once, without a task
/// of their own to pace them).
pub(super) fn one_chunk(count: usize) -> bool {
    count <= AT_ONCE
}
