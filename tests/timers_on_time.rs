//! Durable timers fire on time at any duration, and never before it: a
//! commit that arms something sooner than the scheduler's planned wake (a
//! timer, a retry's next attempt, a start or an operation for later, on
//! this host or, on a shared hub, another) wakes it then. Before, the
//! scheduler slept out the second it had planned: a 50, 200 or 500 ms
//! timer fired about a second after it was armed, wasm and SDK alike, and
//! SDK retry backoff (timers too) came out a second per attempt.
//!
//! Each wait is read on the host's clock (a wasm instance's start and end
//! times, an SDK orchestration's episode times), one instance at a time on
//! an idle host; the bound is on the median of several, generous for a
//! busy machine yet well under the old second.

use std::time::Duration;

use serde_json::{json, Value};

use crate::durable_task_orchestrations::{client_of, grpc_host, worker_of};
use crate::support::durable::{start, wait_for_within};
use crate::support::host::{test_store, Host};
use crate::support::{workspace, HostBuilder};

/// Timer lengths, in ms.
const TIMERS: [u64; 3] = [50, 200, 500];

/// Timers of each length, one after the other.
const ROUNDS: usize = 5;

/// How much later than due the median timer may fire: the old scheduler
/// fired a 500 ms timer ~500 ms late, a 50 ms one ~950 ms late.
const LATE_MS: u64 = 350;

fn script() -> std::path::PathBuf {
    workspace().join("tests/durabletask/timers.py")
}

fn median(mut values: Vec<u64>) -> u64 {
    values.sort_unstable();
    values[values.len() / 2]
}

/// Each wait of `waited` lasted at least `ms`, and their median at most
/// [`LATE_MS`] more.
fn on_time(what: &str, ms: u64, waited: Vec<u64>) {
    assert!(
        waited.iter().all(|w| *w >= ms),
        "{what}: a {ms} ms wait ended early: {waited:?} ms"
    );
    let middle = median(waited.clone());
    assert!(
        middle < ms + LATE_MS,
        "{what}: a {ms} ms wait took {middle} ms (median; all: {waited:?}), \
         more than {LATE_MS} ms late"
    );
    eprintln!("{what}: {ms} ms waited {waited:?} ms, median {middle}");
}

/// Runs wasm orchestration `name` on `input` alone to its end: its output,
/// and how long it took from its start to its end on the host's clock (ms).
async fn run_alone(host: &Host, name: &str, input: &Value) -> (Value, u64) {
    let id = start(host, name, input).await;
    let done = wait_for_within(host, &id, &["Completed", "Failed"], Duration::from_secs(30)).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    let at = |field: &str| {
        let text = done[field].as_str().unwrap_or_else(|| panic!("{done}"));
        chrono::DateTime::parse_from_rfc3339(text)
            .unwrap_or_else(|e| panic!("{field}: {e}: {done}"))
            .timestamp_millis()
    };
    let took = at("lastUpdatedTime") - at("createdTime");
    (done["output"].clone(), u64::try_from(took).unwrap_or(0))
}

#[tokio::test(flavor = "multi_thread")]
async fn wasm_timers_of_50_200_and_500_ms_fire_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .start();
    for ms in TIMERS {
        let mut took = Vec::new();
        for _ in 0..ROUNDS {
            let (output, ms_taken) = run_alone(&host, "timer", &json!(ms)).await;
            assert_eq!(output, json!(ms));
            took.push(ms_taken);
        }
        on_time("wasm timer", ms, took);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn wasm_retry_backoff_waits_the_delay_and_no_more() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .start();
    // Three attempts of an activity that always fails, 200 ms apart.
    let mut took = Vec::new();
    for _ in 0..3 {
        let (failed, ms_taken) = run_alone(&host, "retry_backoff", &json!(200)).await;
        assert_eq!(failed, true);
        took.push(ms_taken);
    }
    on_time("wasm retry, 2 delays of 200 ms", 400, took);
}

/// A whole number of ms the script reported.
fn millis(value: &Value, field: &str) -> u64 {
    value[field]
        .as_u64()
        .unwrap_or_else(|| panic!("no {field} in {value}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn sdk_timers_of_50_200_and_500_ms_fire_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let host = grpc_host(dir.path(), 0).start();
    let _worker = worker_of(&script(), &host, &dir.path().join("worker.log"), "worker").await;
    let rounds = ROUNDS.to_string();
    let lengths: Vec<String> = TIMERS.iter().map(u64::to_string).collect();
    let mut args = vec!["timers", rounds.as_str()];
    args.extend(lengths.iter().map(String::as_str));
    let steps = client_of(&script(), &host, &args).await;
    for ms in TIMERS {
        let step = &steps[&format!("timer {ms}")];
        let waited = step["waited"]
            .as_array()
            .unwrap_or_else(|| panic!("{step}"))
            .iter()
            .map(|w| w.as_u64().unwrap_or_else(|| panic!("{step}")))
            .collect();
        on_time("SDK timer", ms, waited);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sdk_retry_backoff_waits_the_delay_and_no_more() {
    let dir = tempfile::tempdir().unwrap();
    let host = grpc_host(dir.path(), 0).start();
    let _worker = worker_of(&script(), &host, &dir.path().join("worker.log"), "worker").await;
    // The SDK waits on a durable timer between two attempts.
    let mut took = Vec::new();
    for _ in 0..3 {
        let retry = &client_of(&script(), &host, &["retry", "200"]).await["retry"];
        assert_eq!(retry["failed"], true, "{retry}");
        took.push(millis(retry, "took"));
    }
    on_time("SDK retry, 2 delays of 200 ms", 400, took);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sdk_instance_started_for_later_begins_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let host = grpc_host(dir.path(), 0).start();
    let _worker = worker_of(&script(), &host, &dir.path().join("worker.log"), "worker").await;
    let mut waited = Vec::new();
    for _ in 0..3 {
        let later = &client_of(&script(), &host, &["later", "200"]).await["later"];
        waited.push(millis(later, "waited"));
    }
    on_time("a start 200 ms ahead", 200, waited);
}

/// On a shared PostgreSQL hub, an operation signalled for later through a
/// front is stored by the front, for an entity a worker runs: the worker
/// hears of its due time and runs it then.
#[tokio::test(flavor = "multi_thread")]
async fn an_operation_another_host_signals_for_later_runs_on_time() {
    if test_store().is_none() {
        return; // SQLite: one host per file.
    }
    let dir = tempfile::tempdir().unwrap();
    let host = grpc_host(dir.path(), 0).start();
    let _worker = worker_of(&script(), &host, &dir.path().join("worker.log"), "worker").await;
    let front = grpc_host(dir.path(), 0).arg("--no-worker").start();
    let mut waited = Vec::new();
    for _ in 0..3 {
        let signal = &client_of(&script(), &front, &["signal", "200"]).await["signal"];
        waited.push(millis(signal, "waited"));
    }
    on_time("an operation signalled for 200 ms later", 200, waited);
}
