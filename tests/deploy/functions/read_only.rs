//! A function app as the platform runs a deployed one: the folder
//! `functions init --store postgres://…` wrote, copied and made read-only
//! (a Linux app runs from a mounted package), `host.json`'s command line
//! run in it with `FUNCTIONS_CUSTOMHANDLER_PORT`, as an unprivileged user
//! when the test runs as root (root writes through any mode: then only the
//! comparison below holds the rule). Every request goes through a route the
//! generated functions declare, as the Functions host matches them
//! ([`super::front`]), with the `?code=` key the Functions host checks and
//! forwards, the status URLs the host hands out followed as given; and
//! nothing under the folder changed: every entry, its mode,
//! its bytes and its modification time, before and after.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::super::{components_with, free_port, read_json};
use super::front::Front;
use super::{assert_succeeded, assert_wake_answered, init_app};
use crate::support::client;
use crate::support::host::{hub_for, test_store, MODEL_ENV};

/// The user an unprivileged process runs as (`nobody`).
const NOBODY: u32 = 65534;
/// A Functions key as a caller sends it (`?code=`), characters to escape
/// included.
const FRONT_KEY: &str = "fn key/+=&1";
/// The app's host name, as the Functions host forwards it.
const APP_HOST: &str = "myapp.azurewebsites.net";

#[tokio::test(flavor = "multi_thread")]
async fn a_function_app_runs_from_a_read_only_package_every_request_through_a_declared_route() {
    let Some(store) = test_store() else {
        eprintln!("skipped: the deployed app's store is PostgreSQL (AGENTHOST_TEST_STORE)");
        return;
    };
    let root = tempfile::tempdir().unwrap();
    // Others may pass through (the unprivileged user reads the package).
    set_mode(root.path(), 0o755);
    let components = components_with(&["writer", "chaining", "approval"]);
    let written = root.path().join("written");
    let init = init_app(
        root.path(),
        &written,
        &[
            "--components",
            &components.path().display().to_string(),
            "--store",
            &store,
        ],
    );
    assert_succeeded(&init);

    // The package as the platform mounts it: a copy, read-only.
    let app = root.path().join("wwwroot");
    crate::support::copy_folder(&written, &app);
    let _writable_again = ReadOnly::make(&app);
    let before = snapshot(&app);
    // Where the platform lets a process write: its home ($HOME is /home on
    // a Linux function app), the user's own.
    let home = root.path().join("home");
    std::fs::create_dir(&home).unwrap();
    set_mode(&home, 0o700);

    let host = read_json(app.join("host.json"));
    let description = &host["customHandler"]["description"];
    let executable = app.join(description["defaultExecutablePath"].as_str().unwrap());
    let arguments: Vec<String> = description["arguments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert!(arguments.iter().any(|a| a == &store), "{arguments:?}");
    let user = unprivileged(&executable, &app);
    if user.is_some() {
        std::os::unix::fs::chown(&home, Some(NOBODY), Some(NOBODY)).unwrap();
    } else {
        eprintln!(
            "the handler runs as the test's user: the comparison of the folder holds the rule"
        );
    }
    let port = free_port();
    let log = root.path().join("handler.log");
    let mut handler = start_handler(&executable, &arguments, &app, &home, port, user, &log);
    let base = format!("http://127.0.0.1:{port}");
    wait_answering(&base, &mut handler, &log).await;

    let front = Front::read(&app);
    let forward = Forward {
        front: &front,
        base: &base,
    };
    let code: String = url::form_urlencoded::byte_serialize(FRONT_KEY.as_bytes()).collect();

    // A run of `writer`.
    let answer = forward
        .send("POST", "/api/agents/writer/run", json!(null), Some("hello"))
        .await;
    assert_eq!(answer.status(), 200, "{}", handler_log(&log));
    // A route a component declares, starting an orchestration: its URLs
    // carry the key the request came with.
    let started = forward
        .send("POST", "/api/writer/run", json!({}), None)
        .await;
    assert_eq!(started.status(), 202, "{}", handler_log(&log));
    let location = started
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let started: Value = started.json().await.unwrap();
    for field in ["statusQueryGetUri", "sendEventPostUri", "terminatePostUri"] {
        let url = started[field].as_str().unwrap_or_default();
        assert!(url.ends_with(&format!("code={code}")), "{field}: {started}");
    }
    assert!(location.ends_with(&format!("code={code}")), "{location}");
    // They point where the app's functions reach (the management API's own
    // paths, under `/runtime/`, are the Functions host's: no function
    // reaches them), and the status URL, followed as given, answers.
    let chaining = started["statusQueryGetUri"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert_eq!(location, chaining);
    assert!(
        front
            .reaches(
                "GET",
                &format!(
                    "/runtime/webhooks/durabletask/instances/{}",
                    started["id"].as_str().unwrap_or_default()
                )
            )
            .is_none(),
        "the Functions host keeps /runtime/ for itself"
    );
    let status = forward.follow("GET", &chaining).await;
    assert!(
        [200, 202].contains(&status.status().as_u16()),
        "{}",
        handler_log(&log)
    );
    let status: Value = status.json().await.unwrap();
    assert_eq!(status["instanceId"], started["id"], "{status}");
    // The approval sample, started, then decided on its declared route.
    let approval = forward
        .send(
            "POST",
            "/api/orchestrators/approval",
            json!({"topic": "tea", "timeout_seconds": 600}),
            None,
        )
        .await;
    assert_eq!(approval.status(), 202);
    let approval: Value = approval.json().await.unwrap();
    let approval_status = approval["statusQueryGetUri"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let approval = approval["id"].as_str().unwrap().to_string();
    forward
        .wait_instance(&approval_status, |s| {
            s["customStatus"]["state"] == "awaiting_approval"
        })
        .await;
    let decided = forward
        .send(
            "POST",
            &format!("/api/approval/{approval}"),
            json!({"approved": true}),
            None,
        )
        .await;
    assert_eq!(decided.status(), 202, "{}", handler_log(&log));
    let done = forward
        .wait_instance(&approval_status, |s| s["runtimeStatus"] == "Completed")
        .await;
    assert_eq!(done["output"]["status"], "published", "{done}");
    let done = forward
        .wait_instance(&chaining, |s| s["runtimeStatus"] == "Completed")
        .await;
    assert!(done["output"].is_string(), "{done}");
    // The API's description and the agent card.
    let openapi = forward
        .send("GET", "/api/openapi.json", json!(null), None)
        .await;
    assert_eq!(openapi.status(), 200);
    let openapi: Value = openapi.json().await.unwrap();
    assert!(openapi["paths"]["/api/agents/{name}/run"].is_object());
    let card = forward
        .send("GET", "/.well-known/agent-card.json", json!(null), None)
        .await;
    assert_eq!(card.status(), 200);
    // Served from the compiled code beside the components, the user's cache
    // empty.
    let listed: Value = forward
        .send("GET", "/api/components", json!(null), None)
        .await
        .json()
        .await
        .unwrap();
    for component in listed["components"].as_array().unwrap() {
        assert_eq!(component["artifact"], "precompiled", "{listed}");
    }
    // The wake timer: a function of the app with a timer trigger, whose
    // invocation the Functions host posts to /{its name}.
    let wake = read_json(app.join("agenthost-wake/function.json"));
    assert_eq!(wake["bindings"][0]["type"], "timerTrigger");
    assert_wake_answered(&format!("{base}/agenthost-wake")).await;

    assert!(
        handler.try_wait().unwrap().is_none(),
        "the handler exited: {}",
        handler_log(&log)
    );
    handler.kill().await.unwrap();
    let after = snapshot(&app);
    assert_eq!(before, after, "the app folder changed");
}

/// Requests as the Functions host forwards them: only on a path and method
/// a function of the app declares, with the path, the query (the caller's
/// `code` in it) and the app's host name as they came.
struct Forward<'a> {
    front: &'a Front,
    base: &'a str,
}

impl Forward<'_> {
    async fn send(
        &self,
        method: &str,
        path: &str,
        json: Value,
        text: Option<&str>,
    ) -> reqwest::Response {
        self.front.assert_reaches(method, path);
        let code: String = url::form_urlencoded::byte_serialize(FRONT_KEY.as_bytes()).collect();
        let url = format!("{}{path}?code={code}", self.base);
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = client().request(method, url).header("host", APP_HOST);
        if let Some(text) = text {
            request = request
                .header("content-type", "text/plain")
                .body(text.to_string());
        } else if !json.is_null() {
            request = request.json(&json);
        }
        request.send().await.unwrap()
    }

    /// A URL the host handed out, followed as a caller of the app follows
    /// it: to the app's host name, through a function of the app, with the
    /// query (its `code`) as given.
    async fn follow(&self, method: &str, url: &str) -> reqwest::Response {
        let Some(path) = url.strip_prefix(&format!("http://{APP_HOST}")) else {
            panic!("{url} is not a URL of the app ({APP_HOST})");
        };
        self.front.assert_reaches(method, path);
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        client()
            .request(method, format!("{}{path}", self.base))
            .header("host", APP_HOST)
            .send()
            .await
            .unwrap()
    }

    /// The instance's status, read by following its `statusQueryGetUri`,
    /// once `done` holds.
    async fn wait_instance(&self, status_url: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let status: Value = self
                .follow("GET", status_url)
                .await
                .json()
                .await
                .unwrap_or(Value::Null);
            if done(&status) {
                return status;
            }
            assert!(Instant::now() < deadline, "{status_url}: {status}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Starts host.json's command line in `app` as the Functions host does:
/// the port in `FUNCTIONS_CUSTOMHANDLER_PORT`, the app settings in the
/// environment (here: the task hub), as `user` when given.
fn start_handler(
    executable: &Path,
    arguments: &[String],
    app: &Path,
    home: &Path,
    port: u16,
    user: Option<u32>,
    log: &Path,
) -> tokio::process::Child {
    let mut command = match user {
        Some(id) => {
            let mut command = tokio::process::Command::new("setpriv");
            command
                .arg(format!("--reuid={id}"))
                .arg(format!("--regid={id}"))
                .arg("--clear-groups")
                .arg("--")
                .arg(executable);
            command
        }
        None => tokio::process::Command::new(executable),
    };
    let output = std::fs::File::create(log).unwrap();
    command
        .current_dir(app)
        .args(arguments)
        .env("FUNCTIONS_CUSTOMHANDLER_PORT", port.to_string())
        .env("TASKHUB_NAME", hub_for(app))
        .env("HOME", home)
        .env("AGENTHOST_LOG", "info,sqlx=warn")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("AGENTHOST_CACHE_DIR")
        .env_remove("AGENTHOST_STORE")
        .env_remove("AGENTHOST_PORT")
        .env_remove("AGENTHOST_API_KEYS")
        .stdin(Stdio::null())
        .stdout(output.try_clone().unwrap())
        .stderr(output)
        .kill_on_drop(true);
    for key in MODEL_ENV {
        command.env_remove(key);
    }
    command.spawn().expect("start the handler")
}

async fn wait_answering(base: &str, handler: &mut tokio::process::Child, log: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while client()
        .get(format!("{base}/api/health/live"))
        .send()
        .await
        .is_err()
    {
        if let Ok(Some(status)) = handler.try_wait() {
            panic!("the handler exited ({status}): {}", handler_log(log));
        }
        assert!(
            Instant::now() < deadline,
            "the handler did not answer: {}",
            handler_log(log)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn handler_log(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// `Some(nobody)` when the test runs as root and `setpriv` can run the
/// executable as that user (from the app folder); else `None`.
fn unprivileged(executable: &Path, app: &Path) -> Option<u32> {
    let me = std::process::Command::new("id").arg("-u").output().ok()?;
    if String::from_utf8_lossy(&me.stdout).trim() != "0" {
        return None;
    }
    let probe = std::process::Command::new("setpriv")
        .arg(format!("--reuid={NOBODY}"))
        .arg(format!("--regid={NOBODY}"))
        .args(["--clear-groups", "--"])
        .arg(executable)
        .arg("--help")
        .current_dir(app)
        .output()
        .ok()?;
    probe.status.success().then_some(NOBODY)
}

fn set_mode(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Every entry under `dir`, mode and write bits removed; given back when
/// dropped (so that the temporary folder can be removed).
struct ReadOnly(Vec<(PathBuf, u32)>);

impl ReadOnly {
    fn make(dir: &Path) -> Self {
        let mut modes = Vec::new();
        for path in entries(dir) {
            let mode = std::fs::symlink_metadata(&path).unwrap().mode() & 0o7777;
            set_mode(&path, mode & !0o222);
            modes.push((path, mode));
        }
        Self(modes)
    }
}

impl Drop for ReadOnly {
    fn drop(&mut self) {
        for (path, mode) in &self.0 {
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode));
        }
    }
}

/// `dir` and everything under it.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut all = vec![dir.to_path_buf()];
    let mut at = 0;
    while at < all.len() {
        let path = all[at].clone();
        at += 1;
        if path.is_dir() && !path.is_symlink() {
            let mut children: Vec<PathBuf> = std::fs::read_dir(&path)
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            children.sort();
            all.extend(children);
        }
    }
    all
}

/// Each entry under `dir`: its kind and mode, its modification time, and
/// for a file the SHA-256 of its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    entries(dir)
        .into_iter()
        .map(|path| {
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let digest = if meta.is_file() {
                hex::encode(Sha256::digest(std::fs::read(&path).unwrap()))
            } else {
                String::new()
            };
            let name = path.strip_prefix(dir).unwrap().display().to_string();
            let described = format!(
                "{:?} {:o} {}.{} {digest}",
                meta.file_type(),
                meta.mode(),
                meta.mtime(),
                meta.mtime_nsec()
            );
            (name, described)
        })
        .collect()
}
