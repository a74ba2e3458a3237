//! schemathesis (installed by `make test` into target/schemathesis-venv)
//! fuzzes every operation of `/api/openapi.json` on a host with endpoint
//! keys: no answer may be a 5xx, and every answer must match the document
//! (its status, content type and body schema).

use std::process::Command;

use serde_json::{json, Value};

use crate::support::{client, workspace, FakeModel, HostBuilder};

const ADMIN: &str = "admin-key-for-the-fuzzer-0123456789";

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_no_server_error_and_no_answer_outside_the_document() {
    let st = workspace().join("target/schemathesis-venv/bin/st");
    assert!(
        st.exists(),
        "{} is missing: `make test` installs it (or `make api-fuzz-venv`)",
        st.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "weather", "orchestration-tests"])
        .openai(&model, "sk-test")
        .arg("--api-key")
        .arg(&format!("admin:{ADMIN}"))
        .start();
    let schema = host.url("/api/openapi.json");
    let document: Value = client()
        .get(&schema)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let operations = document["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|item| item.as_object().into_iter().flat_map(|o| o.keys()))
        .filter(|key| ["get", "post", "put", "delete", "patch"].contains(&key.as_str()))
        .count();
    // The document names any agent; the fuzzer is handed the served ones,
    // so that it reaches past "agent not found" into each route's own
    // answers (the A2A binding's errors among them).
    let mut served = document.clone();
    for (path, item) in served["paths"].as_object_mut().unwrap() {
        let names: &[&str] = if path.starts_with("/a2a/{agent}") {
            &["writer"]
        } else if path.starts_with("/api/agents/{name}") {
            &["writer", "weather"]
        } else {
            continue;
        };
        for operation in item.as_object_mut().unwrap().values_mut() {
            for parameter in operation["parameters"].as_array_mut().into_iter().flatten() {
                if parameter["in"] == "path"
                    && ["agent", "name"].contains(&parameter["name"].as_str().unwrap_or_default())
                {
                    parameter["schema"] = json!({"type": "string", "enum": names});
                }
            }
        }
    }
    let served_file = dir.path().join("openapi.json");
    std::fs::write(&served_file, serde_json::to_vec(&served).unwrap()).unwrap();
    let base = host.base.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(st)
            .current_dir(dir.path())
            .args(["run", served_file.to_str().unwrap(), "--url", &base])
            .args(["--header", &format!("Authorization: Bearer {ADMIN}")])
            .args([
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
            ])
            // The coverage phase crashes inside hypothesis on this Python
            // (an AST recursion error while describing a lambda).
            .args(["--phases", "examples,fuzzing"])
            .args(["--max-examples", "25", "--workers", "2", "--seed", "19"])
            .env("NO_COLOR", "1")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "schemathesis failed:\n{report}");
    // Every operation, the document's own included (it is read from a file).
    let count = |label: &str| {
        report
            .lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .and_then(|rest| rest.split('/').next())
            .and_then(|n| n.trim().parse::<usize>().ok())
    };
    assert_eq!(count("Selected:"), Some(operations), "{report}");
    assert_eq!(count("Tested:"), Some(operations), "{report}");
    assert!(!report.contains("panicked"), "{}", host.output());
}
