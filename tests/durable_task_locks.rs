//! Critical sections on durable entities (`lock_entities` of the Durable
//! Task SDKs), run by agenthost for the Python SDK's worker
//! (tests/durabletask/entity_locks.py): two orchestrations moving units
//! between the same two accounts never see a move half done, a lock the
//! code forgot or threw inside is released, what others send a held entity
//! waits in order, and a host killed with -9 in the middle of the moves
//! loses none and applies none twice.

use std::time::Duration;

use serde_json::{json, Value};

use crate::durable_task_orchestrations::{client_of, grpc_host, lines_of, worker_of};
use crate::support::{free_port, workspace};

fn script() -> std::path::PathBuf {
    workspace().join("tests/durabletask/entity_locks.py")
}

#[tokio::test(flavor = "multi_thread")]
async fn critical_sections_keep_two_accounts_whole_and_what_waits_for_a_lock_runs_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let host = grpc_host(dir.path(), 0).start();
    let log = dir.path().join("moves.log");
    let _worker = worker_of(&script(), &host, &log, "worker").await;
    let steps = client_of(&script(), &host, &["scenario"]).await;
    let step = |name: &str| -> Value {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}: {steps:?}"))
            .clone()
    };

    // 30 moves each way, each under a lock on both accounts: inside the
    // lock the balances always summed to zero, and they end at zero.
    let transfers = step("transfers");
    for done in transfers["done"].as_array().unwrap() {
        assert_eq!(done["status"], "COMPLETED", "{transfers}");
        assert_eq!(done["output"], json!({"seen_off": 0}), "{transfers}");
    }
    assert_eq!(transfers["balances"], json!([0, 0]), "{transfers}");
    assert_eq!(transfers["holders"], json!([null, null]), "{transfers}");

    // A lock never released by the code, and one held as the code threw:
    // each is let go, so the next lock on the account is granted.
    let forgotten = step("forgotten");
    assert_eq!(forgotten["status"], "COMPLETED", "{forgotten}");
    assert_eq!(forgotten["output"], json!(1));
    assert_eq!(forgotten["after"]["output"], json!(101), "{forgotten}");
    let thrown = step("thrown");
    assert_eq!(thrown["status"], "FAILED", "{thrown}");
    assert!(
        thrown["failure"]
            .as_str()
            .is_some_and(|f| f.contains("broke inside the lock")),
        "{thrown}"
    );
    assert_eq!(thrown["after"]["output"], json!(101), "{thrown}");

    // While held: a signal, another orchestration's lock request and a
    // second signal wait; the holder's terminate releases the account and
    // they run in the order they came (0 + 1, + 100 under the lock, + 10).
    let held = step("held");
    assert_eq!(held["holder"], "holding", "{held}");
    assert_eq!(
        held["while_held"],
        json!({"balance": 0, "waiter": "RUNNING"}),
        "{held}"
    );
    assert_eq!(held["waiter"]["output"], json!(101), "{held}");
    assert_eq!(held["balance"], json!(111), "{held}");
    assert_eq!(held["after"], Value::Null, "{held}");

    // Terminated while its request waited at the second of its accounts:
    // the first is free at once, and the second, granted to it after its
    // holder ended, is let go rather than held for good.
    let abandoned = step("abandoned");
    assert_eq!(
        abandoned["waiting_at"],
        json!({"p1": "pair-waits", "p2": "holds-p2"}),
        "{abandoned}"
    );
    assert_eq!(abandoned["p1_next"]["output"], json!(100), "{abandoned}");
    assert_eq!(abandoned["p2_next"]["output"], json!(100), "{abandoned}");
    assert_eq!(abandoned["after"], json!([null, null]), "{abandoned}");
    assert_eq!(abandoned["balances"], json!([100, 100]), "{abandoned}");

    // An entity left without state removes itself; a later operation
    // creates it again.
    assert_eq!(
        step("removed"),
        json!({"step": "removed", "removed": true, "again": 5})
    );
    // A raise cannot forge the host's own messages to an entity.
    assert_eq!(
        step("forged"),
        json!({"step": "forged", "codes": ["INVALID_ARGUMENT", "INVALID_ARGUMENT", "INVALID_ARGUMENT", "INVALID_ARGUMENT"], "holder": null, "balance": 111})
    );
    assert_eq!(
        step("cleaned"),
        json!({"step": "cleaned", "removed": 0, "released": 0})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_locked_moves_each_way_survive_a_host_killed_in_their_middle() {
    let dir = tempfile::tempdir().unwrap();
    // A fixed gRPC port, so the worker finds the restarted host where it was.
    let port = free_port();
    let builder = grpc_host(dir.path(), port);
    let mut host = builder.start();
    let log = dir.path().join("moves.log");
    let _worker = worker_of(&script(), &host, &log, "worker").await;

    const EACH: usize = 200;
    client_of(&script(), &host, &["transfers", &EACH.to_string()]).await;
    // Killed once a third of the moves are behind it.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while lines_of(&log).len() < 2 * EACH / 3 {
        assert!(std::time::Instant::now() < deadline, "{}", host.output());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    host.kill();
    let at_kill = lines_of(&log).len();

    let host = builder.start();
    host.wait_logged("an SDK worker connected", 0).await;
    let settled = client_of(&script(), &host, &["settled", &EACH.to_string()]).await;
    let settled = &settled["settled"];
    for done in settled["done"].as_array().unwrap() {
        assert_eq!(done["status"], "COMPLETED", "{settled}");
        // No move was ever seen half done, before the kill or after it.
        assert_eq!(done["output"], json!({"seen_off": 0}), "{settled}");
    }
    // Every move was applied once: 200 each way leave both at zero.
    assert_eq!(settled["balances"], json!([0, 0]), "{settled}");
    // No lock is left held.
    assert_eq!(settled["holders"], json!([null, null]), "{settled}");
    assert!(
        at_kill < 2 * EACH,
        "the kill came before the moves were over ({at_kill})"
    );
}
