//! Per-instance guest state: WASI with no ambient authority, the logging
//! import, and the limits of one call.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::SeedableRng;
use sha2::{Digest, Sha256};
use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{Engine, ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::bindings::{agenthost::host::logging, AgenthostComponent};
use super::engine_tick::TICK;
use super::grants::Grants;
use super::orchestration_scope::{OrchestrationScope, StepClock, Stop};
use super::outbound::OutboundHttp;
use super::{error, LoadError};
use crate::core::replay::Replay;

pub struct GuestState {
    component: Arc<str>,
    wasi: WasiCtx,
    table: ResourceTable,
    memory: MemoryLimit,
    http: WasiHttpCtx,
    outbound: OutboundHttp,
    /// Set while the store runs an orchestration.
    pub(super) orchestration: Option<OrchestrationScope>,
}

impl GuestState {
    pub fn hit_memory_limit(&self) -> bool {
        self.memory.hit.load(Ordering::Relaxed)
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for GuestState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.outbound,
        }
    }
}

impl logging::Host for GuestState {
    fn log(&mut self, level: logging::Level, message: String) -> wasmtime::Result<()> {
        let component = &*self.component;
        match level {
            logging::Level::Trace => tracing::trace!(component, "{message}"),
            logging::Level::Debug => tracing::debug!(component, "{message}"),
            logging::Level::Info => tracing::info!(component, "{message}"),
            logging::Level::Warn => tracing::warn!(component, "{message}"),
            logging::Level::Error => tracing::error!(component, "{message}"),
        }
        Ok(())
    }
}

/// Links every import a guest may use. WASI is linked whole so that ordinary
/// Rust std compiles and runs; what each interface may reach is decided by the
/// `WasiCtx` built in [`new_store`].
pub fn link(linker: &mut Linker<GuestState>) -> Result<(), LoadError> {
    wasmtime_wasi::p2::add_to_linker_async(linker)
        .map_err(|e| LoadError::Engine(error::describe(&e)))?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)
        .map_err(|e| LoadError::Engine(error::describe(&e)))?;
    AgenthostComponent::add_to_linker::<_, HasSelf<GuestState>>(linker, |s| s)
        .map_err(|e| LoadError::Engine(error::describe(&e)))?;
    Ok(())
}

/// The interface whose waits an orchestration may not use.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Links the imports of orchestration code: as [`link`], except that a wait
/// on the clock (what `std::thread::sleep` compiles to) traps at once with
/// [`Stop::ClockWait`]. The orchestration's clock is the journal's step time:
/// a sleep could never end by itself, and would hold an episode slot until
/// the episode's wall-clock limit stopped it.
pub fn link_orchestration(linker: &mut Linker<GuestState>) -> Result<(), LoadError> {
    link(linker)?;
    let engine_error = |e: wasmtime::Error| LoadError::Engine(error::describe(&e));
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK).map_err(engine_error)?;
    for wait in ["subscribe-duration", "subscribe-instant"] {
        clock
            .func_new_async(wait, |_store, _type, _params, _results| {
                Box::new(async { Err(wasmtime::Error::new(Stop::ClockWait)) })
            })
            .map_err(engine_error)?;
    }
    linker.allow_shadowing(false);
    Ok(())
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
        component: component.into(),
        wasi: wasi.build(),
        table: ResourceTable::new(),
        memory: MemoryLimit {
            max: limits.memory_bytes,
            hit: Arc::new(AtomicBool::new(false)),
        },
        http: WasiHttpCtx::new(),
        outbound,
        orchestration,
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.memory);
    let budget = (cpu_time.as_millis() / TICK.as_millis()).max(1) as u64;
    let mut used = 0u64;
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        used += 1;
        Ok(if used > budget {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Yield(1)
        })
    });
    store
}

/// Refuses memory growth past the limit and remembers that it did, so the
/// caller can report "memory limit" rather than a bare trap.
struct MemoryLimit {
    max: usize,
    hit: Arc<AtomicBool>,
}

impl ResourceLimiter for MemoryLimit {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max {
            self.hit.store(true, Ordering::Relaxed);
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// The `types` interface has no functions; its trait only marks the state as
/// able to serve the world.
impl super::bindings::agenthost::host::types::Host for GuestState {}
