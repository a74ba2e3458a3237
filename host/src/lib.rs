//! `agenthost`: hosts AI agents as sandboxed WebAssembly components.
//!
//! Data flows one way: the edge (`http`, `client`) asks a service (`runs`,
//! `durable`, `streams`, `health`, the `registry`); a service asks the `core`
//! what an event means, has the `store` commit the core's effects in one
//! transaction, and then acts on them (runs tasks, calls guests through
//! `wasm`, the model through `model`). Nothing calls up: the store imports
//! only the core, and guests reach the host only through the imports of
//! `wasm/host/`. docs/architecture.md has the layer table and where a new
//! route, WIT import, lifecycle transition or store write goes.

pub(crate) mod agents;
pub(crate) mod cli;
pub mod client;
pub(crate) mod core;
pub(crate) mod durable;
pub mod embed;
pub(crate) mod health;
#[cfg(test)]
mod house_rules;
pub(crate) mod http;
pub(crate) mod metrics;
pub(crate) mod model;
pub(crate) mod registry;
pub(crate) mod remote_agents;
pub(crate) mod runs;
pub(crate) mod sdk_workers;
pub(crate) mod server;
pub(crate) mod settings;
pub(crate) mod store;
pub(crate) mod streams;
pub(crate) mod taskhub;
pub(crate) mod telemetry;
/// The wasm runtime, public only to the benchmarks (`--features bench`):
/// not part of the library's API.
#[cfg(feature = "bench")]
#[doc(hidden)]
pub mod wasm;
#[cfg(not(feature = "bench"))]
pub(crate) mod wasm;
pub(crate) mod workers;

/// The `agenthost` command line: parses the arguments and runs the command
/// (serve, worker, client, inspect), logging and tracing as its flags say.
/// The binary is this one call, so the modules behind it stay private. Call
/// it first in `main`, before any other thread exists: it sets an
/// environment variable before starting its runtime.
pub fn run_command_line() -> std::process::ExitCode {
    cli::main()
}
