//! Host bindings generated from `wit/` for the `agent-component` world.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "agent-component",
    exports: { default: async },
});

pub use exports::agenthost::host::component::{ActivityError, Manifest};
