//! A components directory with broken files still serves the good ones.

use serde_json::Value;

use crate::support::host::test_artifact_cache;
use crate::support::{client, component, get_json, HostBuilder};

#[tokio::test(flavor = "multi_thread")]
async fn broken_files_are_reported_and_the_good_components_served() {
    let dir = tempfile::tempdir().unwrap();
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::write(components.join("garbage.wasm"), b"this is not wasm").unwrap();
    let bytes = std::fs::read(component("writer")).unwrap();
    std::fs::write(components.join("truncated.wasm"), &bytes[..bytes.len() / 2]).unwrap();
    let host = HostBuilder::new(dir.path()).start();

    let health: Value = get_json(host.url("/api/health")).await;
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
    // Each error is one line, once (a parser's byte arrays included): the
    // line after a load error is the next log line.
    let lines: Vec<&str> = output.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.contains("component failed to load") {
            if let Some(next) = lines.get(i + 1) {
                assert!(
                    next.starts_with("20") || next.starts_with("agenthost "),
                    "a load error spilled over lines:\n{line}\n{next}"
                );
            }
        }
    }
    assert_eq!(
        output.matches("component failed to load").count(),
        2,
        "each broken file is reported once:\n{output}"
    );
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

#[tokio::test(flavor = "multi_thread")]
async fn api_components_lists_each_component_and_each_failure() {
    let dir = tempfile::tempdir().unwrap();
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::write(components.join("garbage.wasm"), b"not wasm").unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "weather", "spam"])
        .start();
    let body: Value = get_json(host.url("/api/components")).await;
    let listed = body["components"].as_array().unwrap();
    let names: Vec<&str> = listed.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["spam", "weather", "writer"]);
    let weather = &listed[1];
    assert!(weather["digest"].as_str().unwrap().starts_with("sha256:"));
    assert!(weather["file"].as_str().unwrap().ends_with("weather.wasm"));
    assert_eq!(weather["agents"][0]["name"], "weather");
    assert_eq!(
        weather["agents"][0]["tools"],
        serde_json::json!(["get_weather"])
    );
    assert_eq!(weather["activities"][0]["name"], "get_weather");
    assert_eq!(weather["activities"][0]["approval"], "never-require");
    assert_eq!(
        weather["activities"][0]["parameters"]["required"],
        serde_json::json!(["city"])
    );
    assert_eq!(
        weather["grants"],
        serde_json::json!({"allowed_hosts": [], "env": [], "memory_mb": 128,
                           "cpu_time_ms": 10000, "max_instances": null,
                           "log_lines_per_second": 200, "cpu_weight": 1}),
        "nothing is granted by default; the limits are the host's"
    );
    assert!(weather["load_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(listed[0]["orchestrations"][0]["name"], "spam");
    let failures = body["failures"].as_array().unwrap();
    assert_eq!(failures.len(), 1);
    assert!(failures[0]["file"]
        .as_str()
        .unwrap()
        .ends_with("garbage.wasm"));
    assert!(
        failures[0]["error"]
            .as_str()
            .unwrap()
            .contains("not a valid WebAssembly component"),
        "{body}"
    );
}

#[test]
fn inspect_prints_a_component_or_the_reason_it_does_not_load() {
    let ok = std::process::Command::new(env!("CARGO_BIN_EXE_agenthost"))
        .arg("inspect")
        .arg(component("weather"))
        .env("AGENTHOST_CACHE_DIR", test_artifact_cache())
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let description: Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(description["agents"][0]["name"], "weather");
    assert_eq!(description["activities"][0]["name"], "get_weather");

    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.wasm");
    std::fs::write(&broken, b"\0asm garbage").unwrap();
    let failed = std::process::Command::new(env!("CARGO_BIN_EXE_agenthost"))
        .arg("inspect")
        .arg(&broken)
        .env("AGENTHOST_CACHE_DIR", test_artifact_cache())
        .output()
        .unwrap();
    assert!(!failed.status.success());
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(
        stderr.contains("broken.wasm does not load")
            && stderr.contains("not a valid WebAssembly component"),
        "{stderr}"
    );
}
