//! What a store running orchestration code holds beyond a tool call's: the
//! instance, its replay, the journal's clock, and why the host may stop the
//! guest. A leaf of `wasm`: the store's state and the `durable` import
//! both use it, and it uses neither.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

use crate::core::replay::{Replay, ReplayError};

/// Why the host stopped a guest in the middle of an orchestration.
#[derive(Debug, thiserror::Error)]
pub enum Stop {
    #[error("the orchestration waits for a task")]
    Waiting,
    #[error(transparent)]
    Replay(#[from] ReplayError),
    #[error("durable functions are only available inside run-orchestration")]
    NotAnOrchestration,
    #[error("orchestration code waited on the clock (std::thread::sleep or another wait on wasi:clocks): the clock of an orchestration is its journal's, so it never advances while the code runs; wait with a durable timer (ctx.start_timer / create-timer), or do the waiting in an activity")]
    ClockWait,
    /// A value handed to the host that it will not store or run (a retry
    /// policy whose coefficient is not a number): the guest's own error.
    #[error("the orchestration code handed the host {0}")]
    Refused(String),
}

/// The orchestration a store is running: its id, its replay, and the clock the
/// guest's WASI sees.
pub struct OrchestrationScope {
    pub instance_id: String,
    pub replay: Replay,
    pub clock: StepClock,
}

/// WASI clocks for orchestrations: both read the replay's step time, so
/// `SystemTime::now()` and `Instant::now()` in guest code replay identically.
#[derive(Clone)]
pub struct StepClock(pub Arc<AtomicI64>);

impl HostWallClock for StepClock {
    fn resolution(&self) -> Duration {
        Duration::from_millis(1)
    }

    fn now(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.0.load(Ordering::Relaxed)).unwrap_or(0))
    }
}

impl HostMonotonicClock for StepClock {
    fn resolution(&self) -> u64 {
        1_000_000
    }

    fn now(&self) -> u64 {
        u64::try_from(self.0.load(Ordering::Relaxed))
            .unwrap_or(0)
            .saturating_mul(1_000_000)
    }
}
