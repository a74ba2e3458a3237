//! What a guest can reach, one file per capability: each holds its own
//! state (only what was granted), links its interface with a closure to that
//! state, and implements the interface's `Host` trait. [`GuestState`] is the
//! sum of them for one store, and [`link`] links them all.
//!
//! | capability | file | state |
//! |---|---|---|
//! | WASI p2 (env, clocks, random; no files, no args) | `wasi.rs` | [`wasi::Wasi`] |
//! | outbound HTTP (`wasi:http`, per grant) | `outbound_http.rs` | [`outbound_http::Http`] |
//! | `agenthost:host/logging` | `logging.rs` | [`logging::Logging`] |
//! | `agenthost:host/durable` (orchestrations) | `durable.rs` | [`durable::Durable`] |
//! | memory and CPU limits | `memory.rs`, [`store_with`] | [`memory::MemoryLimit`] |

mod durable;
pub(crate) mod logging;
mod memory;
mod outbound_http;
mod wasi;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use sha2::{Digest, Sha256};
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder};
use wasmtime_wasi_http::WasiHttpCtx;

use super::bindings::agenthost::host::types;
use super::engine_tick::TICK;
use super::grants::Grants;
use super::orchestration_scope::{OrchestrationScope, StepClock};
use super::send_gate::{HeldFlag, SendGate};
use super::{error, LoadError};
use crate::core::replay::Replay;
use outbound_http::OutboundHttp;

/// The state of one store: one field per capability, and the resource
/// table WASI and `wasi:http` share.
pub struct GuestState {
    table: ResourceTable,
    wasi: wasi::Wasi,
    http: outbound_http::Http,
    logging: logging::Logging,
    pub(super) durable: durable::Durable,
    memory: memory::MemoryLimit,
    /// Epoch ticks the call has run through (its CPU time, in ticks), read
    /// by the CPU gate to tell calls that compute from calls that decide.
    ticks: Arc<AtomicU64>,
}

impl GuestState {
    pub fn hit_memory_limit(&self) -> bool {
        self.memory.was_hit()
    }

    /// Gates the store's outbound requests (see [`outbound_http`]); the
    /// flag says whether one was held back.
    pub(super) fn gate_outbound(&mut self, gate: SendGate) -> HeldFlag {
        self.http.hooks.gate(gate)
    }

    /// The ticks of CPU the current call has used so far.
    pub(super) fn ticks(&self) -> Arc<AtomicU64> {
        self.ticks.clone()
    }

    /// Writes none of the guest's log lines from now on.
    pub(super) fn mute_logs(&mut self) {
        self.logging.muted = true;
    }

    /// The orchestration the store ran, once its episode is over.
    pub(super) fn take_orchestration(&mut self) -> Option<OrchestrationScope> {
        self.durable.scope.take()
    }
}

/// The `types` interface has no functions; its trait only marks the state as
/// able to serve the world.
impl types::Host for GuestState {}

/// Links every import a guest may use.
pub fn link(linker: &mut Linker<GuestState>) -> Result<(), LoadError> {
    let engine_error = |e: wasmtime::Error| LoadError::Engine(error::describe(&e));
    wasi::link(linker).map_err(engine_error)?;
    outbound_http::link(linker).map_err(engine_error)?;
    types::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s).map_err(engine_error)?;
    logging::link(linker).map_err(engine_error)?;
    durable::link(linker).map_err(engine_error)?;
    Ok(())
}

/// Links the imports of orchestration code: as [`link`], except that a wait
/// on the clock traps at once (see [`wasi::refuse_clock_waits`]).
pub fn link_orchestration(linker: &mut Linker<GuestState>) -> Result<(), LoadError> {
    link(linker)?;
    wasi::refuse_clock_waits(linker).map_err(|e| LoadError::Engine(error::describe(&e)))
}

/// A store for one call: only what `grants` allow (never args or preopens),
/// memory capped, and CPU bounded by epoch ticks. The guest yields to the async
/// executor every tick so a busy guest cannot starve the host's other tasks.
pub fn new_store(engine: &Engine, component: &str, grants: &Arc<Grants>) -> Store<GuestState> {
    let outbound = OutboundHttp::granted(component, grants.clone());
    store_with(
        engine,
        component,
        grants,
        grants.limits.cpu_time,
        WasiCtx::builder(),
        outbound,
        None,
    )
}

/// A store for one episode of an orchestration: as [`new_store`], and the
/// guest's clocks read the journaled step time while its random numbers come
/// from a generator seeded by the instance id, so ordinary Rust (`SystemTime`,
/// `HashMap`, `rand`) replays identically. Outbound HTTP is refused whatever
/// the grants: only activities may reach the network.
pub fn new_orchestration_store(
    engine: &Engine,
    component: &str,
    grants: &Arc<Grants>,
    cpu_time: Duration,
    instance_id: &str,
    replay: Replay,
) -> Store<GuestState> {
    let clock = StepClock(Arc::new(std::sync::atomic::AtomicI64::new(
        replay.step_time(),
    )));
    let seed: [u8; 32] = Sha256::digest(instance_id.as_bytes()).into();
    let mut seed16 = [0u8; 16];
    seed16.copy_from_slice(&seed[..16]);
    let mut wasi = WasiCtx::builder();
    wasi.wall_clock(clock.clone())
        .monotonic_clock(clock.clone())
        .secure_random(StdRng::from_seed(seed))
        .insecure_random(StdRng::from_seed(seed))
        .insecure_random_seed(u128::from_le_bytes(seed16));
    let scope = OrchestrationScope {
        instance_id: instance_id.to_string(),
        replay,
        clock,
    };
    let outbound = OutboundHttp::refused(component);
    store_with(
        engine,
        component,
        grants,
        cpu_time,
        wasi,
        outbound,
        Some(scope),
    )
}

fn store_with(
    engine: &Engine,
    component: &str,
    grants: &Grants,
    cpu_time: Duration,
    mut wasi: WasiCtxBuilder,
    outbound: OutboundHttp,
    orchestration: Option<OrchestrationScope>,
) -> Store<GuestState> {
    let limits = grants.limits;
    wasi.envs(&grants.env);
    let state = GuestState {
        table: ResourceTable::new(),
        wasi: wasi::Wasi { ctx: wasi.build() },
        http: outbound_http::Http {
            ctx: WasiHttpCtx::new(),
            hooks: outbound,
        },
        logging: logging::Logging {
            component: component.into(),
            budget: grants.log_budget.clone(),
            muted: false,
        },
        durable: durable::Durable {
            scope: orchestration,
        },
        memory: memory::MemoryLimit::new(limits.memory_bytes),
        ticks: Arc::new(AtomicU64::new(0)),
    };
    let ticks = state.ticks.clone();
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.memory);
    let budget = (cpu_time.as_millis() / TICK.as_millis()).max(1) as u64;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        let used = ticks.fetch_add(1, Ordering::Relaxed) + 1;
        Ok(if used > budget {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Yield(1)
        })
    });
    store
}
