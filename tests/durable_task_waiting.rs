//! SDK instances whose orchestration no connected worker runs wait for one
//! at no cost: the scheduler does not read them back (journal, inbox,
//! history) on every pass, and their status says what they wait for; a
//! worker that runs them connects and they all complete.

use std::time::Duration;

use serde_json::Value;

use crate::durable_task_orchestrations::{client_of, grpc_host, worker_of};
use crate::support::host::Host;
use crate::support::{free_port, workspace};

fn script() -> std::path::PathBuf {
    workspace().join("tests/durabletask/orchestrations.py")
}

/// `agenthost_instance_loads_total`: instances read whole from the store.
async fn loads(host: &Host) -> f64 {
    crate::support::metric(host, "agenthost_instance_loads_total").await
}

/// The management API's status of instance `id`.
async fn status(host: &Host, id: &str) -> Value {
    crate::support::durable::status(host, id).await.1
}

#[tokio::test(flavor = "multi_thread")]
async fn instances_no_connected_worker_runs_cost_no_reads_and_say_what_they_wait_for() {
    const WAITING: usize = 100;
    let dir = tempfile::tempdir().unwrap();
    let host = grpc_host(dir.path(), free_port()).start();
    let count = WAITING.to_string();
    client_of(&script(), &host, &["chains", &count, "2"]).await;
    // And one of a name no worker will register.
    client_of(&script(), &host, &["unserved", "unserved-1"]).await;

    // Offered at least twice (the scheduler passes every second), then
    // never read again while nothing can run them (before the fix every
    // pass read them all: 400 reads in 4 s).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = loads(&host).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = loads(&host).await;
    assert_eq!(
        after - before,
        0.0,
        "{WAITING} instances waiting for a worker were read {} times in 4 s",
        after - before
    );
    let waiting = status(&host, "chain-0").await;
    assert_eq!(waiting["runtimeStatus"], "Pending", "{waiting}");
    let says = waiting["waitingFor"].as_str().unwrap_or_default();
    assert!(
        says.contains("'sdk_chain'") && says.contains("worker"),
        "{waiting}"
    );
    let unserved = status(&host, "unserved-1").await;
    let says = unserved["waitingFor"].as_str().unwrap_or_default();
    assert!(says.contains("'nobody_runs_this'"), "{unserved}");

    // A worker that runs them connects: every one completes.
    let log = dir.path().join("worker.log");
    let _worker = worker_of(&script(), &host, &log, "worker").await;
    let finished = client_of(&script(), &host, &["finish", &count]).await;
    let done = finished["finish"]["done"].as_object().unwrap();
    assert_eq!(done.len(), WAITING);
    for (id, outcome) in done {
        assert_eq!(outcome["status"], "COMPLETED", "{id}: {outcome}");
    }
    let ran = status(&host, "chain-0").await;
    assert!(ran.get("waitingFor").is_none(), "{ran}");

    // The worker declares no work-item filters, so it is sent the unknown
    // name too, and fails it as the SDK does.
    let failed = crate::support::durable::wait_for(&host, "unserved-1", &["Failed"]).await;
    let output = failed["output"].as_str().unwrap_or_default();
    assert!(
        output.contains("OrchestratorNotRegisteredError"),
        "{failed}"
    );
    assert!(failed.get("waitingFor").is_none(), "{failed}");
}
