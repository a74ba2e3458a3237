//! Test support: the real `agenthost` binary, the sample components built by
//! `make components`, and a fake model server speaking the OpenAI wire format.

#![allow(dead_code)]

pub mod fake_model;
pub mod host;

pub use fake_model::{FakeModel, Reply};
pub use host::HostBuilder;

use std::path::PathBuf;

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `target/components/NAME.wasm`, built once per test run by `make components`.
pub fn component(name: &str) -> PathBuf {
    let path = workspace()
        .join("target/components")
        .join(format!("{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing: run `make components` (or `make test`, which builds them first)",
        path.display()
    );
    path
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .expect("reqwest client")
}
