//! Rewinding failed orchestrations written with the Durable Task Python SDK
//! (tests/durabletask/rewind.py): what failed runs again, what succeeded
//! is not run again, a failed sub-orchestration is rewound with its parent
//! (or created again when it was purged), one that failed in its own code
//! runs its code again, and what cannot be rewound is refused saying why.

use serde_json::{json, Value};

use crate::durable_task_orchestrations::{client_of, grpc_host, worker_of};
use crate::support::workspace;

#[tokio::test(flavor = "multi_thread")]
async fn a_rewound_orchestration_runs_what_failed_again_and_keeps_what_succeeded() {
    let script = workspace().join("tests/durabletask/rewind.py");
    let dir = tempfile::tempdir().unwrap();
    let host = grpc_host(dir.path(), 0).start();
    let log = dir.path().join("activities.log");
    let _worker = worker_of(&script, &host, &log, "worker").await;
    let log_arg = log.display().to_string();
    let steps = client_of(&script, &host, &["scenario", &log_arg]).await;
    let step = |name: &str| -> Value {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}: {steps:?}"))
            .clone()
    };

    let activity = step("activity");
    assert_eq!(activity["failed"]["status"], "FAILED", "{activity}");
    assert_eq!(
        activity["rewound"],
        json!({"status": "COMPLETED", "output": ["steady:a", "flaky:a"], "failure": null}),
        "{activity}"
    );
    // The first activity's result was kept; the failed one ran again.
    assert_eq!(
        (&activity["steady"], &activity["flaky"]),
        (&json!(1), &json!(2))
    );

    let twice = step("twice");
    assert_eq!(
        (&twice["first"], &twice["second"], &twice["third"]["status"]),
        (&json!("FAILED"), &json!("FAILED"), &json!("COMPLETED")),
        "{twice}"
    );
    assert_eq!((&twice["flaky"], &twice["steady"]), (&json!(3), &json!(1)));

    let child = step("child");
    assert_eq!(child["failed"], "FAILED", "{child}");
    assert_eq!(
        child["rewound"]["output"],
        json!("parent:flaky:c"),
        "{child}"
    );
    assert_eq!(child["flaky"], json!(2));

    let purged = step("purged child");
    assert_eq!(purged["purged"], json!(1), "{purged}");
    assert_eq!(
        purged["rewound"]["output"],
        json!("parent:flaky:d"),
        "{purged}"
    );
    assert_eq!(purged["flaky"], json!(2));

    let wasm = step("wasm");
    assert_eq!(wasm["failed"], "FAILED", "{wasm}");
    assert_eq!(wasm["rewound"]["status"], "COMPLETED", "{wasm}");
    assert_eq!(wasm["flaky"], json!(2));

    // Failed in its own code (no task failed): its code runs again, as the
    // managed scheduler rewinds it, and its activity is not run again.
    let own = step("own");
    assert_eq!(own["failed"]["status"], "FAILED", "{own}");
    assert_eq!(own["failed"]["failure"], "no task failed", "{own}");
    assert_eq!(
        own["rewound"],
        json!({"status": "COMPLETED", "output": "own:steady:f", "failure": null}),
        "{own}"
    );
    assert_eq!((&own["own"], &own["steady"]), (&json!(2), &json!(1)));

    let refused = step("refused");
    assert_eq!(
        refused["completed"]["code"], "FAILED_PRECONDITION",
        "{refused}"
    );
    assert_eq!(refused["unknown"]["code"], "NOT_FOUND", "{refused}");

    // Their histories, read with the SDK's `get_orchestration_history`.
    let history = step("history");
    assert_eq!(
        history["steps"],
        json!([
            "ExecutionStarted",
            "TaskScheduled",
            "TaskCompleted",
            "TaskScheduled",
            "TaskCompleted",
            "ExecutionCompleted"
        ]),
        "{history}"
    );
    assert_eq!(
        history["wasm"],
        json!([
            "ExecutionStarted",
            "TaskScheduled",
            "TaskCompleted",
            "ExecutionCompleted"
        ]),
        "{history}"
    );
    assert_eq!(
        history["own"],
        json!([
            "ExecutionStarted",
            "TaskScheduled",
            "TaskCompleted",
            "ExecutionCompleted"
        ]),
        "{history}"
    );
    assert_eq!(history["unknown"]["code"], "NOT_FOUND", "{history}");
}
