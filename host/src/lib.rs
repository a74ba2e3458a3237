//! `agenthost`: hosts AI agents as sandboxed WebAssembly components.
//!
//! Data flows one way: HTTP → registry lookup → runs/agents → store. The store
//! never calls up; guests reach the host only through their imports.

pub mod agents;
pub mod cli;
pub mod core;
pub mod durable;
pub mod http;
pub mod model;
pub mod registry;
pub mod runs;
pub mod runtime;
pub mod server;
pub mod store;
pub mod workers;
