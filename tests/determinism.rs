//! Replay is deterministic by construction, and a change of code that
//! changes the call sequence is detected.

use serde_json::{json, Value};

use crate::support::durable::{raise, start, wait_for};
use crate::support::{component, get_json, HostBuilder};

#[tokio::test(flavor = "multi_thread")]
async fn system_time_rand_and_hashmap_order_replay_identically() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .start();
    let id = start(&host, "determinism", &json!(null)).await;
    // The activity's input (journaled) holds the values of the first run.
    let status = wait_for_echo(&host, &id).await;
    let echoed = status["customStatus"]["echoed"].clone();
    assert_eq!(raise(&host, &id, "go", &json!(true)).await, 202);
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(
        done["runtimeStatus"], "Completed",
        "a changed value would fail the replay: {done}"
    );
    // After several replays, the code computed exactly the values it journaled.
    assert_eq!(done["output"]["observed"], echoed);
    assert_eq!(done["output"]["echoed"], echoed);
    assert_eq!(echoed["map_order"].as_array().unwrap().len(), 8);
    assert!(echoed["random"].as_u64().is_some());
    let created = chrono::DateTime::parse_from_rfc3339(done["createdTime"].as_str().unwrap())
        .unwrap()
        .timestamp_millis();
    let seen = echoed["now_ms"].as_i64().unwrap();
    assert!(
        (seen - created).abs() < 60_000,
        "SystemTime::now() is the step time ({seen} vs created {created})"
    );
}

/// Waits until the instance has journaled the activity's result in its custom status.
async fn wait_for_echo(host: &crate::support::host::Host, id: &str) -> Value {
    for _ in 0..600 {
        let (_, body) = crate::support::durable::status(host, id).await;
        if body["customStatus"]["echoed"].is_object() {
            return body;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the determinism instance never reached its wait");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_version_that_calls_other_steps_fails_as_non_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::copy(component("versioned-v1"), components.join("versioned.wasm")).unwrap();
    let builder = HostBuilder::new(dir.path()).components(&[]);
    let mut host = builder.start();
    let id = start(&host, "versioned", &json!(null)).await;
    // v1 ran step_a and now waits for "go".
    let history_url = format!(
        "{}?showHistory=true",
        crate::support::durable::instance_url(&host, &id)
    );
    let mut waiting = false;
    for _ in 0..600 {
        let history = get_json::<Value>(&history_url).await;
        let events = history["historyEvents"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        waiting = history["runtimeStatus"] == "Running"
            && events.iter().any(|e| e["call"] == "wait_for_event");
        if waiting {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        waiting,
        "version 1 never reached its event wait:\n{}",
        host.output()
    );
    assert_eq!(host.terminate(), Some(0));

    std::fs::copy(component("versioned-v2"), components.join("versioned.wasm")).unwrap();
    let host = builder.start();
    assert_eq!(raise(&host, &id, "go", &json!(null)).await, 202);
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Failed");
    let error = done["output"].as_str().unwrap();
    assert!(
        error.starts_with("non-deterministic behavior detected:"),
        "{error}"
    );
    assert!(
        error.contains("call-activity(step_a)") && error.contains("call-activity(step_b)"),
        "{error}"
    );
}
