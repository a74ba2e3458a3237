//! Host bindings generated from `wit/` for the `agenthost-component` world.
//! Imports are trappable: `durable` suspends an orchestration by trapping out
//! of the guest (see `host/durable.rs`).

wasmtime::component::bindgen!({
    path: "../wit",
    world: "agenthost-component",
    imports: { default: trappable },
    exports: { default: async },
});

pub use exports::agenthost::host::component::{ActivityError, Manifest};
