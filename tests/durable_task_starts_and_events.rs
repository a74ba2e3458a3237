//! Events one orchestration sends another (the SDKs' `send_event`), tags,
//! id-reuse policies and restarts under a new id, as the managed Durable
//! Task Scheduler has them, driven by the Python SDK
//! (tests/durabletask/starts_and_events.py): an event is raised once
//! however often its sender replays, and dropped when its target is gone;
//! tags, a client's and a sub-orchestration's, come back in the state; a
//! policy replaces what it lists, refuses what it does not
//! (ALREADY_EXISTS), and is itself refused when it would reuse running
//! instances but not terminated ones; a running instance restarts under a
//! new id, not under its own.

use serde_json::{json, Value};

use crate::durable_task_orchestrations::{client_of, grpc_host, lines_of, worker_of};
use crate::support::workspace;

#[tokio::test(flavor = "multi_thread")]
async fn events_tags_reuse_policies_and_restarts_as_the_managed_scheduler_has_them() {
    let script = workspace().join("tests/durabletask/starts_and_events.py");
    let dir = tempfile::tempdir().unwrap();
    let host = grpc_host(dir.path(), 0).start();
    let log = dir.path().join("sent.log");
    let _worker = worker_of(&script, &host, &log, "worker").await;
    let log_arg = log.display().to_string();
    let steps = client_of(&script, &host, &["scenario", &log_arg]).await;
    let step = |name: &str| -> Value {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}: {steps:?}"))
            .clone()
    };
    let completed = |output: Value| json!({"status": "COMPLETED", "output": output});
    let outcome = |state: &Value| json!({"status": state["status"], "output": state["output"]});

    // The receiver got the event once: its sender's three later episodes
    // replayed the send without sending it again.
    let with_data = step("with data");
    assert_eq!(
        outcome(&with_data["sender"]),
        completed(json!(3)),
        "{with_data}"
    );
    assert_eq!(
        outcome(&with_data["receiver"]),
        completed(json!({"first": {"message": "hello"}, "second": false})),
        "{with_data}"
    );
    let bare = step("without data");
    assert_eq!(
        outcome(&bare["receiver"]),
        completed(json!("received signal")),
        "{bare}"
    );
    // An event to no instance, or to one that is over, is dropped; the
    // sender completes and nothing is created.
    let missing = step("missing target");
    assert_eq!(
        outcome(&missing["sender"]),
        completed(json!(3)),
        "{missing}"
    );
    assert_eq!(missing["nobody"], Value::Null, "{missing}");
    assert_eq!(outcome(&missing["over_sender"]), completed(json!(3)));
    assert_eq!(
        outcome(&missing["over"]),
        completed(json!("v")),
        "{missing}"
    );
    let sent = lines_of(&log);
    for key in ["data", "bare", "missing", "over"] {
        let line = format!("sent {key}");
        assert_eq!(sent.iter().filter(|l| **l == line).count(), 1, "{sent:?}");
    }

    let tags = step("tags");
    let given = json!({"env": "test", "owner": "durable"});
    assert_eq!(tags["got"], given, "{tags}");
    assert_eq!(tags["untagged"], json!({}), "{tags}");
    assert_eq!(tags["queried"], json!([given]), "{tags}");
    assert_eq!(tags["restarted"], given, "{tags}");
    // A sub-orchestration's, as its parent's worker sent them.
    assert_eq!(
        outcome(&tags["parent"]),
        completed(json!("child")),
        "{tags}"
    );
    assert_eq!(
        tags["child"],
        json!({"team": "blue", "tier": "child"}),
        "{tags}"
    );
    assert_eq!(tags["parent_tags"], json!({}), "{tags}");

    // Over a running instance: a policy that does not list Running, and
    // no policy, refuse; one that lists it terminates it and replaces it.
    let running = step("reuse running");
    for refused in ["deduped", "default"] {
        assert_eq!(running[refused]["code"], "ALREADY_EXISTS", "{running}");
    }
    assert_eq!(running["kept"], "RUNNING", "{running}");
    assert_eq!(
        running["replaced"],
        json!({"status": "COMPLETED", "input": {"value": "replacement", "wait": false}, "output": "replacement"}),
        "{running}"
    );
    let invalid = step("reuse invalid");
    assert_eq!(invalid["refused"]["code"], "INVALID_ARGUMENT", "{invalid}");
    assert!(
        invalid["refused"]["details"]
            .as_str()
            .unwrap_or_default()
            .contains("Invalid reusable statuses: cannot exclude 'Terminated' while also allowing reuse of running instances"),
        "{invalid}"
    );
    assert_eq!(invalid["status"], "SUSPENDED", "{invalid}");
    assert_eq!(invalid["input"]["value"], "original", "{invalid}");
    let finished = step("reuse finished");
    assert_eq!(finished["none"]["code"], "ALREADY_EXISTS", "{finished}");
    assert_eq!(
        outcome(&finished["replaced"]),
        completed(json!("replacement"))
    );

    let restart = step("restart running");
    assert_eq!(restart["own"]["code"], "FAILED_PRECONDITION", "{restart}");
    assert_ne!(restart["new"], "restart-running", "{restart}");
    assert_eq!(restart["both"], json!(["RUNNING", "RUNNING"]), "{restart}");
    assert_eq!(outcome(&restart["ended"]), completed(json!("again")));
    assert_eq!(restart["original"], "RUNNING", "{restart}");
    assert_eq!(restart["missing"]["code"], "NOT_FOUND", "{restart}");
}
