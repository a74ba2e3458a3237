//! Test support: the real `agenthost` binary, the sample components built by
//! `make components`, and a fake model server speaking the OpenAI wire format.

#![allow(dead_code)]

pub mod components;
pub mod durable;
pub mod fake_model;
pub mod host;
pub mod redis;
pub mod run_log;
pub mod sqlite_lock;
pub mod tcp_proxy;

pub use fake_model::{FakeModel, Reply};
pub use host::HostBuilder;

use std::path::PathBuf;

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `target/components/NAME.wasm` (a sample, built by `make components`) or
/// `target/test-components/NAME.wasm` (a test guest, built by `make test-components`).
/// `make test` builds both once per run.
/// The built component `name`: a sample or test guest, or `python/NAME`
/// and `js/NAME` for the samples' Python and JavaScript twins.
pub fn component(name: &str) -> PathBuf {
    if let Some((lang, name)) = name.split_once('/') {
        let path = workspace()
            .join(format!("target/components-{lang}"))
            .join(format!("{name}.wasm"));
        assert!(
            path.exists(),
            "component {} is missing: run `make language-components` (or `make test`, which builds them first)",
            path.display()
        );
        return path;
    }
    for dir in ["target/components", "target/test-components"] {
        let path = workspace().join(dir).join(format!("{name}.wasm"));
        if path.exists() {
            return path;
        }
    }
    panic!("component {name}.wasm is missing: run `make components test-components` (or `make test`, which builds them first)");
}

/// The Python of the virtualenv `target/{venv}` that `make test` (or
/// `make {venv}`) installs a protocol's client into.
pub fn venv_python(venv: &str) -> PathBuf {
    let python = workspace().join(format!("target/{venv}/bin/python"));
    assert!(
        python.exists(),
        "{} is missing: `make test` installs it (or `make {venv}`)",
        python.display()
    );
    python
}

/// Copies the folder `from` (its subfolders too) to `to`.
pub fn copy_folder(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_folder(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// A port free now, for a process started later (a host restarted on the
/// same address, a URL written into a config first). Chosen below the
/// kernel's ephemeral range (32768 and up on Linux), so that no listener
/// bound to port 0 and no outgoing connection of another test running at
/// the same time can take it in between, as one could a port the kernel
/// handed out.
pub fn free_port() -> u16 {
    for _ in 0..1000 {
        let port = 20_000 + (uuid::Uuid::new_v4().as_u128() % 12_000) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between 20000 and 32000");
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .expect("reqwest client")
}

/// The roles of a conversation's messages, in order, and the conversation
/// as read (`GET {base}/api/agents/{agent}/sessions/{session}`).
pub async fn session_roles(
    base: &str,
    agent: &str,
    session: &str,
) -> (Vec<String>, serde_json::Value) {
    let conversation: serde_json::Value = client()
        .get(format!("{base}/api/agents/{agent}/sessions/{session}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let roles = conversation["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter_map(|m| m["role"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    (roles, conversation)
}

/// Polls `GET {url}` (a run) until it is completed, failed or canceled.
pub async fn wait_run_finished(url: &str) -> serde_json::Value {
    wait_run_status(url, &["completed", "failed", "canceled"]).await
}

/// Polls `GET {url}` (a run) until its status is one of `statuses`, for
/// 20 s at most.
pub async fn wait_run_status(url: &str, statuses: &[&str]) -> serde_json::Value {
    let mut run = serde_json::Value::Null;
    for _ in 0..400 {
        if let Ok(response) = client().get(url).send().await {
            run = response.json().await.unwrap_or_default();
            if statuses.contains(&run["status"].as_str().unwrap_or("")) {
                return run;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("run at {url} never came to {statuses:?}: {run}");
}

/// The text of a `/metrics` answer: 200, the Prometheus text content type,
/// and a body a Prometheus text-format parser accepts.
pub async fn prometheus_text(response: reqwest::Response) -> String {
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    openmetrics_parser::prometheus::parse_prometheus(&text)
        .unwrap_or_else(|e| panic!("not Prometheus text: {e:?}\n{text}"));
    text
}

/// The value of `name`, a series without labels, scraped from `host`'s
/// `/metrics` (the test fails if it is not exposed).
pub async fn metric(host: &host::Host, name: &str) -> f64 {
    metric_at(host.url("/metrics"), name).await
}

/// [`metric`], scraped from `url` (a host's `/metrics`): for a task that
/// cannot borrow the host.
pub async fn metric_at(url: String, name: &str) -> f64 {
    let response = client().get(url).send().await.unwrap();
    let text = prometheus_text(response).await;
    let prefix = format!("{name} ");
    text.lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

/// `GET url` and its JSON body.
pub async fn get_json<T: serde::de::DeserializeOwned>(url: impl reqwest::IntoUrl) -> T {
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// `GET base+path` (a health endpoint): its status and JSON body.
pub async fn health(base: &str, path: &str) -> (u16, serde_json::Value) {
    let response = client().get(format!("{base}{path}")).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Runs a protocol client's Python `script` with `args` to its end, within
/// `limit`: its standard output. A failure fails the test with both of its
/// outputs and the host's.
pub async fn python_script(
    python: &std::path::Path,
    script: &std::path::Path,
    args: &[&str],
    host: &host::Host,
    limit: std::time::Duration,
) -> String {
    let run = tokio::process::Command::new(python)
        .arg(script)
        .args(args)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(limit, run)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} {args:?} did not finish within {limit:?}",
                script.display()
            )
        })
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        host.output()
    );
    stdout
}
