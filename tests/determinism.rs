//! Replay is deterministic by construction, and a change of code that
//! changes the call sequence is detected.

use serde_json::{json, Value};

use crate::support::components::{wait_components, wait_served};
use crate::support::durable::{raise, start, wait_for};
use crate::support::host::Host;
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

/// Waits until the `versioned` instance `id` journaled its event wait.
async fn wait_until_waiting(host: &Host, id: &str) {
    let history_url = format!(
        "{}?showHistory=true",
        crate::support::durable::instance_url(host, id)
    );
    for _ in 0..600 {
        let history = get_json::<Value>(&history_url).await;
        let events = history["historyEvents"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if history["runtimeStatus"] == "Running"
            && events.iter().any(|e| e["call"] == "wait_for_event")
        {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!(
        "instance {id} never reached its event wait:\n{}",
        host.output()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_instance_finishes_on_the_version_it_started_with() {
    let dir = tempfile::tempdir().unwrap();
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    let file = components.join("versioned.wasm");
    std::fs::copy(component("versioned-v1"), &file).unwrap();
    let builder = HostBuilder::new(dir.path()).components(&[]);
    let mut host = builder.start();
    let v1 = wait_served(&host, "versioned", None).await;
    let old = start(&host, "versioned", &json!(null)).await;
    wait_until_waiting(&host, &old).await;

    // Replaced while it waits, then the host restarts: the instance still
    // replays on version 1 (from the bytes the store kept).
    std::fs::copy(component("versioned-v2"), &file).unwrap();
    let v2 = wait_served(&host, "versioned", Some(&v1)).await;
    assert_eq!(host.terminate(), Some(0));
    let host = builder.start();
    let new = start(&host, "versioned", &json!(null)).await;
    wait_until_waiting(&host, &new).await;
    let (_, status) = crate::support::durable::status(&host, &old).await;
    assert_eq!(status["componentDigest"], v1.as_str());
    let (_, status) = crate::support::durable::status(&host, &new).await;
    assert_eq!(status["componentDigest"], v2.as_str());

    // Deleted: both instances go on, each on its own version.
    std::fs::remove_file(&file).unwrap();
    wait_components(&host, "unloading the deleted file", |b| {
        b["components"] == json!([])
    })
    .await;
    for (id, version, step) in [(&old, "v1", "step_a"), (&new, "v2", "step_b")] {
        assert_eq!(raise(&host, id, "go", &json!(null)).await, 202);
        let done = wait_for(&host, id, &["Completed", "Failed"]).await;
        assert_eq!(done["runtimeStatus"], "Completed", "{done}");
        assert_eq!(done["output"], version, "{done}");
        let history = get_json::<Value>(format!(
            "{}?showHistory=true",
            crate::support::durable::instance_url(&host, id)
        ))
        .await;
        assert!(history.to_string().contains(step), "{history}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn code_that_takes_other_steps_on_replay_fails_as_non_deterministic() {
    // One version whose step comes from a granted variable: changing the
    // variable across a restart changes the calls the code makes.
    let dir = tempfile::tempdir().unwrap();
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::copy(component("versioned-v1"), components.join("versioned.wasm")).unwrap();
    std::fs::write(
        components.join("versioned.toml"),
        "env = [\"VERSIONED_STEP\"]\n",
    )
    .unwrap();
    let mut host = HostBuilder::new(dir.path())
        .components(&[])
        .env("VERSIONED_STEP", "step_a")
        .start();
    let id = start(&host, "versioned", &json!(null)).await;
    wait_until_waiting(&host, &id).await;
    assert_eq!(host.terminate(), Some(0));

    let host = HostBuilder::new(dir.path())
        .components(&[])
        .env("VERSIONED_STEP", "step_b")
        .start();
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
