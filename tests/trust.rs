//! Trust under faults and hostile input (issue 18): one process per SQLite
//! file, bounded bodies, JSON for every rejection, liveness that tells the
//! truth, events nobody waits for kept out of the history.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::host::{hub_for, store_args, test_store};
use crate::support::{client, FakeModel, HostBuilder};

#[tokio::test(flavor = "multi_thread")]
async fn a_second_process_on_one_sqlite_file_exits_at_once_naming_the_holder() {
    if test_store().is_some() {
        return; // several hosts on one PostgreSQL hub is the supported way
    }
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let first = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk")
        .start();
    let pid = first.pid().unwrap();
    for mode in ["serve", "worker"] {
        let started = Instant::now();
        let output = Command::new(env!("CARGO_BIN_EXE_agenthost"))
            .current_dir(dir.path())
            .arg(mode)
            .args(["--port", "0", "--components"])
            .arg(dir.path().join("components"))
            .args(store_args(dir.path(), None))
            .env_remove("DURABLE_TASK_SCHEDULER_CONNECTION_STRING")
            .env_remove("AGENTHOST_STORE")
            .output()
            .unwrap();
        assert!(!output.status.success(), "{mode} started on a held file");
        assert!(started.elapsed() < Duration::from_secs(10));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!("already served by another process (pid {pid})")),
            "{stderr}"
        );
        assert!(stderr.contains("PostgreSQL"), "the remedy: {stderr}");
    }
    // The first host is untouched and still serves.
    let answer = client()
        .post(first.url("/api/agents/writer/run"))
        .body("Still there?")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
}

/// A chunked request body of `total` bytes sent as fast as the host takes
/// it, on a raw connection (no client library that might give up first);
/// returns the status line and the body of the answer.
fn send_chunked(base: &str, path: &str, total: usize) -> (String, String) {
    use std::io::{BufRead, BufReader, Read, Write};
    let address = base.trim_start_matches("http://");
    let stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    );
    writer.write_all(head.as_bytes()).unwrap();
    let sender = std::thread::spawn(move || {
        let chunk = vec![b' '; 1 << 20];
        let mut sent = 0;
        while sent < total {
            let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
            if writer.write_all(&framed).is_err() {
                break; // the host stopped reading: what we want
            }
            sent += chunk.len();
        }
        let _ = writer.write_all(b"0\r\n\r\n");
        sent
    });
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).unwrap();
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        if line.trim().is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    drop(reader);
    let sent = sender.join().unwrap();
    assert!(
        sent < total,
        "the host read all {total} bytes before answering"
    );
    (status.trim().to_string(), String::from_utf8(body).unwrap())
}

fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_256_mib_body_on_any_route_is_refused_early_in_json_without_buffering_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk")
        .start();
    let pid = host.pid().unwrap();
    let before = peak_rss_kib(pid);
    let routes = [
        "/api/agents/writer/runs/r1/approvals",
        "/api/agents/writer/run",
        "/api/orchestrators/anything",
        "/runtime/webhooks/durabletask/instances/i1/raiseEvent/go",
    ];
    for route in routes {
        let base = host.base.clone();
        let (status, body) =
            tokio::task::spawn_blocking(move || send_chunked(&base, route, 256 << 20))
                .await
                .unwrap();
        assert!(status.contains(" 413 "), "{route}: {status} {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["errorCode"], "body_too_large", "{route}: {body}");
    }
    let grown = peak_rss_kib(pid).saturating_sub(before);
    assert!(
        grown < 64 << 10,
        "peak RSS grew by {grown} KiB for bodies the host refused"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_frameworks_own_rejections_are_json_with_an_error_code() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk")
        .start();
    let http = client();
    let cases = [
        (
            "/runtime/webhooks/durabletask/instances?top=many",
            "invalid_query",
        ),
        (
            "/runtime/webhooks/durabletask/instances?showInput=perhaps",
            "invalid_query",
        ),
        (
            "/runtime/webhooks/durabletask/instances/x?showHistory=2",
            "invalid_query",
        ),
        ("/api/agents/writer/sessions/s1?limit=-1", "invalid_query"),
        ("/api/agents/writer/runs/%FF%FE/stream", "invalid_path"),
    ];
    for (path, code) in cases {
        let response = http.get(host.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 400, "{path}");
        let kind = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        assert!(kind.starts_with("application/json"), "{path}: {kind}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["errorCode"], code, "{path}: {body}");
        assert!(
            !body["error"].as_str().unwrap().is_empty(),
            "{path}: {body}"
        );
    }
    // A success stays what it was: the answer is text.
    let answer = http
        .post(host.url("/api/agents/writer/run"))
        .body("Hello")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert!(answer.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
}

/// The SQLite file of a test host's hub.
fn sqlite_file(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join(format!("agenthost.{}.db", hub_for(dir)))
}

/// Holds SQLite's write lock on `db` from another process for `seconds`.
pub(crate) fn lock_sqlite(db: &std::path::Path, seconds: f64) -> std::process::Child {
    let script = "import sqlite3, sys, time\n\
        c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)\n\
        c.execute('BEGIN EXCLUSIVE')\n\
        print('locked', flush=True)\n\
        time.sleep(float(sys.argv[2]))\n\
        c.execute('COMMIT')\n";
    let mut child = Command::new("python3")
        .args(["-c", script])
        .arg(db)
        .arg(seconds.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "locked");
    child
}

async fn health(base: &str, path: &str) -> (u16, Value) {
    let response = client().get(format!("{base}{path}")).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_locked_by_another_process_turns_health_to_503_and_recovers_without_a_restart() {
    if test_store().is_some() {
        return; // the SQLite writer's lock; PostgreSQL faults are the proxy's
    }
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk")
        .arg("--writer-deadline")
        .arg("2s")
        .start();
    for path in ["/api/health", "/api/health/live", "/api/health/ready"] {
        assert_eq!(health(&host.base, path).await.0, 200, "{path}");
    }
    let mut locker = lock_sqlite(&sqlite_file(dir.path()), 4.5);
    // A run arrives while the store cannot be written: it waits, it is not lost.
    let run = tokio::spawn(
        client()
            .post(host.url("/api/agents/writer/run"))
            .body("Written while locked?")
            .send(),
    );
    let started = Instant::now();
    let unhealthy = loop {
        let (status, body) = health(&host.base, "/api/health").await;
        if status == 503 {
            break body;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "health stayed 200"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(unhealthy["status"], "unhealthy");
    assert!(
        unhealthy["reason"].as_str().unwrap().contains("writer"),
        "{unhealthy}"
    );
    let (live, body) = health(&host.base, "/api/health/live").await;
    assert_eq!(live, 503, "{body}");
    locker.wait().unwrap();
    let answer = run.await.unwrap().unwrap();
    assert_eq!(
        answer.status(),
        200,
        "the run finished once the lock was gone"
    );
    let started = Instant::now();
    while health(&host.base, "/api/health/ready").await.0 != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "not ready again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(health(&host.base, "/api/health").await.0, 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writer_stuck_past_four_deadlines_ends_the_process_non_zero_and_a_restart_serves() {
    if test_store().is_some() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let builder = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk")
        .arg("--writer-deadline")
        .arg("500ms");
    let mut host = builder.start();
    let mut locker = lock_sqlite(&sqlite_file(dir.path()), 5.0);
    let run = tokio::spawn(
        client()
            .post(host.url("/api/agents/writer/run"))
            .body("Stuck?")
            .send(),
    );
    let code = tokio::task::spawn_blocking(move || {
        let code = host.wait_exit();
        (code, host.output())
    })
    .await
    .unwrap();
    assert_ne!(code.0, Some(0), "{}", code.1);
    assert!(code.1.contains("stopping at once"), "{}", code.1);
    // Nothing was acknowledged: the caller saw the connection end.
    assert!(run.await.unwrap().is_err());
    locker.wait().unwrap();
    let host = builder.start();
    let answer = client()
        .post(host.url("/api/agents/writer/run"))
        .body("Back?")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
}

/// Anyone who may raise events must not be able to fail an orchestration:
/// events for names its code never waits for stay in the bounded inbox
/// (429 once it is full), out of the history, across a restart too.
#[tokio::test(flavor = "multi_thread")]
async fn events_no_code_waits_for_never_fill_the_history_and_a_full_inbox_answers_429() {
    use crate::support::durable::{raise, start, status, wait_for};
    let dir = tempfile::tempdir().unwrap();
    let builder = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .arg("--max-history-events")
        .arg("20")
        .arg("--max-inbox-events")
        .arg("40");
    let mut host = builder.start();
    let id = start(&host, "two_events", &serde_json::json!(null)).await;
    let flooded = start(&host, "two_events", &serde_json::json!(null)).await;
    wait_for(&host, &id, &["Running"]).await;
    assert_eq!(raise(&host, &id, "step", &serde_json::json!(1)).await, 202);
    // More than the history could ever hold, under the inbox limit.
    for i in 0..30 {
        assert_eq!(raise(&host, &id, "noise", &serde_json::json!(i)).await, 202);
    }
    let mut refused = 0;
    for i in 0..60 {
        match raise(&host, &flooded, "noise", &serde_json::json!(i)).await {
            202 => {}
            429 => refused += 1,
            other => panic!("raise answered {other}"),
        }
    }
    assert_eq!(refused, 20, "the inbox holds 40 events");
    tokio::time::sleep(Duration::from_millis(500)).await;
    for instance in [&id, &flooded] {
        let (_, running) = status(&host, instance).await;
        assert_eq!(running["runtimeStatus"], "Running", "{running}");
    }
    // The parked events are still there after a restart, and still harmless.
    host.kill();
    let host = builder.start();
    assert_eq!(raise(&host, &id, "step", &serde_json::json!(2)).await, 202);
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(done["output"], serde_json::json!([1, 2]));
    let (_, still) = status(&host, &flooded).await;
    assert_eq!(still["runtimeStatus"], "Running", "{still}");
}

/// An idle session expires, but never while one of its runs waits for a
/// human: the conversation the run continues must still be there.
#[tokio::test(flavor = "multi_thread")]
async fn a_session_whose_run_awaits_approval_never_expires_under_it() {
    use crate::support::Reply;
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .openai(&model, "sk")
        .arg("--session-ttl")
        .arg("1s")
        .start();
    let http = client();
    let first = http
        .post(host.url("/api/agents/clerk/run"))
        .json(&serde_json::json!({"message": "Remember order A1.", "sessionId": "kept"}))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    model.push(Reply::ToolCall(
        "refund".into(),
        serde_json::json!({"order": "A1", "amount": 2000}),
    ));
    model.push(Reply::ToolResult);
    let waiting = http
        .post(host.url("/api/agents/clerk/run"))
        .json(&serde_json::json!({"message": "Refund it.", "sessionId": "kept"}))
        .send()
        .await
        .unwrap();
    assert_eq!(waiting.status(), 202);
    let body: Value = waiting.json().await.unwrap();
    let id = body["correlationId"].as_str().unwrap().to_string();
    // Idle past the TTL while the run waits; then another message arrives
    // on the session (an enqueue checks the expiry too).
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let another = http
        .post(host.url("/api/agents/clerk/run"))
        .json(&serde_json::json!({"message": "And thanks.", "sessionId": "kept", "waitForResponse": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(another.status(), 202);
    let decided = http
        .post(host.url(&format!("/api/agents/clerk/runs/{id}/approvals")))
        .json(&serde_json::json!({"callId": "call_refund", "approved": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(decided.status(), 202);
    crate::support::wait_run_finished(&host.url(&format!("/api/agents/clerk/runs/{id}"))).await;
    let transcript = model.requests().last().unwrap().transcript().join("\n");
    assert!(
        transcript.contains("Remember order A1."),
        "the conversation was kept for the waiting run: {transcript}"
    );
    let session: Value = http
        .get(host.url("/api/agents/clerk/sessions/kept"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let text = session.to_string();
    assert!(text.contains("Remember order A1."), "{text}");
    assert!(text.contains("Refund it."), "{text}");
}

/// A worker paused past its lease mid-run (SIGSTOP) loses the session to
/// another worker, which runs the run to its end; when the paused worker
/// wakes (SIGCONT), its model turn answers with a tool call, and every write
/// it then tries is refused by the session fence: the conversation holds one
/// answer, with no tool result after it, and the answer stays the other
/// worker's. PostgreSQL only (several hosts on one hub).
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_paused_past_its_lease_mid_run_writes_nothing_after_the_take_over() {
    if test_store().is_none() {
        return;
    }
    use crate::support::Reply;
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let builder = || {
        HostBuilder::new(dir.path())
            .components(&["weather"])
            .openai(&model, "sk")
            .arg("--lease")
            .arg("2s")
    };
    let front = builder().arg("--no-worker").start();
    let first = builder().start_worker();
    let city = serde_json::json!({"city": "Lisbon"});
    // The first worker's first turn is slow: it is paused while it waits.
    model.push(Reply::Delay(
        Duration::from_secs(6),
        Box::new(Reply::ToolCall("get_weather".into(), city.clone())),
    ));
    model.push(Reply::ToolCall("get_weather".into(), city.clone()));
    model.push(Reply::Text("It is sunny in Lisbon.".into()));
    model.push(Reply::Text("A stale answer.".into()));
    let queued = client()
        .post(front.url("/api/agents/weather/run"))
        .json(&serde_json::json!({"message": "Weather in Lisbon?", "sessionId": "fenced", "waitForResponse": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), 202);
    let body: Value = queued.json().await.unwrap();
    let id = body["correlationId"].as_str().unwrap().to_string();
    model.wait_for_requests(1, Duration::from_secs(20)).await;
    first.pause();
    let second = builder().start_worker();
    let run =
        crate::support::wait_run_finished(&front.url(&format!("/api/agents/weather/runs/{id}")))
            .await;
    assert_eq!(run["status"], "completed", "{run}");
    assert_eq!(run["response"], "It is sunny in Lisbon.", "{run}");
    // The paused worker wakes: its slow turn answers, it runs the tool and
    // tries to store the round, then to end the run.
    first.resume();
    model.wait_for_requests(3, Duration::from_secs(20)).await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let session: Value = client()
        .get(front.url("/api/agents/weather/sessions/fenced"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let roles: Vec<&str> = session["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "assistant"],
        "{session}\n--- paused worker ---\n{}\n--- other worker ---\n{}",
        first.output(),
        second.output()
    );
    let run: Value = client()
        .get(front.url(&format!("/api/agents/weather/runs/{id}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["response"], "It is sunny in Lisbon.", "{run}");
    assert!(
        first.output().contains("no longer owns session 'fenced'"),
        "{}",
        first.output()
    );
}

/// The answer to a COMMIT lost with its connection (the proxy cuts it right
/// after the host sent COMMIT): the writer asks the database whether the
/// batch committed instead of writing it again. A raised event is
/// delivered once (a second delivery would complete `two_events` with the
/// same payload twice), and a start is answered 202, not 409 by its own
/// instance. PostgreSQL only.
#[tokio::test(flavor = "multi_thread")]
async fn an_ambiguous_commit_is_resolved_by_its_batch_id_and_never_applied_twice() {
    use crate::support::durable::{raise, start_with_id, status, wait_for};
    use crate::support::tcp_proxy::TcpProxy;
    let Some(url) = test_store() else {
        return;
    };
    let proxy = TcpProxy::start("127.0.0.1:5432".parse().unwrap()).await;
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .store(&proxy.postgres_url(&url))
        .start();
    let id = start_with_id(&host, "two_events", "ambiguous", &serde_json::json!(null)).await;
    wait_for(&host, &id, &["Running"]).await;

    proxy.cut_after(b"COMMIT");
    assert_eq!(raise(&host, &id, "step", &serde_json::json!(1)).await, 202);
    assert_eq!(proxy.cuts_after_done(), 1, "the COMMIT's answer was lost");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, running) = status(&host, &id).await;
    assert_eq!(
        running["runtimeStatus"], "Running",
        "delivered twice: {running}"
    );
    assert_eq!(raise(&host, &id, "step", &serde_json::json!(2)).await, 202);
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], serde_json::json!([1, 2]), "{done}");

    proxy.cut_after(b"COMMIT");
    let started = client()
        .post(host.url("/api/orchestrators/two_events/second"))
        .json(&serde_json::json!(null))
        .send()
        .await
        .unwrap();
    assert_eq!(proxy.cuts_after_done(), 2);
    assert_eq!(started.status(), 202, "{}", started.text().await.unwrap());
    assert!(
        host.output().contains("the batch had committed"),
        "{}",
        host.output()
    );
}

/// PostgreSQL connections that go silent (no reset, nothing flows: a silent
/// partition, a dropped NAT entry) for longer than the lease and every
/// deadline: once the database can be reached again the host serves again
/// within seconds, without a restart, and every start it acknowledged
/// completes once. PostgreSQL only.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_whose_database_connections_went_silent_serves_again_without_a_restart() {
    use crate::support::durable::{start, wait_for_within};
    use crate::support::tcp_proxy::TcpProxy;
    let Some(url) = test_store() else {
        return;
    };
    let proxy = TcpProxy::start("127.0.0.1:5432".parse().unwrap()).await;
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests", "writer"])
        .openai(&model, "sk")
        .store(&proxy.postgres_url(&url))
        .arg("--lease")
        .arg("2s")
        .start();
    let input = serde_json::json!({"n": 3});
    let warm = start(&host, "sequence", &input).await;
    wait_for_within(&host, &warm, &["Completed"], Duration::from_secs(20)).await;

    // Silence: every open connection for good, new ones while it lasts.
    proxy.set_silent(true);
    proxy.abandon_open_connections();
    let during = {
        let url = host.url("/api/orchestrators/sequence");
        tokio::spawn(async move {
            client()
                .post(url)
                .json(&serde_json::json!({"n": 3}))
                .timeout(Duration::from_secs(40))
                .send()
                .await
        })
    };
    tokio::time::sleep(Duration::from_secs(12)).await;
    let (status, body) = health(&host.base, "/api/health/ready").await;
    assert_eq!(
        status, 503,
        "ready while the database is unreachable: {body}"
    );
    proxy.set_silent(false);

    // Serving again within seconds, on new connections.
    let healed = Instant::now();
    let after = loop {
        let response = client()
            .post(host.url("/api/orchestrators/sequence"))
            .json(&input)
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        if let Ok(response) = response {
            if response.status() == 202 {
                let body: Value = response.json().await.unwrap();
                break body["id"].as_str().unwrap().to_string();
            }
        }
        assert!(
            healed.elapsed() < Duration::from_secs(30),
            "no start answered 30 s after the database came back\n{}",
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let done = wait_for_within(
        &host,
        &after,
        &["Completed", "Failed"],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(done["output"], serde_json::json!(3), "{done}");
    let answer = client()
        .post(host.url("/api/agents/writer/run"))
        .body("Back again?")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    // What was acknowledged during the fault completes too.
    if let Ok(Ok(response)) = during.await {
        if response.status() == 202 {
            let body: Value = response.json().await.unwrap();
            let id = body["id"].as_str().unwrap().to_string();
            let done = wait_for_within(
                &host,
                &id,
                &["Completed", "Failed"],
                Duration::from_secs(30),
            )
            .await;
            assert_eq!(done["output"], serde_json::json!(3), "{done}");
        }
    }
    let started = Instant::now();
    while health(&host.base, "/api/health").await.0 != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "health stayed 503"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A run whose end the store refused (here: another process holds the
/// SQLite file's lock past the writer's busy timeout, as a full disk
/// would refuse it) is not left pending until a restart: its end is
/// retried with backoff and the run completes once the store writes again.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_end_the_store_refused_completes_once_it_writes_again_without_a_restart() {
    use crate::support::fake_model::echo_of;
    use crate::support::Reply;
    if test_store().is_some() {
        return; // the SQLite lock; silent PostgreSQL connections have their own test
    }
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::Delay(
        Duration::from_millis(1500),
        Box::new(Reply::Echo),
    ));
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk")
        .start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .json(&serde_json::json!({"message": "end me", "waitForResponse": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    let id = body["correlationId"].as_str().unwrap().to_string();
    model.wait_for_requests(1, Duration::from_secs(10)).await;
    // The model answers while the file is locked for longer than the
    // writer waits: the first try to store the run's end fails.
    let mut locker = lock_sqlite(&sqlite_file(dir.path()), 16.0);
    tokio::task::spawn_blocking(move || locker.wait())
        .await
        .unwrap()
        .unwrap();
    let run =
        crate::support::wait_run_finished(&host.url(&format!("/api/agents/writer/runs/{id}")))
            .await;
    assert_eq!(run["status"], "completed", "{run}\n{}", host.output());
    assert_eq!(run["response"], echo_of("end me"));
    assert!(
        host.output()
            .contains("could not store the run's outcome; retrying"),
        "the end was refused once: {}",
        host.output()
    );
}

/// Counts the calls of two tool URLs; the first call of `/second` is held
/// (never answered), later ones answer at once.
struct ToolServer {
    port: u16,
    first: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    second: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl ToolServer {
    async fn start() -> Self {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let first = Arc::new(AtomicUsize::new(0));
        let second = Arc::new(AtomicUsize::new(0));
        let (f, s) = (first.clone(), second.clone());
        let app = axum::Router::new()
            .route(
                "/first",
                axum::routing::get(move || {
                    f.fetch_add(1, Ordering::SeqCst);
                    async { "first done" }
                }),
            )
            .route(
                "/second",
                axum::routing::get(move || {
                    let held = s.fetch_add(1, Ordering::SeqCst) == 0;
                    async move {
                        if held {
                            tokio::time::sleep(Duration::from_secs(3600)).await;
                        }
                        "second done"
                    }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self {
            port,
            first,
            second,
        }
    }

    fn calls(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering;
        (
            self.first.load(Ordering::SeqCst),
            self.second.load(Ordering::SeqCst),
        )
    }
}

/// kill -9 while the second tool of a round runs: the first tool's result
/// was stored when it returned, so the resumed run calls only the second.
#[tokio::test(flavor = "multi_thread")]
async fn a_crash_between_two_tools_of_a_round_runs_only_the_unfinished_one_again() {
    use crate::support::Reply;
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let tools = ToolServer::start().await;
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::write(
        components.join("hostile.toml"),
        format!("allowed_hosts = [\"127.0.0.1:{}\"]\n", tools.port),
    )
    .unwrap();
    let model = FakeModel::start().await;
    let url = |path: &str| json!({"url": format!("http://127.0.0.1:{}/{path}", tools.port)});
    model.push(Reply::ToolCalls(vec![
        ("fetch".into(), url("first")),
        ("fetch".into(), url("second")),
    ]));
    model.push(Reply::ToolResult);
    let builder = HostBuilder::new(dir.path())
        .components(&["hostile"])
        .openai(&model, "sk")
        .arg("--lease")
        .arg("1s");
    let mut host = builder.start();
    let response = client()
        .post(host.url("/api/agents/hostile/run"))
        .json(&json!({"message": "fetch both", "sessionId": "two-tools", "waitForResponse": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    let id = body["correlationId"].as_str().unwrap().to_string();
    let started = Instant::now();
    while tools.calls().1 == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the second tool never ran: {}",
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(tools.calls(), (1, 1));
    host.kill();
    let host = builder.start();
    let run =
        crate::support::wait_run_finished(&host.url(&format!("/api/agents/hostile/runs/{id}")))
            .await;
    assert_eq!(run["status"], "completed", "{run}\n{}", host.output());
    assert_eq!(
        tools.calls(),
        (1, 2),
        "the first tool ran again although its result had been returned"
    );
    let session: Value = client()
        .get(host.url("/api/agents/hostile/sessions/two-tools"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let roles: Vec<&str> = session["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool", "assistant"]);
}

/// A purge of thousands of finished instances deletes a page per commit:
/// an orchestration started while it runs is not queued behind every
/// deletion (it has completed when the purge answers), and the count is
/// exact across pages.
#[tokio::test(flavor = "multi_thread")]
async fn a_purge_of_thousands_goes_page_by_page_between_other_work_with_an_exact_count() {
    use futures::StreamExt;
    use serde_json::json;
    const OLD: usize = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .start();
    let base = host.url("/runtime/webhooks/durabletask/instances");
    let start = |id: String, n: u32| {
        let url = host.url(&format!("/api/orchestrators/sequence/{id}"));
        async move {
            let response = client()
                .post(url)
                .json(&json!({"n": n}))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 202);
        }
    };
    futures::stream::iter(0..OLD)
        .map(|i| start(format!("old-{i:05}"), 0))
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    let status = |id: String| {
        let url = format!("{base}/{id}");
        async move {
            let body: Value = client()
                .get(url)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap_or_default();
            body["runtimeStatus"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }
    };
    let started = Instant::now();
    for i in 0..OLD {
        while status(format!("old-{i:05}")).await != "Completed" {
            assert!(started.elapsed() < Duration::from_secs(120));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let purge_url = format!("{base}?runtimeStatus=Completed&instanceIdPrefix=old-");
    let purging = tokio::spawn(async move {
        let body: Value = client()
            .delete(purge_url)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        body
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    start("quick".into(), 1).await;
    let first = purging.await.unwrap();
    assert_eq!(
        status("quick".into()).await,
        "Completed",
        "an orchestration started during the purge waited behind all of it: {first}"
    );
    let mut deleted = first["instancesDeleted"].as_u64().unwrap();
    let mut more = first["more"] == json!(true);
    while more {
        let next: Value = client()
            .delete(format!(
                "{base}?runtimeStatus=Completed&instanceIdPrefix=old-"
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        deleted += next["instancesDeleted"].as_u64().unwrap();
        more = next["more"] == json!(true);
    }
    assert_eq!(deleted, OLD as u64);
    let left: Vec<Value> = crate::support::get_json(format!("{base}?instanceIdPrefix=old-")).await;
    assert!(left.is_empty(), "{} left", left.len());
}

/// A thousand agent calls waiting for a human's approval stay due (their
/// tasks run until the run ends) but never starve other tasks: a retried
/// activity started behind them is read and run at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_approval_waits_never_starve_a_retried_activity() {
    use crate::support::Reply;
    use futures::StreamExt;
    use serde_json::json;
    const WAITING: usize = 1_010;
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.respond_with(std::sync::Arc::new(|_| {
        Reply::ToolCall("refund".into(), json!({"order": "A1", "amount": 5}))
    }));
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .openai(&model, "sk")
        .start();
    let start = |name: &'static str, id: String| {
        let url = host.url(&format!("/api/orchestrators/{name}/{id}"));
        async move {
            let response = client()
                .post(url)
                .json(&json!("Refund order A1."))
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 202);
        }
    };
    futures::stream::iter(0..WAITING)
        .map(|i| start("ask_clerk", format!("waiting-{i}")))
        .buffer_unordered(32)
        .collect::<Vec<()>>()
        .await;
    model
        .wait_for_requests(WAITING, Duration::from_secs(120))
        .await;
    start("failing_activity", "retried".into()).await;
    let url = host.url("/runtime/webhooks/durabletask/instances/retried");
    let started = Instant::now();
    loop {
        let body: Value = crate::support::get_json(&url).await;
        if body["runtimeStatus"] == "Failed" {
            assert!(body["output"].to_string().contains("caught"), "{body}");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the retried activity never ran behind {WAITING} approval waits: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
