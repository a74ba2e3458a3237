//! What the Durable Task SDK's own emulator suite checks
//! (microsoft/durabletask-python, `tests/durabletask-azuremanaged`, run
//! unmodified by `make durabletask-conformance`), written in our words
//! (tests/durabletask/suite_behaviours.py), so that `make test` holds each
//! behaviour without a fetched copy of it: absent payloads read back absent,
//! failures of the worker's own types, retries and their timeout, the async
//! client, queries and purges by time, entity queries, what a lock refuses,
//! work item filters and versions, and the SDK's scheduled tasks.

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::durable_task_orchestrations::{client_of, grpc_host};
use crate::support::workspace;

fn script() -> std::path::PathBuf {
    workspace().join("tests/durabletask/suite_behaviours.py")
}

/// The steps `mode` printed, run against a host of its own.
async fn steps_of(mode: &str) -> HashMap<String, Value> {
    let dir = tempfile::tempdir().unwrap();
    let host = grpc_host(dir.path(), 0).start();
    client_of(&script(), &host, &[mode]).await
}

fn step<'a>(steps: &'a HashMap<String, Value>, name: &str) -> &'a Value {
    steps
        .get(name)
        .unwrap_or_else(|| panic!("no step {name}: {steps:?}"))
}

/// A serialized payload, parsed.
fn parsed(text: &Value) -> Value {
    text.as_str()
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or(Value::Null)
}

fn message(state: &Value) -> &str {
    state["failure"]["message"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_sdk_suite_checks_holds_through_the_sync_and_the_async_client() {
    let steps = steps_of("scenario").await;
    for tag in ["sync", "async"] {
        let step = |name: &str| step(&steps, &format!("{tag} {name}")).clone();
        // No input, output or custom status: absent, not "null".
        let empty = step("empty");
        assert_eq!(empty["id"], empty["asked"], "{empty}");
        assert_eq!(
            (&empty["name"], &empty["status"]),
            (&json!("nothing"), &json!("COMPLETED"))
        );
        for field in ["input", "output", "custom", "failure"] {
            assert_eq!(empty[field], Value::Null, "{tag} {field}: {empty}");
        }
        let sequence = step("sequence");
        assert_eq!(sequence["input"], "1", "{sequence}");
        assert_eq!(
            parsed(&sequence["output"]),
            json!((1..=11).collect::<Vec<_>>())
        );
        assert_eq!(sequence["custom"], Value::Null);
        // A caught activity failure, its own message, then two activities
        // that undo.
        let compensation = step("compensation");
        assert_eq!(compensation["status"], "COMPLETED", "{compensation}");
        assert_eq!(parsed(&compensation["output"])["caught"], "refused booking");
        assert_eq!(compensation["undone"], 2, "{compensation}");
        // Ten sub-orchestrations at once, three activities each.
        let fan = step("child fan-out");
        assert_eq!(
            (&fan["status"], &fan["output"]),
            (&json!("COMPLETED"), &json!("75")),
            "{fan}"
        );
        assert_eq!(fan["activities"], 30, "{fan}");
        // Raised before the code waits: each taken by its name.
        let events = step("events before the wait");
        assert_eq!(
            parsed(&events["output"]),
            json!(["a", "b", "c"]),
            "{events}"
        );
        // A custom status outlives the end.
        let custom = step("custom status");
        assert_eq!(custom["custom"], "\"almost there\"", "{custom}");
        assert_eq!(
            (&custom["input"], &custom["output"]),
            (&Value::Null, &Value::Null)
        );
        // New GUIDs: three, distinct, the same through each replay.
        let uuids = parsed(&step("new uuid")["output"]);
        let distinct: std::collections::HashSet<&str> = uuids
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|u| uuid::Uuid::parse_str(u).is_ok())
            .collect();
        assert_eq!(distinct.len(), 3, "{uuids}");
        // Output the SDK cannot encode: failed with the SDK's own type.
        let unencodable = step("unencodable output");
        assert_eq!(unencodable["status"], "FAILED", "{unencodable}");
        assert_eq!(
            unencodable["failure"]["type"],
            "durabletask.internal.json_encode_output_exception.JsonEncodeOutputException"
        );
        assert!(
            message(&unencodable).starts_with("The orchestration result could not be encoded"),
            "{unencodable}"
        );
        let terminate = step("terminate");
        assert_eq!(terminate["started"], "RUNNING", "{terminate}");
        assert_eq!(
            (&terminate["status"], &terminate["output"]),
            (&json!("TERMINATED"), &json!("\"stopped\""))
        );
        let recursive = step("terminate recursive");
        assert_eq!(
            recursive,
            json!({"step": format!("{tag} terminate recursive"), "root": "TERMINATED",
                   "child": "TERMINATED", "deleted": 2, "after": null, "child_after": null})
        );
        let restart = step("restart");
        assert_eq!(
            (&restart["same"], &restart["fresh_is_new"]),
            (&json!(true), &json!(true))
        );
        for run in ["again", "fresh"] {
            assert_eq!(
                (&restart[run]["status"], &restart[run]["output"]),
                (&json!("COMPLETED"), &json!("8")),
                "{restart}"
            );
        }
        // Retries: a child retried three times, each retrying its activity
        // three times; waits of 1, 2, 4 s cut short by a 14 s timeout.
        let retried = step("retry policies");
        assert_eq!(
            retried["failure"]["type"],
            "durabletask.task.TaskFailedError"
        );
        assert!(
            message(&retried).starts_with("Sub-orchestration task #1 failed")
                && message(&retried).contains("Activity task #1 failed: refused retried"),
            "{retried}"
        );
        assert_eq!(retried["failure"]["stack"], true);
        let timed = step("retry timeout");
        assert_eq!(timed["status"], "FAILED", "{timed}");
        assert!(
            message(&timed).contains("Activity task #1 failed: refused timed"),
            "{timed}"
        );
        assert_eq!(
            step("retry runs"),
            json!({"step": format!("{tag} retry runs"), "child": 3, "activity": 9, "timed": 4})
        );
    }

    // Queries by creation time, by status, without and with payloads.
    let query = step(&steps, "query");
    assert_eq!(
        query["in_window"],
        json!(["query-bad", "query-failed", "query-ok"]),
        "{query}"
    );
    assert_eq!(query["later_window"], json!([]));
    assert_eq!(query["plain"], json!({"input": null, "output": null}));
    assert_eq!(
        query["fetched"],
        json!({"input": "1", "output": "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]"})
    );
    assert_eq!(query["failed"][0]["id"], "query-failed", "{query}");
    assert_eq!(query["failed"].as_array().map(Vec::len), Some(1));
    assert!(query["failed"][0]["failure"]["type"].is_string(), "{query}");
    let purged = step(&steps, "purge by time");
    assert!(
        purged["deleted"].as_u64().is_some_and(|n| n >= 2),
        "{purged}"
    );
    assert_eq!(
        (
            &purged["ok"],
            &purged["failed_kept"],
            &purged["later_deleted"]
        ),
        (&Value::Null, &json!(true), &json!(0)),
        "{purged}"
    );
    let entities = step(&steps, "entity queries");
    assert_eq!(
        entities,
        &json!({"step": "entity queries", "bare": {"state": null}, "full": 5,
                "in_window": ["@account@listed"], "later_window": []})
    );
    let lock = step(&steps, "inside a lock");
    assert_eq!(lock["status"], "COMPLETED", "{lock}");
    assert_eq!(
        parsed(&lock["output"]),
        json!({"signal_refused": true, "second_refused": true, "balance": 5})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn work_item_filters_and_versions_choose_what_each_sdk_worker_is_sent() {
    let steps = steps_of("filters").await;
    let step = |name: &str| step(&steps, name).clone();
    let outcome = |state: &Value| (state["status"].clone(), state["output"].clone());
    let completed = |output: &str| (json!("COMPLETED"), json!(output));
    assert_eq!(outcome(&step("auto filters")), completed("6"));
    let explicit = step("explicit filters");
    assert_eq!(outcome(&explicit), completed("11"));
    assert_eq!(explicit["entity"], 10, "{explicit}");
    // What no filter names waits, Pending, and is never sent.
    let narrow = step("not matching");
    assert_eq!(outcome(&narrow["other"]), completed("\"other\""));
    assert_eq!(narrow["waiting"], "PENDING", "{narrow}");
    assert_eq!(narrow["pings"], json!(["allowed"]), "{narrow}");
    let strict = step("strict versions");
    assert_eq!(outcome(&strict["matching"]), completed("11"));
    assert_eq!(
        (&strict["old"], &strict["unversioned"]),
        (&json!("PENDING"), &json!("PENDING"))
    );
    let listed = step("filter versions");
    assert_eq!(outcome(&listed["listed"]), completed("2"));
    assert_eq!(listed["other"], "PENDING");
    // Without filters, the worker's versioning fails what it does not take.
    let mismatch = step("strict mismatch");
    assert_eq!(mismatch["status"], "FAILED", "{mismatch}");
    assert!(message(&mismatch).contains("does not match"), "{mismatch}");
    let newer = step("newer version");
    assert_eq!(newer["status"], "FAILED", "{newer}");
    assert!(message(&newer).contains("is greater than"), "{newer}");
    assert_eq!(outcome(&newer["older"]), completed("\"ran\""));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdks_scheduled_tasks_run_pause_resume_update_and_list() {
    let steps = steps_of("schedules").await;
    let step = |name: &str| step(&steps, name).clone();
    assert_eq!(
        step("schedule runs"),
        json!({"step": "schedule runs", "ran": true, "id": "every-second", "status": "ACTIVE", "last_run": true})
    );
    assert_eq!(
        step("schedule paused"),
        json!({"step": "schedule paused", "paused": "PAUSED", "held": true, "resumed": "ACTIVE", "again": true})
    );
    assert_eq!(
        step("schedule updated"),
        json!({"step": "schedule updated", "interval": 2.0, "input": "after"})
    );
    assert_eq!(
        step("schedules listed"),
        json!({"step": "schedules listed", "listed": ["listed-0", "listed-1", "listed-2"], "after": true})
    );
}

/// Payloads an SDK keeps in its large-payload store (the suite's Azure Blob
/// tests; a directory here) travel through the host as the store's tokens,
/// which are not JSON: inputs, activity results, events and a terminate's
/// output come back whole. Refused before (the input "is not JSON").
#[tokio::test(flavor = "multi_thread")]
async fn payloads_an_sdk_keeps_outside_pass_through_as_its_tokens() {
    let steps = steps_of("payloads").await;
    let step = |name: &str| step(&steps, name).clone();
    let input = step("large input");
    assert_eq!(
        (&input["status"], &input["same"]),
        (&json!("COMPLETED"), &json!(true)),
        "{input}"
    );
    // The host kept the tokens, not the payloads.
    assert_eq!(
        (&input["input_token"], &input["output_token"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(step("large activity result")["output"], 10_240);
    assert_eq!(
        step("large fan-in")["output"],
        json!([2048, 2048, 2048, 2048, 2048])
    );
    assert_eq!(step("large event")["output"], 5_000);
    let terminated = step("large terminate");
    assert_eq!(
        (&terminated["status"], &terminated["length"]),
        (&json!("TERMINATED"), &json!(3_000))
    );
}
