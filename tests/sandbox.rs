//! A hostile component gets nothing it was not granted, and whatever it does
//! fails only its own call: the host keeps serving everything else.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::host::Host;
use crate::support::{client, component, get_json, FakeModel, HostBuilder, Reply};

/// A local HTTP server that counts the requests it gets.
struct Target {
    port: u16,
    hits: Arc<AtomicUsize>,
}

async fn serve_target() -> Target {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { "hello from the granted server" }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Target { port, hits }
}

/// Runs the `hostile` agent with the model asking for `tool(arguments)`;
/// when the tool `returns`, the model then reports its result.
async fn call_tool(
    host: &Host,
    model: &FakeModel,
    tool: &str,
    arguments: Value,
    returns: bool,
) -> (u16, Value) {
    model.push(Reply::ToolCall(tool.into(), arguments));
    if returns {
        model.push(Reply::ToolResult);
    }
    let response = client()
        .post(host.url("/api/agents/hostile/run"))
        .header("accept", "application/json")
        .body(format!("call {tool}"))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// The tool returned: the run answers, and this is what the model was told.
async fn tool_result(host: &Host, model: &FakeModel, tool: &str, arguments: Value) -> String {
    let (status, body) = call_tool(host, model, tool, arguments, true).await;
    assert_eq!(status, 200, "{body}");
    model
        .requests()
        .last()
        .and_then(|r| r.last_tool_result())
        .expect("the model saw the tool's result")
}

/// The component failed as a program: 502 with `code`, naming the component
/// and saying `why`.
async fn assert_fails(host: &Host, model: &FakeModel, tool: &str, code: &str, why: &str) {
    let (status, body) = call_tool(host, model, tool, json!({}), false).await;
    assert_eq!((status, body["code"].as_str()), (502, Some(code)), "{body}");
    let error = body["error"].as_str().unwrap_or_default();
    assert!(error.contains("'hostile'") && error.contains(why), "{body}");
}

/// The host answers health and another agent normally.
async fn assert_healthy(host: &Host) {
    let health = client().get(host.url("/api/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let writer = client()
        .post(host.url("/api/agents/writer/run"))
        .body("still there?")
        .send()
        .await
        .unwrap();
    assert_eq!(writer.status(), 200, "another agent answers normally");
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_guests_get_only_their_grants_and_fail_alone() {
    let dir = tempfile::tempdir().unwrap();
    let granted = serve_target().await;
    let refused = serve_target().await;
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::write(
        components.join("hostile.toml"),
        format!(
            "allowed_hosts = [\"127.0.0.1:{}\"]\nenv = [\"HOSTILE_GREETING\"]\nmemory_mb = 32\ncpu_time = \"2s\"\n",
            granted.port
        ),
    )
    .unwrap();
    // A component whose grants exceed the host's limits is refused at load.
    std::fs::copy(component("scientists"), components.join("greedy.wasm")).unwrap();
    std::fs::write(components.join("greedy.toml"), "memory_mb = 100000\n").unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["hostile", "writer"])
        .openai(&model, "sk-secret-model-key")
        .env("HOSTILE_GREETING", "hello")
        .start();

    let listing: Value = get_json(host.url("/api/components")).await;
    let failure = &listing["failures"][0];
    assert!(
        failure["error"]
            .as_str()
            .unwrap()
            .contains("component 'greedy': grant 'memory_mb' refused"),
        "{listing:#}"
    );
    let hostile = listing["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "hostile")
        .unwrap();
    assert_eq!(hostile["grants"]["env"], json!(["HOSTILE_GREETING"]));
    assert_eq!(hostile["grants"]["memory_mb"], 32);

    // An infinite loop is interrupted at its deadline; meanwhile the host serves.
    let spinning = {
        let (host_url, model_requests) = (host.url(""), model.requests().len());
        let spin = tokio::spawn({
            let client = client();
            model.push(Reply::ToolCall("spin".into(), json!({})));
            async move {
                let response = client
                    .post(format!("{host_url}/api/agents/hostile/run"))
                    .body("spin")
                    .send()
                    .await
                    .unwrap();
                (
                    response.status().as_u16(),
                    response.json::<Value>().await.unwrap(),
                )
            }
        });
        model
            .wait_for_requests(model_requests + 1, Duration::from_secs(10))
            .await;
        assert_healthy(&host).await;
        assert!(
            !spin.is_finished(),
            "the loop ended before the other requests were served; nothing was shown"
        );
        spin.await.unwrap()
    };
    assert_eq!(spinning.0, 502, "{}", spinning.1);
    assert_eq!(spinning.1["code"], "component_deadline");
    let message = spinning.1["error"].as_str().unwrap();
    assert!(
        message.contains("'hostile'") && message.contains("CPU time"),
        "{message}"
    );

    // Unbounded allocation stops at the memory limit; a trap fails the call.
    assert_fails(&host, &model, "hog", "component_memory", "memory limit").await;
    assert_fails(&host, &model, "trap", "component_failed", "trapped").await;
    assert_healthy(&host).await;

    // The environment holds the granted variable and nothing else: no model key.
    let seen: Value =
        serde_json::from_str(&tool_result(&host, &model, "env", json!({})).await).unwrap();
    assert_eq!(seen, json!({"HOSTILE_GREETING": "hello"}));

    // No files.
    let result = tool_result(&host, &model, "read_file", json!({"path": "/etc/passwd"})).await;
    assert!(result.contains("cannot open /etc/passwd"), "{result}");
    assert!(!result.contains("root:"), "{result}");

    // Outbound HTTP only to the granted host.
    let url = format!("http://127.0.0.1:{}/", refused.port);
    let result = tool_result(&host, &model, "fetch", json!({"url": url})).await;
    assert!(result.contains("HttpRequestDenied"), "{result}");
    assert_eq!(
        refused.hits.load(Ordering::SeqCst),
        0,
        "the request never left"
    );

    let url = format!("http://127.0.0.1:{}/", granted.port);
    let result = tool_result(&host, &model, "fetch", json!({"url": url})).await;
    assert!(result.contains("hello from the granted server"), "{result}");
    assert_eq!(granted.hits.load(Ordering::SeqCst), 1);

    assert_healthy(&host).await;
}

/// A server whose every request waits until the test opens the gate, and
/// which counts how many requests it holds at once.
struct Gate {
    port: u16,
    held: Arc<AtomicUsize>,
    most_held: Arc<AtomicUsize>,
    open: Arc<tokio::sync::Semaphore>,
}

async fn serve_gate() -> Gate {
    let held = Arc::new(AtomicUsize::new(0));
    let most_held = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(tokio::sync::Semaphore::new(0));
    let (h, m, o) = (held.clone(), most_held.clone(), open.clone());
    let app = axum::Router::new().route(
        "/",
        axum::routing::get(move || {
            let (held, most_held, open) = (h.clone(), m.clone(), o.clone());
            async move {
                let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                most_held.fetch_max(now, Ordering::SeqCst);
                if let Ok(permit) = open.acquire().await {
                    permit.forget();
                }
                held.fetch_sub(1, Ordering::SeqCst);
                "through the gate"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Gate {
        port,
        held,
        most_held,
        open,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn max_instances_bounds_the_instances_of_a_component_alive_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let gate = serve_gate().await;
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::write(
        components.join("hostile.toml"),
        format!(
            "allowed_hosts = [\"127.0.0.1:{}\"]\nmax_instances = 1\n",
            gate.port
        ),
    )
    .unwrap();
    let model = FakeModel::start().await;
    for _ in 0..2 {
        model.push(Reply::ToolCall(
            "fetch".into(),
            json!({"url": format!("http://127.0.0.1:{}/", gate.port)}),
        ));
    }
    model.push(Reply::ToolResult);
    model.push(Reply::ToolResult);
    let host = HostBuilder::new(dir.path())
        .components(&["hostile"])
        .openai(&model, "sk-test")
        .start();
    // Two runs on two threads, each calling the tool once.
    let runs: Vec<_> = (0..2)
        .map(|_| {
            let url = host.url("/api/agents/hostile/run");
            tokio::spawn(async move {
                let response = client().post(url).body("fetch").send().await.unwrap();
                (response.status().as_u16(), response.text().await.unwrap())
            })
        })
        .collect();
    // The first instance is held at the gate; the second must wait for its slot.
    model.wait_for_requests(2, Duration::from_secs(10)).await;
    for _ in 0..200 {
        if gate.held.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(gate.held.load(Ordering::SeqCst), 1, "{}", host.output());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        gate.held.load(Ordering::SeqCst),
        1,
        "a second instance reached the network while the first was alive"
    );
    gate.open.add_permits(2);
    for run in runs {
        let (status, body) = run.await.unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("through the gate"), "{body}");
    }
    assert_eq!(gate.most_held.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_component_that_blocks_in_describe_is_refused_and_the_others_load() {
    let dir = tempfile::tempdir().unwrap();
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::write(
        components.join("hostile.toml"),
        "env = [\"HOSTILE_BLOCK_DESCRIBE\"]\n",
    )
    .unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["hostile", "writer"])
        .env("HOSTILE_BLOCK_DESCRIBE", "1")
        .arg("--describe-timeout")
        .arg("1s")
        .start();
    let listing: Value = get_json(host.url("/api/components")).await;
    let error = listing["failures"][0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("'hostile'") && error.contains("wall-clock limit of 1s"),
        "{listing:#}"
    );
    let health: Value = get_json(host.url("/api/health")).await;
    assert_eq!(
        health["agents"],
        json!([{"name": "writer", "status": "ready"}]),
        "{health}"
    );
}

/// A guest's log line cannot forge a line of the host's own log (a newline
/// and a fake host record, `\r`, a terminal escape are written escaped), and
/// a flood of lines is cut to the component's share a second, the rest
/// counted and said.
#[tokio::test(flavor = "multi_thread")]
async fn a_guests_log_lines_are_escaped_and_held_to_its_share() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["hostile", "writer"])
        .openai(&model, "sk-test")
        .start();
    let result = tool_result(&host, &model, "log_forge", json!({})).await;
    assert!(result.contains("logged"), "{result}");
    assert_healthy(&host).await;
    let log = host.output();
    assert!(
        !log.lines()
            .any(|l| l.contains("FORGED") && !l.contains("harmless")),
        "a guest's text started a line of the host's log:\n{log}"
    );
    let forged = log
        .lines()
        .find(|l| l.contains("FORGED"))
        .unwrap_or_else(|| panic!("the guest's line is not in the log:\n{log}"));
    assert!(
        forged.contains("harmless\\n2026") && forged.contains("\\r\\u{1b}[31mred"),
        "{forged}"
    );
    assert!(!log.contains('\u{1b}'), "a terminal escape reached the log");
    let flood = log.lines().filter(|l| l.contains("flood line")).count();
    assert!(
        (150..=1000).contains(&flood),
        "{flood} of 5,000 flood lines were written (the share is 200 a second)"
    );
    assert!(
        log.contains("more log lines than its share"),
        "the drop is not said:\n{}",
        &log[log.len().saturating_sub(2000)..]
    );
}
