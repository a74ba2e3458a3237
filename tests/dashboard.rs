//! The dashboard (issue 24) in headless Chromium (Debian's package), driven
//! by Playwright (npm, pinned, installed by `make browser-tools` into
//! target/browser-tools) through `tests/dashboard/drive.mjs`: an `approval`
//! instance is found, its waiting step seen in the timeline and its event
//! raised from the form until it completes; a tool call waiting for a human
//! is approved in the page and the answer streams in; a component dropped
//! into the directory appears without a reload, a broken one with its load
//! error; health shows the figures of /metrics. The host requires keys:
//! without one the dashboard answers 401 and asks the browser to sign in,
//! and the page's requests all carry the admin key. Screenshots are kept in
//! target/dashboard-screenshots.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::support::{client, component, get_json, workspace, FakeModel, HostBuilder, Reply};

const ADMIN: &str = "dashboard-admin-key-0123456789";
const INVOKE: &str = "dashboard-invoke-key-0123456789";

/// Where `make browser-tools` put Playwright; the driver runs from there so
/// that Node finds the package.
fn tools() -> std::path::PathBuf {
    let tools = workspace().join("target/browser-tools");
    assert!(
        tools.join("node_modules/playwright-core").exists()
            && std::path::Path::new("/usr/bin/chromium").exists(),
        "Playwright or Chromium is missing: `make test` installs them (or `make browser-tools`)"
    );
    std::fs::copy(
        workspace().join("tests/dashboard/drive.mjs"),
        tools.join("drive.mjs"),
    )
    .unwrap();
    tools
}

async fn get(base: &str, path: &str, key: Option<&str>) -> reqwest::Response {
    let mut request = client().get(format!("{base}{path}"));
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_steers_instances_and_runs_and_shows_components_live_behind_the_admin_key() {
    let tools = tools();
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["approval", "writer", "orchestration-tests"])
        .openai(&model, "sk")
        .arg("--api-key")
        .arg(&format!("admin:{ADMIN}"))
        .arg("--api-key")
        .arg(&format!("invoke:{INVOKE}"))
        .start();

    // Without a key the dashboard answers 401 in JSON and asks a browser to
    // sign in; an invoke key is not enough.
    let refused = get(&host.base, "/dashboard", None).await;
    assert_eq!(refused.status(), 401);
    let challenge = refused.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(challenge.starts_with("Basic realm="), "{challenge}");
    let body: Value = refused.json().await.unwrap();
    assert!(body["error"].as_str().unwrap().contains("key"), "{body}");
    for path in [
        "/dashboard/app.js",
        "/dashboard/events",
        "/dashboard/api/api/components",
    ] {
        assert_eq!(get(&host.base, path, None).await.status(), 401, "{path}");
        assert_eq!(
            get(&host.base, path, Some(INVOKE)).await.status(),
            403,
            "{path}"
        );
    }
    let page = get(&host.base, "/dashboard", Some(ADMIN)).await;
    assert_eq!(page.status(), 200);
    assert!(page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .contains("default-src 'self'"));

    // An `approval` instance waiting for its event.
    model.push(Reply::Echo);
    let started = client()
        .post(host.url("/api/orchestrators/approval/dash-approval-1"))
        .bearer_auth(ADMIN)
        .json(&json!({"topic": "otters"}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);
    let status_url = host.url(&format!(
        "/runtime/webhooks/durabletask/instances/dash-approval-1?code={ADMIN}"
    ));
    poll(&status_url, |s| {
        s["customStatus"]["state"] == "awaiting_approval"
    })
    .await;

    // An instance that waits for good: its version is in use.
    let waiting = client()
        .post(host.url("/api/orchestrators/wait_event/dash-wait-1"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(waiting.status(), 202);
    let listed = poll(&host.url(&format!("/api/components?code={ADMIN}")), |l| {
        l["components"].as_array().unwrap().iter().any(|c| {
            c["name"] == "orchestration-tests" && c["versions_in_use"][0]["instances"] == 1
        })
    })
    .await;
    let tests = listed["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "orchestration-tests")
        .unwrap();
    assert_eq!(
        tests["versions_in_use"][0]["digest"], tests["digest"],
        "{listed}"
    );
    assert_eq!(tests["versions_in_use"][0]["served"], true, "{listed}");
    assert_eq!(listed["versions_in_use"], json!([]), "{listed}");

    // The browser's sign-in counts on the dashboard alone, and a change made
    // with it needs the page's header: another site's form posting with the
    // credentials the browser holds changes nothing.
    let basic = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("admin:{ADMIN}"))
    );
    let instance = "/runtime/webhooks/durabletask/instances/dash-wait-1";
    let post = |path: String, page: bool| {
        let mut request = client()
            .post(host.url(&path))
            .header("authorization", &basic);
        if page {
            request = request.header("x-agenthost-dashboard", "1");
        }
        request.send()
    };
    let forged = post(format!("/dashboard/api{instance}/terminate"), false)
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
    let why: Value = forged.json().await.unwrap();
    assert!(
        why["error"]
            .as_str()
            .unwrap()
            .contains("x-agenthost-dashboard"),
        "{why}"
    );
    let elsewhere = post(format!("{instance}/terminate"), true).await.unwrap();
    assert_eq!(
        elsewhere.status(),
        401,
        "Basic counts on the dashboard alone"
    );
    let read = client()
        .get(host.url("/api/components"))
        .header("authorization", &basic)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 401);
    let status_of = || async {
        let body: Value = get_json(host.url(&format!("{instance}?code={ADMIN}"))).await;
        body["runtimeStatus"].clone()
    };
    // Its first episode runs a moment after the start's 202.
    poll(&host.url(&format!("{instance}?code={ADMIN}")), |s| {
        s["runtimeStatus"] == "Running"
    })
    .await;
    let from_page = post(format!("/dashboard/api{instance}/suspend"), true)
        .await
        .unwrap();
    assert_eq!(from_page.status(), 202);
    assert_eq!(status_of().await, "Suspended");
    let resumed = post(format!("/dashboard/api{instance}/resume"), true)
        .await
        .unwrap();
    assert_eq!(resumed.status(), 202);

    // A `clerk` run whose refund waits for a human; its answer, once
    // approved, comes a word every 300 ms.
    model.push(Reply::ToolCall(
        "refund".into(),
        json!({"order": "A7", "amount": 700}),
    ));
    model.push(Reply::Paced(
        Duration::from_millis(300),
        Box::new(Reply::ToolResult),
    ));
    let run: Value = client()
        .post(host.url("/api/agents/clerk/run"))
        .bearer_auth(INVOKE)
        .json(&json!({"message": "Refund order A7.", "waitForResponse": false}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_url = host.url(&format!(
        "/api/agents/clerk/runs/{}?code={ADMIN}",
        run["correlationId"].as_str().unwrap()
    ));
    poll(&run_url, |r| r["status"] == "awaiting_approval").await;

    let shots = workspace().join("target/dashboard-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut driver = Command::new("node")
        .current_dir(&tools)
        .arg("drive.mjs")
        .arg(&host.base)
        .arg(ADMIN)
        .arg("dash-approval-1")
        .arg(&shots)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = driver.stdin.take().unwrap();
    let mut lines = BufReader::new(driver.stdout.take().unwrap()).lines();
    let mut stdout = String::new();
    let components = dir.path().join("components");
    loop {
        let next = tokio::time::timeout(Duration::from_secs(120), lines.next_line()).await;
        let Ok(Ok(Some(line))) = next else { break };
        stdout.push_str(&line);
        stdout.push('\n');
        if line.contains("\"step\":\"components-shown\"") {
            std::fs::copy(component("doc-poet"), components.join("doc-poet.wasm")).unwrap();
            std::fs::write(components.join("broken.wasm"), b"not a component").unwrap();
            // The same code under a new digest: a custom section (id 0,
            // 3 bytes: the name "t", the payload "1") appended.
            let mut rebuilt = std::fs::read(component("orchestration-tests")).unwrap();
            rebuilt.extend([0x00, 0x03, 0x01, b't', b'1']);
            std::fs::write(components.join("orchestration-tests.wasm"), rebuilt).unwrap();
            stdin.write_all(b"go\n").await.unwrap();
            stdin.flush().await.unwrap();
        }
    }
    let output = driver.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{stdout}\n{stderr}\n{}",
        host.output()
    );
    let steps: HashMap<String, Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .map(|v| (v["step"].as_str().unwrap_or("").to_string(), v))
        .collect();
    let step = |name: &str| {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}: {stdout}\n{stderr}"))
    };
    assert!(!steps.contains_key("page-error"), "{stdout}");

    let approval = step("approval");
    assert!(
        approval["waiting"]
            .as_str()
            .unwrap()
            .contains("wait for event approval_received"),
        "{approval}"
    );
    assert_eq!(approval["status"], "Completed", "{approval}");
    assert!(
        approval["output"].as_str().unwrap().contains("published"),
        "{approval}"
    );
    // The writer's step links to its run.
    assert!(
        approval["stepRun"]
            .as_str()
            .unwrap()
            .starts_with("#/run/writer/dash-approval-1%3A"),
        "{approval}"
    );
    let instance: Value = get_json::<Value>(&status_url).await;
    assert_eq!(instance["output"]["status"], "published", "{instance}");

    let agent = step("agent");
    assert!(
        agent["pending"].as_str().unwrap().contains("refund"),
        "{agent}"
    );
    assert!(agent["pending"].as_str().unwrap().contains("A7"), "{agent}");
    assert_eq!(agent["status"], "completed", "{agent}");
    let answer = agent["answer"].as_str().unwrap();
    assert!(
        answer.contains("tool said") && answer.contains("A7"),
        "{agent}"
    );
    let partial = &agent["partial"];
    assert!(
        partial.is_object()
            && answer.starts_with(partial["answer"].as_str().unwrap())
            && partial["answer"] != agent["answer"],
        "a part of the answer is shown before the run ended: {agent}"
    );
    let state: Value = get_json::<Value>(&run_url).await;
    assert_eq!(state["status"], "completed", "{state}");

    let shown = step("components");
    assert!(
        shown["poet"].as_str().unwrap().contains("doc-poet"),
        "{shown}"
    );
    assert!(
        shown["failure"].as_str().unwrap().contains("broken.wasm"),
        "{shown}"
    );
    assert_eq!(shown["reloaded"], false, "{shown}");
    assert!(
        shown["tests"]
            .as_str()
            .unwrap()
            .contains("1 instance not ended"),
        "{shown}"
    );
    // The waiting instance, on the old build, replays the new one exactly.
    let replay = shown["replay"].as_str().unwrap();
    assert!(replay.contains("1 compatible, 0 divergent of 1"), "{shown}");

    let health = step("health");
    assert!(health["figures"].as_u64().unwrap() >= 8, "{health}");
    assert!(
        health["text"].as_str().unwrap().contains("Agent runs / s"),
        "{health}"
    );

    // The two screenshots docs/operations.md shows are in the repository.
    let doc = std::fs::read_to_string(workspace().join("docs/operations.md")).unwrap();
    for image in ["images/dashboard-instance.png", "images/dashboard-run.png"] {
        assert!(doc.contains(&format!("]({image})")), "{image}");
        let bytes = std::fs::read(workspace().join("docs").join(image)).unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "{image}");
    }

    // Every request of the page went to the host with the admin key: none
    // was answered 401 but the sign-in challenge of the first, and each
    // request after it carried the key.
    let requests = step("requests");
    let answers = requests["answers"].as_array().unwrap();
    let refused: Vec<&Value> = answers.iter().filter(|a| a["status"] == 401).collect();
    assert!(refused.len() <= 1, "{refused:?}");
    let sent = requests["requests"].as_array().unwrap();
    assert!(sent.len() > 20, "{sent:?}");
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("admin:{ADMIN}"))
    );
    let without: Vec<&Value> = sent
        .iter()
        .skip(1)
        .filter(|r| r["authorization"] != expected.as_str())
        .collect();
    assert!(without.is_empty(), "requests without the key: {without:?}");
    let metrics = get(&host.base, "/metrics", Some(ADMIN))
        .await
        .text()
        .await
        .unwrap();
    let unauthorized: f64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("agenthost_http_requests_total")
                && l.contains("status=\"401\"")
                && l.contains("/dashboard")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    // The three unkeyed calls above, and at most the browser's sign-in.
    assert!(unauthorized <= 5.0, "{metrics}");
}

/// Reads `url` (JSON) until `done` holds of it, 30 s at most.
async fn poll(url: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let body: Value = get_json::<Value>(url).await;
        if done(&body) {
            return body;
        }
        assert!(std::time::Instant::now() < deadline, "{url}: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
