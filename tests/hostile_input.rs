//! Hostile input from outside (issue 18): a body of any size on any route,
//! requests the framework cannot parse, and events raised at names no code
//! waits for: each gets a clear JSON answer, and none exhausts the host or
//! kills an instance that is not the caller's.

use std::time::Duration;

use serde_json::Value;

use crate::support::{client, FakeModel, HostBuilder};

/// A chunked request body of `total` bytes sent as fast as the host takes
/// it, on a raw connection (no client library that might give up first);
/// returns the status line and the body of the answer.
pub(crate) fn send_chunked(base: &str, path: &str, total: usize) -> (String, String) {
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

/// A body that trickles in (here: half of it, then nothing) gets 408 in JSON
/// once `--body-timeout` passes, and the connection back; the host serves
/// others meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_body_that_stops_midway_gets_408_in_json_and_the_host_serves_on() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .arg("--body-timeout")
        .arg("1s")
        .start();
    let address = host.base.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let head = format!(
        "POST /api/agents/writer/run HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"message\": \"hal"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    // Others are served while the slow body waits.
    let other = client()
        .post(host.url("/api/agents/writer/run"))
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .expect("the host closes the connection")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    let error: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"));
    assert_eq!(error["code"], "body_timeout", "{error}");
    assert!(
        error["error"]
            .as_str()
            .unwrap_or_default()
            .contains("--body-timeout"),
        "{error}"
    );
}

/// One request written as given on a raw connection (`Connection: close`
/// is added); returns the status line and the body.
fn raw_request(base: &str, head: &str) -> (String, String) {
    use std::io::{Read, Write};
    let address = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let request = format!("{head}Connection: close\r\nContent-Length: 0\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (top, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    (
        top.lines().next().unwrap_or_default().to_string(),
        body.to_string(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_ambiguous_host_is_a_bad_request_and_an_absolute_target_is_checked_as_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let base = host.base.clone();
    let address = base.trim_start_matches("http://").to_string();
    let code = |body: &str| {
        serde_json::from_str::<Value>(body).unwrap_or_default()["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let calls = tokio::task::spawn_blocking(move || {
        [
            // Two Host lines, the first loopback: the second must not be
            // left for a proxy to read.
            format!(
                "POST /api/agents/writer/run HTTP/1.1\r\nHost: {address}\r\nHost: evil.example\r\n"
            ),
            // The target names the host; the Host line is ignored (RFC 9112 §3.2.2).
            format!(
                "POST http://evil.example/api/agents/writer/run HTTP/1.1\r\nHost: {address}\r\n"
            ),
            format!("GET http://{address}/api/health HTTP/1.1\r\nHost: evil.example\r\n"),
            // HTTP/1.1 with no Host at all.
            "GET /api/health HTTP/1.1\r\n".to_string(),
        ]
        .map(|head| raw_request(&base, &head))
    })
    .await
    .unwrap();
    let [(two, two_body), (absolute, absolute_body), (checked, _), (none, none_body)] = calls;
    assert!(two.contains(" 400 "), "{two} {two_body}");
    assert_eq!(code(&two_body), "duplicate_host", "{two_body}");
    assert!(absolute.contains(" 403 "), "{absolute} {absolute_body}");
    assert_eq!(code(&absolute_body), "host_not_allowed", "{absolute_body}");
    assert!(checked.contains(" 200 "), "{checked}");
    assert!(none.contains(" 400 "), "{none} {none_body}");
    assert_eq!(code(&none_body), "missing_host", "{none_body}");
    // Nothing of the refused runs reached the model.
    assert_eq!(model.requests().len(), 0);
}
