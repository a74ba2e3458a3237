//! The components directory is watched: files dropped, replaced, truncated or
//! deleted while the host serves change what it serves, without a restart.

use std::path::Path;
use std::time::Instant;

use serde_json::Value;

use crate::support::components::{digest_of, wait_components, wait_served};
use crate::support::durable::{raise, start, wait_for};
use crate::support::host::Host;
use crate::support::{client, component, get_json, FakeModel, HostBuilder, Reply};

/// Asks the `versioned` agent which version answers: the fake model calls
/// its `version` tool and reports the tool's result.
async fn ask_version(host: &Host, model: &FakeModel) -> (u16, String) {
    model.push(Reply::ToolCall("version".into(), serde_json::json!({})));
    model.push(Reply::ToolResult);
    let response = client()
        .post(host.url("/api/agents/versioned/run"))
        .body("Which version are you?")
        .send()
        .await
        .unwrap();
    (
        response.status().as_u16(),
        response.text().await.unwrap_or_default(),
    )
}

/// Half of a real component: what a reader sees while a copy is under way.
fn write_truncated(from: &Path, to: &Path) {
    let bytes = std::fs::read(from).unwrap();
    std::fs::write(to, &bytes[..bytes.len() / 2]).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn dropped_replaced_truncated_and_deleted_files_change_what_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["weather"])
        .openai(&model, "sk-test")
        .start();
    let components = dir.path().join("components");
    let file = components.join("versioned.wasm");

    // Added: the endpoint appears (the benchmark measures how fast).
    let copied = Instant::now();
    std::fs::copy(component("versioned-v1"), &file).unwrap();
    let v1 = wait_served(&host, "versioned", None).await;
    assert_eq!(
        ask_version(&host, &model).await,
        (200, "tool said: \"v1\"".into())
    );
    eprintln!("file copied → first answer: {:?}", copied.elapsed());
    let started = client()
        .post(host.url("/api/orchestrators/versioned"))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202, "its orchestration is served too");
    let instance = started.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();

    // Replaced: new requests get the new version's answer.
    std::fs::copy(component("versioned-v2"), &file).unwrap();
    wait_served(&host, "versioned", Some(&v1)).await;
    assert_eq!(
        ask_version(&host, &model).await,
        (200, "tool said: \"v2\"".into())
    );
    // The instance started before the replacement finishes on version 1.
    assert_eq!(raise(&host, &instance, "go", &Value::Null).await, 202);
    let done = wait_for(&host, &instance, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], "v1", "{done}");
    assert_eq!(done["componentDigest"], v1.as_str());

    // Truncated, as a new file and over the served one: reported, nothing else changes.
    write_truncated(&component("writer"), &components.join("broken.wasm"));
    write_truncated(&component("versioned-v1"), &file);
    let body = wait_components(&host, "reporting both truncated files", |b| {
        b["failures"].as_array().is_some_and(|f| f.len() == 2)
    })
    .await;
    for failure in body["failures"].as_array().unwrap() {
        assert!(
            failure["error"]
                .as_str()
                .unwrap()
                .contains("not a valid WebAssembly component"),
            "{failure}"
        );
    }
    let versioned = body["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "versioned")
        .unwrap();
    assert!(versioned["load_error"].is_string(), "{versioned}");
    assert_eq!(
        ask_version(&host, &model).await,
        (200, "tool said: \"v2\"".into()),
        "the previous version keeps serving"
    );
    let health: Value = get_json(host.url("/api/health")).await;
    let names: Vec<&str> = health["agents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a["name"].as_str())
        .collect();
    assert_eq!(names, ["versioned", "weather"]);

    // Deleted: 404 naming the agents that remain; failures of gone files go too.
    std::fs::remove_file(&file).unwrap();
    std::fs::remove_file(components.join("broken.wasm")).unwrap();
    wait_components(&host, "unloading the deleted files", |b| {
        digest_of(b, "versioned").is_none() && b["failures"] == serde_json::json!([])
    })
    .await;
    let response = client()
        .post(host.url("/api/agents/versioned/run"))
        .body("still there?")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let error: Value = response.json().await.unwrap();
    assert_eq!(error["agents"], serde_json::json!(["weather"]), "{error}");
    let orchestration = client()
        .post(host.url("/api/orchestrators/versioned"))
        .send()
        .await
        .unwrap();
    assert_eq!(orchestration.status(), 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn continue_as_new_moves_an_instance_to_the_newest_version() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path()).components(&[]).start();
    let file = dir.path().join("components/versioned.wasm");
    std::fs::copy(component("versioned-v1"), &file).unwrap();
    let v1 = wait_served(&host, "versioned", None).await;
    let id = start(&host, "eternal", &serde_json::json!(0)).await;

    std::fs::copy(component("versioned-v2"), &file).unwrap();
    let v2 = wait_served(&host, "versioned", Some(&v1)).await;
    // The first execution (on v1) continues as new; the second runs on v2.
    assert_eq!(raise(&host, &id, "next", &Value::Null).await, 202);
    assert_eq!(raise(&host, &id, "next", &Value::Null).await, 202);
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], "v2", "{done}");
    assert_eq!(done["componentDigest"], v2.as_str());
}

/// An orchestration calls an activity of another component in the version
/// served when the instance started: replaced meanwhile, the instance still
/// gets version 1's answer while one started after gets version 2's; after a
/// restart with the file deleted, a version-1 instance still reaches version
/// 1 (kept in the store), by `component/activity` and by its bare name, and
/// so does a component that serves tools only. An instance that continues as
/// new pins the versions served then.
#[tokio::test(flavor = "multi_thread")]
async fn another_components_activity_runs_in_the_version_served_when_the_instance_started() {
    let dir = tempfile::tempdir().unwrap();
    // `doc-poet` serves tools only (no orchestration of its own).
    let mut host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests", "doc-poet"])
        .start();
    let file = dir.path().join("components/versioned.wasm");
    std::fs::copy(component("versioned-v1"), &file).unwrap();
    let v1 = wait_served(&host, "versioned", None).await;
    let call =
        |activity: &str| serde_json::json!({"activity": activity, "input": {}, "wait": "go"});
    let before = start(&host, "call_activity_of", &call("versioned/version")).await;
    let before_bare = start(&host, "call_activity_of", &call("version")).await;
    let after_restart = start(&host, "call_activity_of", &call("versioned/version")).await;
    let after_restart_bare = start(&host, "call_activity_of", &call("version")).await;
    let mut again = call("versioned/version");
    again["again"] = serde_json::json!(true);
    let continued = start(&host, "call_activity_of", &again).await;
    let mut poems = Vec::new();
    for activity in ["doc-poet/count_syllables", "count_syllables"] {
        let mut input = call(activity);
        input["input"] = serde_json::json!({"text": "tea"});
        poems.push(start(&host, "call_activity_of", &input).await);
    }

    std::fs::copy(component("versioned-v2"), &file).unwrap();
    wait_served(&host, "versioned", Some(&v1)).await;
    let after = start(&host, "call_activity_of", &call("version")).await;
    for id in [&before, &before_bare, &after, &continued] {
        assert_eq!(raise(&host, id, "go", &Value::Null).await, 202);
    }
    // Continued as new after the replacement: a fresh execution pins what a
    // fresh start would.
    for (id, version) in [
        (&before, "v1"),
        (&before_bare, "v1"),
        (&after, "v2"),
        (&continued, "v2"),
    ] {
        let done = wait_for(&host, id, &["Completed", "Failed"]).await;
        assert_eq!(
            done["output"],
            serde_json::json!({"ok": version}),
            "{id}: {done}"
        );
    }

    // Restarted with the files gone: version 1, and the tools-only
    // component, come from the store.
    host.kill();
    std::fs::remove_file(&file).unwrap();
    std::fs::remove_file(dir.path().join("components/doc-poet.wasm")).unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .start();
    for id in &poems {
        assert_eq!(raise(&host, id, "go", &Value::Null).await, 202);
        let done = wait_for(&host, id, &["Completed", "Failed"]).await;
        assert_eq!(
            done["output"],
            serde_json::json!({"ok": {"syllables": 2}}),
            "{id}: {done}"
        );
    }
    for id in [&after_restart, &after_restart_bare] {
        assert_eq!(raise(&host, id, "go", &Value::Null).await, 202);
        let done = wait_for(&host, id, &["Completed", "Failed"]).await;
        assert_eq!(
            done["output"],
            serde_json::json!({"ok": "v1"}),
            "{id}: {done}"
        );
    }
    // A new instance finds no such component.
    let late = start(&host, "call_activity_of", &call("versioned/version")).await;
    assert_eq!(raise(&host, &late, "go", &Value::Null).await, 202);
    let done = wait_for(&host, &late, &["Completed", "Failed"]).await;
    assert_eq!(
        done["output"]["error"],
        "no served component is named 'versioned' (activity 'versioned/version')",
        "{done}"
    );
}
