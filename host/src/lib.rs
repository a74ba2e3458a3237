//! `agenthost`: hosts AI agents as sandboxed WebAssembly components.
//!
//! Data flows one way: HTTP → registry lookup → runs/agents → store. The store
//! never calls up; guests reach the host only through their imports.

pub(crate) mod agents;
pub mod cli;
pub mod client;
pub mod client_cli;
pub(crate) mod core;
pub(crate) mod durable;
pub mod embed;
pub(crate) mod http;
pub(crate) mod metrics;
pub(crate) mod model;
pub(crate) mod registry;
pub(crate) mod runs;
pub mod runtime;
pub mod server;
pub(crate) mod store;
pub(crate) mod streams;
pub mod taskhub;
pub mod telemetry;
pub(crate) mod workers;
