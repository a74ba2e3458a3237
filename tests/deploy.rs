//! Where agenthost is deployed (docs/deploy.md): a function app folder
//! (`agenthost functions init`) run as the Azure Functions host runs a
//! custom handler; `agenthost due`, what tells a platform that scaled to
//! zero that work is due; the container image's command line and the
//! Kubernetes manifests, parsed, checked against the published schemas and
//! run as written. The image itself is built and run by a container runtime
//! in `make image-test` (scripts/image-test.sh), outside `make test`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::durable::{start, wait_for_within};
use crate::support::host::{store_location, test_store};
use crate::support::{client, component, HostBuilder};

mod functions;
mod image;
mod kubernetes;

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

    /// Asserts that its one component was loaded from the compiled code
    /// beside it (`"artifact": "precompiled"` in `/api/components`).
    async fn assert_served_precompiled(&self, why: &str) {
        let listed: Value = crate::support::get_json(self.url("/api/components")).await;
        assert_eq!(
            listed["components"][0]["artifact"], "precompiled",
            "{why}: {listed}"
        );
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
        // A host with no `--cache-dir` (the function app's) uses the user's
        // cache folder: the test's own, not the real user's.
        .env("XDG_CACHE_HOME", dir.join(".test-user-cache"))
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
