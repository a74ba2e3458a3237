//! Host bindings of the optional `orchestration-inputs` export, bound apart
//! from the component's world so that a component without it still loads.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "orchestration-inputs-provider",
    exports: { default: async },
});

pub use exports::agenthost::host::orchestration_inputs::InputSchema;
