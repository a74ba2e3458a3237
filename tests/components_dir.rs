//! A components directory with broken files still serves the good ones.

use serde_json::Value;

use crate::support::{client, component, HostBuilder};

#[tokio::test(flavor = "multi_thread")]
async fn broken_files_are_reported_and_the_good_components_served() {
    let dir = tempfile::tempdir().unwrap();
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::write(components.join("garbage.wasm"), b"this is not wasm").unwrap();
    let bytes = std::fs::read(component("writer")).unwrap();
    std::fs::write(components.join("truncated.wasm"), &bytes[..bytes.len() / 2]).unwrap();
    let host = HostBuilder::new(dir.path()).start();

    let health: Value = client()
        .get(host.url("/api/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = health["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["weather", "writer"]);
    let output = host.output();
    for file in ["garbage.wasm", "truncated.wasm"] {
        assert!(
            output
                .lines()
                .any(|l| l.contains("component failed to load") && l.contains(file)),
            "no load error for {file}:\n{output}"
        );
    }
    assert_eq!(
        client()
            .post(host.url("/api/agents/weather/run"))
            .body("hi")
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}
