//! The fields of the Durable Task protocol that the SDKs build on, as the
//! managed Durable Task Scheduler gives them, read raw by a worker and a
//! client of the protocol's own messages (tests/durabletask/protocol_shapes.py):
//! execution ids of 32 hex digits, new for each execution, on which the
//! JavaScript SDK derives child ids (`{execution id}:0001`); a
//! sub-orchestration's parent info with its name and version; a JSON `null`
//! output read back as `null`, not as none; instance ids past 100
//! characters refused; history numbered as the managed scheduler does
//! (`ExecutionStarted` 0, the end after the last action).

use serde_json::{json, Value};

use crate::durable_task_orchestrations::{client_of, grpc_host};
use crate::support::workspace;

fn is_execution_id(value: &Value) -> bool {
    value
        .as_str()
        .is_some_and(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_protocols_ids_parents_nulls_limits_and_numbering_are_the_managed_schedulers() {
    let script = workspace().join("tests/durabletask/protocol_shapes.py");
    let dir = tempfile::tempdir().unwrap();
    let host = grpc_host(dir.path(), 0).start();
    let steps = client_of(&script, &host, &["scenario"]).await;
    let step = |name: &str| -> Value {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}: {steps:?}"))
            .clone()
    };

    // Execution ids: 32 hex digits, the same in the work item, in its
    // ExecutionStarted and in the instance's state.
    let parent = step("parent");
    let state = &parent["state"];
    assert_eq!(
        state["status"], "ORCHESTRATION_STATUS_COMPLETED",
        "{parent}"
    );
    let output: Value = serde_json::from_str(state["output"].as_str().unwrap()).unwrap();
    let own = &output["own"];
    assert!(is_execution_id(&own["request"]), "{output}");
    assert_eq!(own["request"], own["started"], "{output}");
    assert_eq!(own["request"], state["execution"], "{output}");
    // The child runs under the id derived from it, and is told its parent.
    let child = &output["child"];
    let execution = own["request"].as_str().unwrap();
    assert_eq!(child["id"], json!(format!("{execution}:0001")), "{output}");
    assert!(is_execution_id(&child["own"]["request"]), "{output}");
    assert_ne!(child["own"]["request"], own["request"], "{output}");
    assert_eq!(child["version"], "2.0", "{output}");
    assert_eq!(child["has_parent"], true, "{output}");
    assert_eq!(child["parent_name"], "shape_parent", "{output}");
    assert_eq!(child["parent_version"], "1.5", "{output}");
    assert_eq!(child["parent_id"], "shape-parent", "{output}");
    assert_eq!(child["parent_execution"], own["request"], "{output}");
    // Its history, numbered as the managed scheduler numbers it.
    assert_eq!(
        parent["history"],
        json!([
            ["OrchestratorStarted", -1],
            ["ExecutionStarted", 0],
            ["SubOrchestrationInstanceCreated", 1],
            ["OrchestratorStarted", -1],
            ["SubOrchestrationInstanceCompleted", -1],
            ["ExecutionCompleted", 2]
        ]),
        "{parent}"
    );

    // JSON null is an output (and an input) of its own; none is none.
    let null = step("null");
    assert_eq!(
        (&null["null"]["has_output"], &null["null"]["output"]),
        (&json!(true), &json!("null")),
        "{null}"
    );
    assert_eq!(
        (&null["null"]["has_input"], &null["null"]["input"]),
        (&json!(true), &json!("null")),
        "{null}"
    );
    assert_eq!(null["none"]["status"], "ORCHESTRATION_STATUS_COMPLETED");
    assert_eq!(null["none"]["has_output"], false, "{null}");
    assert_eq!(null["none"]["has_input"], false, "{null}");

    // A continue-as-new begins an execution of its own, and so does a
    // restart.
    let generations = step("generations");
    let seen: Vec<Value> =
        serde_json::from_str(generations["state"]["output"].as_str().unwrap()).unwrap();
    assert_eq!(seen.len(), 3, "{generations}");
    assert!(seen
        .iter()
        .all(|s| is_execution_id(&s["request"]) && s["request"] == s["started"]));
    let ids: std::collections::HashSet<_> = seen.iter().map(|s| s["request"].clone()).collect();
    assert_eq!(ids.len(), 3, "{generations}");
    assert_eq!(generations["state"]["execution"], seen[2]["request"]);
    let restarted = step("restarted");
    assert!(
        is_execution_id(&restarted["second"]["execution"]),
        "{restarted}"
    );
    assert_ne!(
        restarted["first"]["execution"], restarted["second"]["execution"],
        "{restarted}"
    );

    // Instance ids: 100 characters at most, as the managed scheduler allows.
    let limits = step("limits");
    assert_eq!(
        limits["longest"]["status"], "ORCHESTRATION_STATUS_COMPLETED",
        "{limits}"
    );
    for refused in [&limits["too_long"], &limits["entity"]] {
        assert_eq!(refused["code"], "INVALID_ARGUMENT", "{limits}");
        assert!(
            refused["details"]
                .as_str()
                .is_some_and(|d| d.contains("length limit is 100")),
            "{limits}"
        );
    }
}
