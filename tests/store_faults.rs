//! One host and its SQLite store under faults (issue 18): one process per
//! file, a store locked or refusing writes, a writer stuck past its
//! deadline; liveness tells the truth and nothing acknowledged waits for a
//! restart.

use std::process::Command;

use crate::support::host::store_args;
use crate::support::sqlite_lock::{lock_sqlite, sqlite_file};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::host::test_store;
use crate::support::{client, get_json, health, FakeModel, HostBuilder};

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
    // Nothing is acknowledged that is not stored. The caller saw its
    // connection end, or its run was committed as the lock went, on the
    // thread that waited for it while the process stopped, and answered:
    // then the restarted host lists it, with that answer.
    let answered = match run.await.unwrap() {
        Err(_) => None,
        Ok(response) => {
            assert_eq!(response.status(), 200);
            Some(response.text().await.unwrap())
        }
    };
    locker.wait().unwrap();
    let host = builder.start();
    let answer = client()
        .post(host.url("/api/agents/writer/run"))
        .body("Back?")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    if let Some(answered) = answered {
        let listed: Value = get_json(&host.url("/api/agents/writer/runs")).await;
        let runs = listed["runs"].as_array().cloned().unwrap_or_default();
        assert!(
            runs.iter()
                .any(|r| r["status"] == "completed" && r["response"] == answered.as_str()),
            "answered {answered:?}, not stored: {listed}"
        );
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
    // Longer than two busy timeouts (10 s each): a batch of stream entries
    // queued before the end may wait out the first, and the end's own
    // try must still meet a locked file.
    let mut locker = lock_sqlite(&sqlite_file(dir.path()), 30.0);
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
