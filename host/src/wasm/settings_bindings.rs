//! Host bindings of the optional `agent-settings` export, bound apart from
//! the component's world so that a component without it still loads.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "agent-settings-provider",
    exports: { default: async },
});

pub use exports::agenthost::host::agent_settings::Settings;
