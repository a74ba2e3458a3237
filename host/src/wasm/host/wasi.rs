//! WASI p2 with no ambient authority: linked whole so that ordinary Rust std
//! compiles and runs, while what each interface may reach (environment,
//! clocks, randomness; never arguments or preopened directories) is decided
//! by the `WasiCtx` each store is built with.

use wasmtime::component::Linker;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::GuestState;
use crate::wasm::orchestration_scope::Stop;

/// The guest's WASI context; its resources live in the store's shared table.
pub(crate) struct Wasi {
    pub ctx: WasiCtx,
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi.ctx,
            table: &mut self.table,
        }
    }
}

pub(super) fn link(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)
}

/// The interface whose waits an orchestration may not use.
const MONOTONIC_CLOCK: &str = "wasi:clocks/monotonic-clock@0.2.12";

/// Replaces the clock's waits (what `std::thread::sleep` compiles to) with a
/// trap, [`Stop::ClockWait`]. The orchestration's clock is the journal's
/// step time: a sleep could never end by itself, and would hold an episode
/// slot until the episode's wall-clock limit stopped it.
pub(super) fn refuse_clock_waits(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut clock = linker.instance(MONOTONIC_CLOCK)?;
    for wait in ["subscribe-duration", "subscribe-instant"] {
        clock.func_new_async(wait, |_store, _type, _params, _results| {
            Box::new(async { Err(wasmtime::Error::new(Stop::ClockWait)) })
        })?;
    }
    linker.allow_shadowing(false);
    Ok(())
}
