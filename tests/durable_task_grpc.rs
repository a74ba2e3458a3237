//! The Durable Task sidecar protocol (gRPC, `--grpc`), driven by the
//! Durable Task Python SDK's own client (PyPI `durabletask`, pinned,
//! installed into target/durabletask-venv by `make test`): wasm
//! orchestrations started, followed, raised, suspended, resumed,
//! terminated, restarted, queried and purged; an instance started over HTTP
//! read through the SDK; the SDK's errors for what is refused; the endpoint
//! keys and the `taskhub` metadata.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::Command;

use crate::support::free_port;
use crate::support::host::{hub_for, Host};
use crate::support::{client, workspace, HostBuilder};

fn python() -> std::path::PathBuf {
    crate::support::venv_python("durabletask-venv")
}

/// Runs the client script with `args`; its JSON lines by step.
async fn script(host: &Host, args: &[&str]) -> Vec<Value> {
    let address = host.grpc_address();
    let mut all = vec![address.as_str()];
    all.extend_from_slice(args);
    let script = workspace().join("tests/durabletask/client.py");
    let stdout =
        crate::support::python_script(&python(), &script, &all, host, Duration::from_secs(240))
            .await;
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Waits until the worker noted `line` in its log.
async fn noted(host: &Host, log: &std::path::Path, line: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(log)
        .unwrap_or_default()
        .contains(line)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker never noted '{line}':\n{}",
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn step<'a>(steps: &'a [Value], name: &str) -> &'a Value {
    steps
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {steps:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_durabletask_python_client_manages_wasm_orchestrations_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .arg("--grpc")
        .arg("--grpc-port")
        .arg("0")
        .start();
    // An instance started over HTTP is one the SDK reads like its own.
    let started = client()
        .post(host.url("/api/orchestrators/sequence/from-http"))
        .json(&json!({"n": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);

    let steps = script(&host, &["scenario", "py", "from-http"]).await;

    let seq = step(&steps, "sequence");
    assert_eq!(seq["id"], "py-seq");
    assert_eq!(seq["status"], "COMPLETED");
    assert_eq!(seq["output"], 10, "0 + 1 + 2 + 3 + 4");
    assert_eq!(seq["input"], json!({"n": 5}));

    let http = step(&steps, "from_http");
    assert_eq!(http["status"], "COMPLETED", "{http}");
    assert_eq!(http["name"], "sequence");
    assert_eq!(http["output"], 3, "0 + 1 + 2");

    let event = step(&steps, "event");
    assert_eq!(event["waiting"], "RUNNING");
    assert_eq!(event["custom"], "waiting");
    assert_eq!(event["status"], "COMPLETED");
    assert_eq!(event["output"], json!({"ok": true}));

    assert_eq!(step(&steps, "timeout")["refused"]["code"], "TIMEOUT");

    let suspend = step(&steps, "suspend");
    assert_eq!(suspend["suspended"], "SUSPENDED");
    assert_eq!(suspend["still"], "SUSPENDED", "an event does not wake it");
    assert_eq!(suspend["status"], "COMPLETED");
    assert_eq!(suspend["output"], 7, "the event raised while suspended");

    let terminate = step(&steps, "terminate");
    assert_eq!(terminate["status"], "TERMINATED");
    assert_eq!(terminate["output"], "enough");
    assert_eq!(terminate["again"]["code"], "FAILED_PRECONDITION");

    let failed = step(&steps, "failed");
    assert_eq!(failed["status"], "FAILED");
    assert_eq!(failed["type"], "OrchestrationFailed");
    assert!(
        !failed["message"].as_str().unwrap().is_empty() && failed["output"].is_null(),
        "{failed}"
    );

    // A start for 2030 (`start_at`) waits, Pending, and can be terminated.
    let scheduled = step(&steps, "scheduled");
    assert_eq!(scheduled["status"], "PENDING", "{scheduled}");
    assert_eq!(scheduled["then"], "TERMINATED", "{scheduled}");

    let refusals = step(&steps, "refusals");
    // As any scheduler of the protocol: a name no component serves is an
    // SDK worker's orchestration, and waits for one.
    assert!(refusals["unknown"].is_null(), "{refusals}");
    assert_eq!(refusals["unknown_status"], "PENDING", "{refusals}");
    assert_eq!(refusals["running"]["code"], "ALREADY_EXISTS");
    assert_eq!(refusals["raise_missing"]["code"], "NOT_FOUND");
    assert_eq!(refusals["purge_running"]["code"], "FAILED_PRECONDITION");
    assert!(refusals["missing"].is_null(), "no instance: the SDK's None");

    let restart = step(&steps, "restart");
    assert_eq!(restart["same"], "py-seq");
    assert_eq!(restart["status"], "COMPLETED");
    assert_eq!(restart["output"], 10, "restarted with its input");
    assert_eq!(restart["fresh_is_new"], true);
    assert_eq!(restart["fresh_output"], 10);

    let query = step(&steps, "query");
    let ids = [
        "py-fail",
        "py-seq",
        "py-slow",
        "py-sus",
        "py-twice",
        "py-unknown",
        "py-wait",
    ];
    assert_eq!(query["ids"], json!(ids), "every page, in pages of 2");
    assert_eq!(
        query["completed"],
        json!(["py-seq", "py-sus", "py-wait"]),
        "by status"
    );
    assert_eq!(query["inputs"]["py-seq"], json!({"n": 5}));

    let purge = step(&steps, "purge");
    assert_eq!(purge["deleted"], 1);
    assert_eq!(purge["gone"], true);
    assert_eq!(purge["again"], 0, "a purge of nothing deletes nothing");
    // py-wait, py-slow, py-sus, py-fail, py-twice, py-unknown (terminated
    // while it waited for an SDK worker), scheduled-2030 (terminated before its
    // time), the fresh restart and the instance started over HTTP.
    assert_eq!(purge["rest"], 9);
    assert_eq!(purge["complete"], true);
    assert_eq!(purge["left"], json!([]));

    // What the SDK purged is gone for the JSON API too.
    let listed: Vec<Value> = client()
        .get(host.url("/runtime/webhooks/durabletask/instances"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed, Vec::<Value>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_grpc_endpoint_wants_an_admin_key_and_this_hosts_task_hub() {
    let dir = tempfile::tempdir().unwrap();
    let admin = "admin-key-for-grpc-0123456789";
    let invoke = "invoke-key-for-grpc-0123456789";
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .arg("--grpc")
        .arg("--grpc-port")
        .arg("0")
        .arg("--api-key")
        .arg(&format!("admin:{admin}"))
        .arg("--api-key")
        .arg(&format!("invoke:{invoke}"))
        .start();
    let hub = hub_for(dir.path());
    let access = |key: &'static str, hub: String| {
        let host = &host;
        async move {
            let steps = script(host, &["access", key, &hub]).await;
            step(&steps, "access")["refused"].clone()
        }
    };
    let none = access("", String::new()).await;
    assert_eq!(none["code"], "UNAUTHENTICATED", "{none}");
    let wrong = access("not-a-key-of-this-host-at-all", String::new()).await;
    assert_eq!(wrong["code"], "UNAUTHENTICATED", "{wrong}");
    let invoked = access(invoke, String::new()).await;
    assert_eq!(invoked["code"], "PERMISSION_DENIED", "{invoked}");
    assert_eq!(access(admin, String::new()).await, Value::Null);
    assert_eq!(access(admin, hub.clone()).await, Value::Null);
    let elsewhere = access(admin, "another-hub".into()).await;
    assert_eq!(elsewhere["code"], "NOT_FOUND", "{elsewhere}");
    assert!(
        elsewhere["message"]
            .as_str()
            .unwrap()
            .contains(&format!("this host serves task hubs '{hub}'")),
        "{elsewhere}"
    );
}

/// A Python SDK worker (`tests/durabletask/worker.py`, with its `flags`)
/// started against the host; returns once the host saw it connect.
async fn sdk_worker(host: &Host, log: &std::path::Path, flags: &[&str]) -> tokio::process::Child {
    let connected = host.output().matches("an SDK worker connected").count();
    let child = Command::new(python())
        .arg(workspace().join("tests/durabletask/worker.py"))
        .arg(host.grpc_address())
        .arg(log)
        .args(flags)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    host.wait_logged("an SDK worker connected", connected).await;
    child
}

async fn call(host: &Host, id: &str, activity: &str, input: Value) -> Value {
    let started = client()
        .post(host.url(&format!("/api/orchestrators/call_activity_of/{id}")))
        .json(&json!({"activity": activity, "input": input}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);
    crate::support::durable::wait_for_within(host, id, &["Completed"], Duration::from_secs(90))
        .await["output"]
        .clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_sdk_worker_runs_activities_for_wasm_orchestrations_and_a_killed_one_loses_nothing(
) {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .arg("--grpc")
        .arg("--grpc-port")
        .arg("0")
        .start();
    let log = dir.path().join("activities.log");
    let mut stalling = sdk_worker(&host, &log, &["stall"]).await;

    // A wasm orchestration calls activities only the Python worker serves.
    let greeted = call(&host, "greet", "py_greet", json!({"name": "tea"})).await;
    assert_eq!(greeted, json!({"ok": "Hello, tea!"}));
    let failed = call(&host, "fail", "py_fail", json!({})).await;
    let why = failed["error"].as_str().unwrap_or_default();
    assert!(why.contains("ValueError: no tea today"), "{failed}");

    // The worker is killed while it runs an activity: the activity is given
    // back, waits for a worker, and the next one runs it to the end.
    let started = client()
        .post(host.url("/api/orchestrators/call_activity_of/slow"))
        .json(&json!({"activity": "py_slow", "input": {"n": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);
    noted(&host, &log, "start 1").await;
    stalling.kill().await.unwrap();
    let _finishing = sdk_worker(&host, &log, &[]).await;
    let done = crate::support::durable::wait_for_within(
        &host,
        "slow",
        &["Completed"],
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(done["output"], json!({"ok": 1}));
    let lines = std::fs::read_to_string(&log).unwrap();
    let starts: Vec<&str> = lines.lines().filter(|l| l.starts_with("start 1")).collect();
    assert_eq!(starts.len(), 2, "run once by each worker:\n{lines}");
    assert_eq!(starts[0], starts[1], "the same task of the same instance");
    assert_eq!(
        lines.lines().filter(|l| *l == "done 1").count(),
        1,
        "completed once:\n{lines}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_sdks_would_never_send_is_refused_with_its_reason_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .arg("--grpc")
        .arg("--grpc-port")
        .arg("0")
        .start();
    // Not gRPC at all, on the gRPC port: refused by the server; the script
    // below runs against the same host after it.
    let _ = client()
        .get(format!("http://{}/", host.grpc_address()))
        .send()
        .await;

    let steps = script(&host, &["hostile"]).await;
    let hostile = step(&steps, "hostile");
    let code = |what: &str| hostile[what]["code"].as_str().unwrap_or("none").to_string();
    assert_eq!(code("not_json"), "INVALID_ARGUMENT", "{hostile}");
    assert!(hostile["not_json"]["message"]
        .as_str()
        .unwrap()
        .starts_with("the input is not JSON"));
    assert_eq!(code("bad_id"), "INVALID_ARGUMENT", "{hostile}");
    // NUL (PostgreSQL's text refuses it) and entity-shaped ids are refused
    // with the reason before the store is asked; a read of one finds none.
    for refused in [
        "nul_id",
        "nul_name",
        "entity_shaped",
        "entity_no_key",
        "entity_nul",
    ] {
        assert_eq!(code(refused), "INVALID_ARGUMENT", "{refused}: {hostile}");
    }
    assert!(
        hostile["nul_read"].is_null() || code("nul_read") == "NOT_FOUND",
        "{hostile}"
    );
    assert_eq!(code("nul_terminate"), "NOT_FOUND", "{hostile}");
    // A payload past the limit reaches the engine, which says which limit;
    // a message past what the server takes at all (32 MiB) is tonic's to
    // refuse.
    assert_eq!(code("too_big"), "RESOURCE_EXHAUSTED", "{hostile}");
    assert!(
        hostile["too_big"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("over the limit")),
        "{hostile}"
    );
    assert_eq!(code("huge"), "OUT_OF_RANGE", "{hostile}");
    assert_eq!(code("event_not_json"), "INVALID_ARGUMENT", "{hostile}");
    assert_eq!(code("purge_nothing"), "INVALID_ARGUMENT", "{hostile}");
    assert_eq!(code("purge_too_many"), "INVALID_ARGUMENT", "{hostile}");
    assert_eq!(code("bad_status"), "INVALID_ARGUMENT", "{hostile}");
    assert_eq!(code("bad_token"), "INVALID_ARGUMENT", "{hostile}");
    assert_eq!(
        hostile["canceled_only"], 0,
        "CANCELED matches nothing, not everything: {hostile}"
    );
    assert_eq!(hostile["waiting"], 3, "CANCELED beside others is dropped");
    assert_eq!(
        hostile["pages"],
        json!([["page-1", "page-2"], ["page-3"]]),
        "pages of maxInstanceCount"
    );
    assert_eq!(hostile["tokens"], json!([true, false]));
    // The host answers before the caller's deadline, with its own status.
    assert_eq!(code("deadline"), "DEADLINE_EXCEEDED", "{hostile}");
    assert!(
        hostile["deadline"]["message"]
            .as_str()
            .unwrap()
            .contains("within the call's deadline"),
        "{hostile}"
    );
    // Answers nothing waits for are dropped; entity calls are checked.
    assert!(hostile["orchestrator_answer"].is_null(), "{hostile}");
    assert!(hostile["entity_answer"].is_null(), "{hostile}");
    assert_eq!(hostile["entity_missing"], json!(false), "{hostile}");
    assert_eq!(code("entity_bad_id"), "INVALID_ARGUMENT", "{hostile}");
    assert!(hostile["entity_own_text"].is_null(), "{hostile}");
    assert_eq!(code("reserved"), "INVALID_ARGUMENT", "{hostile}");
    assert!(
        hostile["reserved"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("reserved for entity operations"),
        "{hostile}"
    );
    assert_eq!(
        hostile["entity_query_other"],
        json!(0),
        "orchestrations are no entities: {hostile}"
    );
    assert!(
        hostile["stray_answer"].is_null(),
        "an answer nothing waits for is dropped: {hostile}"
    );

    // Nothing was started by any of it: the three waiting instances alone,
    // and the entity signalled with the SDK's own text.
    let listed: Vec<Value> = client()
        .get(host.url("/runtime/webhooks/durabletask/instances"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = listed
        .iter()
        .filter_map(|i| i["instanceId"].as_str())
        .collect();
    assert_eq!(ids, ["page-1", "page-2", "page-3", "@counter@a"]);
    let health = client().get(host.url("/api/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sdk_activity_in_flight_when_the_host_is_killed_runs_again_after_the_restart_and_a_committed_one_does_not(
) {
    let dir = tempfile::tempdir().unwrap();
    // A fixed gRPC port, so the worker finds the restarted host where it was.
    let port = free_port();
    let builder = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .arg("--grpc")
        .arg("--grpc-port")
        .arg(&port.to_string());
    let mut host = builder.start();
    let log = dir.path().join("activities.log");
    let _worker = sdk_worker(&host, &log, &[]).await;

    // Committed before the kill: never run again.
    assert_eq!(
        call(&host, "before", "py_slow", json!({"n": 1})).await,
        json!({"ok": 1})
    );
    // In flight at the kill: the worker is still running it.
    let started = client()
        .post(host.url("/api/orchestrators/call_activity_of/during"))
        .json(&json!({"activity": "py_slow", "input": {"n": 2, "sleep": 2}}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);
    noted(&host, &log, "start 2").await;
    host.kill();

    let host = builder.start();
    // The worker reconnects by itself (its own backoff).
    host.wait_logged("an SDK worker connected", 0).await;
    let done = crate::support::durable::wait_for_within(
        &host,
        "during",
        &["Completed"],
        Duration::from_secs(90),
    )
    .await;
    assert_eq!(done["output"], json!({"ok": 2}));
    let lines = std::fs::read_to_string(&log).unwrap();
    let count = |prefix: &str| lines.lines().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(
        count("start 1"),
        1,
        "a committed activity ran once:\n{lines}"
    );
    assert_eq!(count("start 2"), 2, "the one in flight ran again:\n{lines}");
    let before = crate::support::durable::status(&host, "before").await.1;
    assert_eq!(before["output"], json!({"ok": 1}));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sdk_activity_waits_a_while_for_a_worker_that_runs_it_and_is_taken_back_when_unanswered()
{
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .arg("--grpc")
        .arg("--grpc-port")
        .arg("0")
        .arg("--sdk-worker-wait")
        .arg("2s")
        .arg("--sdk-activity-timeout")
        .arg("1s")
        .start();
    let log = dir.path().join("activities.log");

    // No worker within the wait: the task fails, saying why.
    let nobody = call(&host, "nobody", "py_greet", json!({"name": "tea"})).await;
    assert_eq!(
        nobody["error"],
        "no served component has an activity named 'py_greet', and no Durable Task SDK worker connected within 2s"
    );

    // Two workers, each saying (work item filters) which activities it
    // runs: each activity goes to the one that runs it.
    let _greeter = sdk_worker(&host, &log, &["only=py_greet", "name=greeter"]).await;
    let _who = sdk_worker(&host, &log, &["only=py_who", "name=who"]).await;
    for round in 0..3 {
        let id = format!("who-{round}");
        assert_eq!(
            call(&host, &id, "py_who", json!({})).await,
            json!({"ok": "who"})
        );
        let id = format!("greet-{round}");
        assert_eq!(
            call(&host, &id, "py_greet", json!({"name": "tea"})).await,
            json!({"ok": "Hello, tea!"})
        );
    }

    // A worker that never answers has the item taken back after the
    // timeout, again and again, until a worker that answers runs it.
    let mut stalling = sdk_worker(&host, &log, &["stall", "only=py_slow"]).await;
    let started = client()
        .post(host.url("/api/orchestrators/call_activity_of/stuck"))
        .json(&json!({"activity": "py_slow", "input": {"n": 7}}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);
    host.wait_logged("did not answer in time", 1).await;
    let tries = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        tries.matches("start 7").count() >= 2,
        "sent again:\n{tries}"
    );
    stalling.kill().await.unwrap();
    let _answering = sdk_worker(&host, &log, &["only=py_slow"]).await;
    let done = crate::support::durable::wait_for_within(
        &host,
        "stuck",
        &["Completed"],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(done["output"], json!({"ok": 7}));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_stopping_with_an_sdk_activity_in_flight_does_not_wait_for_it_and_runs_it_after_the_restart(
) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let builder = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .arg("--grpc")
        .arg("--grpc-port")
        .arg(&port.to_string());
    let mut host = builder.start();
    let log = dir.path().join("activities.log");
    let mut stalling = sdk_worker(&host, &log, &["stall"]).await;
    let started = client()
        .post(host.url("/api/orchestrators/call_activity_of/held"))
        .json(&json!({"activity": "py_slow", "input": {"n": 3}}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);
    noted(&host, &log, "start 3").await;
    // SIGTERM: the grace period (30 s) is not spent on the worker, whose
    // answer could not arrive anyway; the host exits cleanly.
    let stopping = std::time::Instant::now();
    assert_eq!(host.terminate(), Some(0), "{}", host.output());
    let took = stopping.elapsed();
    assert!(
        took < Duration::from_secs(20),
        "stopped in {took:?}:\n{}",
        host.output()
    );
    stalling.kill().await.unwrap();

    let host = builder.start();
    let _worker = sdk_worker(&host, &log, &[]).await;
    let done = crate::support::durable::wait_for_within(
        &host,
        "held",
        &["Completed"],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(done["output"], json!({"ok": 3}));
}

#[tokio::test(flavor = "multi_thread")]
async fn through_a_front_sdk_clients_start_instances_the_workers_run_and_sdk_workers_are_refused() {
    if crate::support::host::test_store().is_none() {
        return; // A front needs a shared hub (PostgreSQL).
    }
    let dir = tempfile::tempdir().unwrap();
    let builder = HostBuilder::new(dir.path()).components(&["orchestration-tests"]);
    let _worker = builder.start_worker();
    let front = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .arg("--no-worker")
        .arg("--grpc")
        .arg("--grpc-port")
        .arg("0")
        .start();
    let steps = script(&front, &["front"]).await;
    let through = step(&steps, "front");
    assert_eq!(through["status"], "COMPLETED", "{through}");
    assert_eq!(through["output"], 3, "0 + 1 + 2, run by the worker");
    assert_eq!(
        through["work_items"]["code"], "FAILED_PRECONDITION",
        "{through}"
    );
    assert!(
        through["work_items"]["message"]
            .as_str()
            .unwrap()
            .contains("connect SDK workers to a host that does"),
        "{through}"
    );
}
