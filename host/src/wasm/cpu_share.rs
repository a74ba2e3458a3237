//! Guest CPU shared between components, and with the host's own work.
//!
//! Guest code runs on the async runtime's worker threads, one epoch tick
//! (10 ms) at a time: at each tick the guest yields, and the runtime polls
//! whatever is ready next. Left to that, CPU goes to guest *calls*, not to
//! components, and not to the host: one component with a hundred activities
//! that compute held a hundred places in the run queue, every worker thread
//! ran their 10 ms slices back to back, and each hop of another component's
//! request (the HTTP handler, a commit's answer, the next episode) queued
//! behind them: a three-step orchestration took 2 s beside 100 of them.
//!
//! The gate hands out *runners*, one per worker thread by default
//! (`--guest-runners`). A guest call runs (is polled) only while it holds
//! one, and gives it back whenever it stops: at each tick, and whenever it
//! waits in a host call (a request, a sleep). A freed runner goes to the
//! component whose guest code is waiting and that holds the fewest runners
//! for its weight (the `cpu_weight` grant, 1 by default); of two holding as
//! many, the one served longer ago; within a component, its oldest waiter.
//!
//! A call that has run through a whole tick computes (an activity that
//! works, code that spins) rather than decides (an episode, a tool that
//! answers at once, both well under a tick). Calls that compute hold at
//! most all runners but one: one worker thread is never running a 10 ms
//! slice, and the host's own work, and every call that decides, goes on
//! there. Nothing else is held back: a component alone, or calls that
//! decide, use every runner, and no runner is left idle while a call that
//! may take it waits.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// Hands out the runners guest code runs with (see the module's doc).
pub(crate) struct CpuGate {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Runners no call holds.
    free: usize,
    /// Runners held by calls that compute, and how many they may hold.
    computing: usize,
    computing_cap: usize,
    /// Waiters a runner was handed to, not yet polled: whether each was
    /// counted as computing.
    granted: HashMap<u64, bool>,
    next_ticket: u64,
    /// Counts runners handed out: when each component last got one.
    handed: u64,
    shares: HashMap<Arc<str>, Share>,
}

/// One component's runners and waiters.
struct Share {
    weight: u32,
    running: usize,
    /// [`State::handed`] when it last got a runner: of two components
    /// holding as many, the one served longest ago goes first (a component
    /// that just gave a runner back must not get it straight back).
    served: u64,
    waiting: VecDeque<Waiter>,
}

struct Waiter {
    ticket: u64,
    computing: bool,
    waker: Waker,
}

/// A runner a call holds while it is polled.
#[derive(Clone, Copy)]
struct Held {
    computing: bool,
}

impl CpuGate {
    /// A gate with `runners` runners (at least one), all but one of which
    /// calls that compute may hold (at least one).
    pub(crate) fn new(runners: usize) -> Arc<Self> {
        let runners = runners.max(1);
        Arc::new(Self {
            state: Mutex::new(State {
                free: runners,
                computing_cap: (runners - 1).max(1),
                ..State::default()
            }),
        })
    }

    /// Runs `call`, a call into a guest of `component` whose CPU ticks so
    /// far `ticks` counts, polling it only while it holds a runner.
    pub(crate) fn run<F: Future>(
        self: &Arc<Self>,
        component: &str,
        weight: u32,
        ticks: Arc<AtomicU64>,
        call: F,
    ) -> Gated<F> {
        Gated {
            gate: self.clone(),
            component: component.into(),
            weight: weight.max(1),
            ticks,
            ticket: None,
            call: Box::pin(call),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is consistent between statements; a panic elsewhere
        // while it was held leaves nothing half-done worth refusing over.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes a runner for `component`, or queues `waker` for one.
    fn enter(
        &self,
        component: &Arc<str>,
        weight: u32,
        computing: bool,
        ticket: &mut Option<u64>,
        waker: &Waker,
    ) -> Option<Held> {
        let mut state = self.lock();
        if let Some(waiting) = *ticket {
            if let Some(computing) = state.granted.remove(&waiting) {
                *ticket = None;
                return Some(Held { computing });
            }
            if let Some(share) = state.shares.get_mut(component) {
                if let Some(queued) = share.waiting.iter_mut().find(|w| w.ticket == waiting) {
                    if !queued.waker.will_wake(waker) {
                        queued.waker.clone_from(waker);
                    }
                }
            }
            return None;
        }
        if state.free > 0 && (!computing || state.computing < state.computing_cap) {
            state.free -= 1;
            state.computing += usize::from(computing);
            state.handed += 1;
            let handed = state.handed;
            let share = state.share(component, weight);
            share.running += 1;
            share.served = handed;
            return Some(Held { computing });
        }
        let waiting = state.next_ticket;
        state.next_ticket += 1;
        state.share(component, weight).waiting.push_back(Waiter {
            ticket: waiting,
            computing,
            waker: waker.clone(),
        });
        *ticket = Some(waiting);
        None
    }

    /// Gives back `component`'s runner, handing it to the next waiter.
    fn leave(&self, component: &Arc<str>, held: Held) {
        let woken = {
            let mut state = self.lock();
            state.release(component, held);
            state.hand_on()
        };
        if let Some(waker) = woken {
            waker.wake();
        }
    }

    /// A waiter that will not be polled again: out of the queue, and a
    /// runner handed to it already goes to the next.
    fn abandon(&self, component: &Arc<str>, ticket: u64) {
        let woken = {
            let mut state = self.lock();
            if let Some(computing) = state.granted.remove(&ticket) {
                state.release(component, Held { computing });
                state.hand_on()
            } else {
                if let Some(share) = state.shares.get_mut(component) {
                    share.waiting.retain(|w| w.ticket != ticket);
                }
                state.forget_idle(component);
                None
            }
        };
        if let Some(waker) = woken {
            waker.wake();
        }
    }

    #[cfg(test)]
    fn running(&self, component: &str) -> usize {
        self.lock().shares.get(component).map_or(0, |s| s.running)
    }
}

impl State {
    fn share(&mut self, component: &Arc<str>, weight: u32) -> &mut Share {
        let share = self.shares.entry(component.clone()).or_insert(Share {
            weight,
            running: 0,
            served: 0,
            waiting: VecDeque::new(),
        });
        // A reload may change the grant: the latest caller's weight holds.
        share.weight = weight;
        share
    }

    fn release(&mut self, component: &Arc<str>, held: Held) {
        if let Some(share) = self.shares.get_mut(component) {
            share.running = share.running.saturating_sub(1);
        }
        if held.computing {
            self.computing = self.computing.saturating_sub(1);
        }
        self.free += 1;
    }

    /// Hands a free runner to the waiting component furthest below its
    /// share (fewest runners for its weight; on a tie, the one served
    /// longest ago, then the one waiting longest), its first waiter that
    /// may take it (a call that computes only while fewer than the cap
    /// compute), or keeps it free. Returns the waker to wake, outside the
    /// lock.
    fn hand_on(&mut self) -> Option<Waker> {
        if self.free == 0 {
            return None;
        }
        let computing_may = self.computing < self.computing_cap;
        let next = self
            .shares
            .iter()
            .filter_map(|(name, share)| {
                let at = share
                    .waiting
                    .iter()
                    .position(|w| computing_may || !w.computing)?;
                let ticket = share.waiting[at].ticket;
                Some((
                    name.clone(),
                    share.running,
                    share.weight,
                    share.served,
                    ticket,
                    at,
                ))
            })
            .min_by(|a, b| {
                // a.running / a.weight against b.running / b.weight.
                let left = a.1 as u128 * u128::from(b.2);
                let right = b.1 as u128 * u128::from(a.2);
                left.cmp(&right).then(a.3.cmp(&b.3)).then(a.4.cmp(&b.4))
            });
        let Some((name, .., at)) = next else {
            // Nobody may take it: drop the entries of idle components.
            self.shares
                .retain(|_, s| s.running > 0 || !s.waiting.is_empty());
            return None;
        };
        let share = self.shares.get_mut(&name)?;
        let waiter = share.waiting.remove(at)?;
        self.handed += 1;
        share.running += 1;
        share.served = self.handed;
        self.free -= 1;
        self.computing += usize::from(waiter.computing);
        self.granted.insert(waiter.ticket, waiter.computing);
        Some(waiter.waker)
    }

    fn forget_idle(&mut self, component: &Arc<str>) {
        if self
            .shares
            .get(component)
            .is_some_and(|s| s.running == 0 && s.waiting.is_empty())
        {
            self.shares.remove(component);
        }
    }
}

/// A guest call polled only while it holds a runner ([`CpuGate::run`]).
pub(crate) struct Gated<F> {
    gate: Arc<CpuGate>,
    component: Arc<str>,
    weight: u32,
    /// The call's CPU ticks so far: from its first whole tick, it computes.
    ticks: Arc<AtomicU64>,
    /// Set while queued for a runner.
    ticket: Option<u64>,
    call: Pin<Box<F>>,
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let computing = this.ticks.load(Ordering::Relaxed) > 0;
        let Some(held) = this.gate.enter(
            &this.component,
            this.weight,
            computing,
            &mut this.ticket,
            cx.waker(),
        ) else {
            return Poll::Pending;
        };
        let polled = this.call.as_mut().poll(cx);
        this.gate.leave(&this.component, held);
        polled
    }
}

impl<F> Drop for Gated<F> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.gate.abandon(&self.component, ticket);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIGHT: Held = Held { computing: false };

    /// The ticks of a call that has not computed.
    fn idle() -> Arc<AtomicU64> {
        Arc::new(AtomicU64::new(0))
    }
    use std::sync::atomic::AtomicUsize;
    use std::task::Wake;

    /// Counts its wakes.
    #[derive(Default)]
    struct Counter(AtomicUsize);

    impl Wake for Counter {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A call that is pending until `ready` is set, counting its polls.
    struct Step {
        polls: Arc<AtomicUsize>,
        ready: Arc<std::sync::atomic::AtomicBool>,
    }

    impl Future for Step {
        type Output = ();
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.ready.load(Ordering::SeqCst) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    fn step() -> (Step, Arc<AtomicUsize>, Arc<std::sync::atomic::AtomicBool>) {
        let polls = Arc::new(AtomicUsize::new(0));
        let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
        (
            Step {
                polls: polls.clone(),
                ready: ready.clone(),
            },
            polls,
            ready,
        )
    }

    fn poll<F: Future>(f: &mut Pin<Box<Gated<F>>>, waker: &Arc<Counter>) -> Poll<F::Output> {
        let waker = Waker::from(waker.clone());
        f.as_mut().poll(&mut Context::from_waker(&waker))
    }

    #[test]
    fn a_call_runs_only_with_a_runner_and_gives_it_back_when_pending() {
        let gate = CpuGate::new(1);
        let (a, a_polls, _) = step();
        let (b, b_polls, b_ready) = step();
        let mut a = Box::pin(gate.run("a", 1, idle(), a));
        let mut b = Box::pin(gate.run("b", 1, idle(), b));
        let (wa, wb) = (Arc::new(Counter::default()), Arc::new(Counter::default()));
        assert!(poll(&mut a, &wa).is_pending());
        assert_eq!(a_polls.load(Ordering::SeqCst), 1);
        // A gave its runner back when it was pending: B gets it.
        b_ready.store(true, Ordering::SeqCst);
        assert!(poll(&mut b, &wb).is_ready());
        assert_eq!(b_polls.load(Ordering::SeqCst), 1);
        assert_eq!(gate.lock().free, 1);
    }

    /// One runner, component A with three calls queued and B with one
    /// arriving last: B is handed the next runner, ahead of A's queue.
    #[test]
    fn a_freed_runner_goes_to_the_component_holding_fewest_not_to_the_longest_queue() {
        let gate = CpuGate::new(1);
        let waker = Arc::new(Counter::default());
        let (hold, _, hold_ready) = step();
        let mut holder = Box::pin(gate.run("a", 1, idle(), hold));
        // Take the runner and keep it: enter without leaving, as a call
        // in the middle of its poll holds it.
        let mut ticket = None;
        assert!(gate
            .enter(
                &Arc::from("a"),
                1,
                false,
                &mut ticket,
                &Waker::from(waker.clone())
            )
            .is_some());
        let mut a_calls: Vec<_> = (0..3)
            .map(|_| {
                let (s, _, ready) = step();
                ready.store(true, Ordering::SeqCst);
                Box::pin(gate.run("a", 1, idle(), s))
            })
            .collect();
        for call in &mut a_calls {
            assert!(poll(call, &waker).is_pending(), "queued: no runner free");
        }
        let (b, b_polls, b_ready) = step();
        b_ready.store(true, Ordering::SeqCst);
        let mut b = Box::pin(gate.run("b", 1, idle(), b));
        assert!(poll(&mut b, &waker).is_pending());
        // A's held runner comes back: B (holding none) gets it, not A's
        // oldest waiter (A would then hold it again).
        gate.leave(&Arc::from("a"), LIGHT);
        assert_eq!(gate.running("b"), 1);
        assert!(poll(&mut b, &waker).is_ready());
        assert_eq!(b_polls.load(Ordering::SeqCst), 1);
        // Then A's waiters, oldest first, one at a time.
        assert!(poll(&mut a_calls[1], &waker).is_pending(), "not its turn");
        assert!(poll(&mut a_calls[0], &waker).is_ready());
        hold_ready.store(true, Ordering::SeqCst);
        drop(a_calls);
        assert!(poll(&mut holder, &waker).is_ready());
        assert_eq!(gate.lock().free, 1, "every runner came back");
        assert!(gate.lock().shares.is_empty());
    }

    #[test]
    fn weights_share_runners_in_proportion() {
        let gate = CpuGate::new(3);
        let waker = Waker::from(Arc::new(Counter::default()));
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        let mut tickets = Vec::new();
        // Every runner taken by A, then both queue many calls.
        for _ in 0..3 {
            let mut t = None;
            assert!(gate.enter(&a, 1, false, &mut t, &waker).is_some());
        }
        for _ in 0..6 {
            let mut t = None;
            assert!(gate.enter(&a, 1, false, &mut t, &waker).is_none());
            let mut u = None;
            assert!(gate.enter(&b, 2, false, &mut u, &waker).is_none());
            tickets.push(u);
        }
        // As A's runners come back, B (weight 2) gets them until it holds
        // two for A's one.
        gate.leave(&a, LIGHT);
        gate.leave(&a, LIGHT);
        assert_eq!((gate.running("a"), gate.running("b")), (1, 2));
        gate.leave(&a, LIGHT);
        assert_eq!(
            (gate.running("a"), gate.running("b")),
            (1, 2),
            "A's turn: 0/1 < 2/2"
        );
    }

    #[test]
    fn a_call_dropped_while_queued_or_handed_a_runner_loses_no_runner() {
        let gate = CpuGate::new(1);
        let waker = Arc::new(Counter::default());
        let a: Arc<str> = Arc::from("a");
        let mut t = None;
        assert!(gate
            .enter(&a, 1, false, &mut t, &Waker::from(waker.clone()))
            .is_some());
        let (s1, _, _) = step();
        let (s2, _, _) = step();
        let mut first = Box::pin(gate.run("b", 1, idle(), s1));
        let mut second = Box::pin(gate.run("c", 1, idle(), s2));
        assert!(poll(&mut first, &waker).is_pending());
        assert!(poll(&mut second, &waker).is_pending());
        // The runner is handed to `first` (woken), which is dropped (its
        // timeout fired) before it runs: it goes on to `second`.
        gate.leave(&a, LIGHT);
        assert_eq!(waker.0.load(Ordering::SeqCst), 1);
        drop(first);
        assert_eq!(waker.0.load(Ordering::SeqCst), 2);
        assert_eq!(gate.running("c"), 1);
        drop(second);
        assert_eq!(gate.lock().free, 1);
        assert!(
            gate.lock().shares.is_empty() || gate.lock().shares.values().all(|s| s.running == 0)
        );
    }

    /// Two runners: calls that compute hold one at most, whatever their
    /// number; a call that decides gets the other at once, and takes a
    /// runner ahead of the queue of calls that compute.
    #[test]
    fn calls_that_compute_leave_one_runner_to_the_rest() {
        let gate = CpuGate::new(2);
        let waker = Waker::from(Arc::new(Counter::default()));
        let a: Arc<str> = Arc::from("a");
        let b: Arc<str> = Arc::from("b");
        let mut t = None;
        let computing = gate.enter(&a, 1, true, &mut t, &waker);
        assert!(computing.is_some_and(|h| h.computing));
        let mut queued = None;
        assert!(
            gate.enter(&a, 1, true, &mut queued, &waker).is_none(),
            "the cap"
        );
        assert_eq!(gate.lock().free, 1, "a runner stays free");
        let mut light = None;
        let decided = gate.enter(&b, 1, false, &mut light, &waker);
        assert!(decided.is_some());
        gate.leave(&b, LIGHT);
        assert_eq!(gate.lock().free, 1, "not handed to the call that computes");
        if let Some(held) = computing {
            gate.leave(&a, held);
        }
        assert_eq!(gate.running("a"), 1, "the queued one got it");
        assert!(gate.enter(&a, 1, true, &mut queued, &waker).is_some());
    }
}
