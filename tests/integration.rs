//! Integration tests: the real `agenthost` binary over real HTTP, with the
//! sample components and a fake OpenAI-compatible model server. One binary,
//! one file per scenario.

mod a2a;
mod a2a_remote;
mod agent_runs;
mod api_fuzz;
mod approvals;
mod async_runs;
mod bounded_work;
mod chaos;
mod client_cli;
mod components_dir;
mod concurrency;
mod credentials;
mod dashboard;
mod determinism;
mod doc_blocks;
mod durable_engine;
mod embedding;
mod endpoint_keys;
mod hostile_input;
mod hot_reload;
mod languages;
mod long_threads;
mod management_api;
mod mcp;
mod model_endpoints;
mod newcomer;
mod observability;
mod orchestration_durability;
mod orchestration_samples;
mod outbound_rules;
mod request_errors;
mod restarts;
mod run_control;
mod sandbox;
mod scaffold;
mod session_contract;
mod sessions_ttl;
mod shared_hub;
mod shared_hub_faults;
mod store_faults;
mod streaming;
mod support;
mod task_hubs;
mod tools;
