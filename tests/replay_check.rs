//! A new version of an orchestration component, replayed against the
//! journals of the instances of the older one before any of them meets it
//! (issue 58). 200 `versioned` instances wait for `go` on version 1; then
//! a compatible build (`versioned-logged`: a log line, a local renamed) or
//! an incompatible one (`versioned-inserted`: `step_c` between `step_a`
//! and the wait) is dropped in:
//!
//! - under `report` (the default) the compatible build is reported
//!   compatible for all 200, nothing of any instance changes (status and
//!   history read back byte for byte), the model hears nothing, and every
//!   instance finishes on version 1; `agenthost check-replay` on the same
//!   store, beside the running host, says the same (exit 0) for the
//!   compatible build and names the divergence (exit 1) for the other;
//! - under `upgrade-compatible` the incompatible build is reported with
//!   the first divergent step of each instance (the place of its wait in
//!   its journal), moves none and changes nothing, and every instance
//!   finishes on version 1; the compatible build moves all 200, which then
//!   finish on it.
//!
//! Each test runs on SQLite, and on PostgreSQL in `make test`'s second pass.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::components::wait_served;
use crate::support::durable::{instance_url, raise, start_with_id, status, wait_for};
use crate::support::host::{store_location, Host};
use crate::support::{client, component, get_json, FakeModel, HostBuilder};

const INSTANCES: usize = 200;

fn ids() -> Vec<String> {
    (0..INSTANCES).map(|i| format!("rc-{i:03}")).collect()
}

/// A host serving `versioned` version 1 from `dir`, with `flags`.
fn host_on_v1(dir: &Path, model: &FakeModel, flags: &[&str]) -> Host {
    let components = dir.join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::copy(component("versioned-v1"), components.join("versioned.wasm")).unwrap();
    let mut builder = HostBuilder::new(dir)
        .components(&[])
        .openai(model, "sk-test");
    for flag in flags {
        builder = builder.arg(flag);
    }
    builder.start()
}

/// A host serving version 1 with `flags`, and the instances waiting for
/// `go` on it: (its folder, its model, the host, version 1's digest).
async fn waiting_on_v1(flags: &[&str]) -> (tempfile::TempDir, FakeModel, Host, String) {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = host_on_v1(dir.path(), &model, flags);
    let v1 = wait_served(&host, "versioned", None).await;
    start_waiting(&host).await;
    (dir, model, host, v1)
}

/// Starts the instances and waits until each has journaled its wait for `go`.
async fn start_waiting(host: &Host) {
    for id in ids() {
        start_with_id(host, "versioned", &id, &json!(null)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    for id in ids() {
        loop {
            let history = history(host, &id).await;
            let waiting = history["historyEvents"]
                .as_array()
                .is_some_and(|events| events.iter().any(|e| e["call"] == "wait_for_event"));
            if history["runtimeStatus"] == "Running" && waiting {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "instance {id} never reached its wait: {history}\n{}",
                host.output()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn history(host: &Host, id: &str) -> Value {
    get_json(format!("{}?showHistory=true", instance_url(host, id))).await
}

/// Every instance's status and history, in id order.
async fn histories(host: &Host) -> Vec<Value> {
    let mut all = Vec::new();
    for id in ids() {
        all.push(history(host, &id).await);
    }
    all
}

/// Drops `build` in as `versioned.wasm` and waits for the replay check of
/// the version it serves to finish; returns (its digest, the report).
async fn drop_in(host: &Host, dir: &Path, build: &str, before: &str) -> (String, Value) {
    let file = dir.join("components/versioned.wasm");
    std::fs::copy(component(build), &file).unwrap();
    let digest = wait_served(host, "versioned", Some(before)).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let body: Value = get_json(host.url("/api/components/versioned")).await;
        let check = &body["replay_check"];
        if check["digest"] == digest.as_str() && check["finishedAt"].is_i64() {
            return (digest, check.clone());
        }
        assert!(
            Instant::now() < deadline,
            "the replay check of {build} never finished: {body:#}\n{}",
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Raises `go` at `ids` and checks each finishes with `output`, on `digest`.
async fn finish(host: &Host, ids: &[String], output: &str, digest: &str) {
    for id in ids {
        assert_eq!(raise(host, id, "go", &json!(null)).await, 202, "{id}");
    }
    for id in ids {
        let done = wait_for(host, id, &["Completed", "Failed"]).await;
        assert_eq!(done["runtimeStatus"], "Completed", "{done}");
        assert_eq!(done["output"], output, "{done}");
        assert_eq!(done["componentDigest"], digest, "{done}");
    }
}

/// `agenthost check-replay FILE --name versioned` against the host's
/// store: (exit code, the JSON report it printed).
fn check_replay(dir: &Path, build: &str) -> (Option<i32>, Value) {
    let output = check_replay_command(dir, build, &["--name", "versioned"]);
    let printed = String::from_utf8_lossy(&output.stdout).to_string();
    let report = serde_json::from_str(&printed).unwrap_or_else(|e| {
        panic!(
            "check-replay printed no JSON report ({e}): {printed}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code(), report)
}

fn check_replay_command(dir: &Path, build: &str, args: &[&str]) -> std::process::Output {
    let (store, hub) = store_location(dir, None);
    Command::new(env!("CARGO_BIN_EXE_agenthost"))
        .current_dir(dir)
        .env(
            "AGENTHOST_CACHE_DIR",
            crate::support::host::test_artifact_cache(),
        )
        .arg("check-replay")
        .arg(component(build))
        .args(args)
        .args(["--store", &store, "--taskhub", &hub])
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_compatible_version_is_reported_and_nothing_of_an_instance_changes() {
    let (dir, model, host, v1) = waiting_on_v1(&[]).await;
    let before = histories(&host).await;

    let (_, report) = drop_in(&host, dir.path(), "versioned-logged", &v1).await;
    assert_eq!(report["policy"], "report", "{report}");
    assert_eq!(report["instances"], INSTANCES, "{report}");
    assert_eq!(report["compatible"], INSTANCES, "{report}");
    assert_eq!(
        (
            &report["divergent"],
            &report["upgraded"],
            &report["unchecked"]
        ),
        (&json!(0), &json!(0), &json!(0)),
        "{report}"
    );
    // The check wrote nothing and called nothing: every instance reads back
    // as it was (status, custom status, history, update time), no activity
    // was scheduled, and the model heard no request.
    assert_eq!(histories(&host).await, before, "an instance changed");
    assert!(model.requests().is_empty(), "{:?}", model.requests());
    let metrics =
        crate::support::prometheus_text(client().get(host.url("/metrics")).send().await.unwrap())
            .await;
    assert!(
        metrics.contains(&format!(
            "agenthost_replay_checked_instances_total{{result=\"compatible\"}} {INSTANCES}"
        )),
        "{metrics}"
    );

    // From a shell, beside the running host, read-only: the same verdicts.
    let (code, cli) = check_replay(dir.path(), "versioned-logged");
    assert_eq!(code, Some(0), "{cli}");
    assert_eq!(cli["compatible"], INSTANCES, "{cli}");
    let (code, cli) = check_replay(dir.path(), "versioned-inserted");
    assert_eq!(code, Some(1), "{cli}");
    assert_eq!(cli["divergent"], INSTANCES, "{cli}");
    let first = &cli["divergences"][0];
    assert_eq!(first["journal"], "wait-for-event(go)", "{cli}");
    assert_eq!(first["newCode"], "call-activity(step_c)", "{cli}");
    // Without `--name` the file's stem names a component the store never
    // had: refused, not "all compatible".
    let unnamed = check_replay_command(dir.path(), "versioned-logged", &[]);
    let said = String::from_utf8_lossy(&unnamed.stderr);
    assert_eq!(unnamed.status.code(), Some(1), "{said}");
    assert!(
        said.contains("holds no version of component 'versioned-logged'"),
        "{said}"
    );
    assert_eq!(histories(&host).await, before, "an instance changed");

    // Pinned, every instance finishes on version 1.
    finish(&host, &ids(), "v1", &v1).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn under_upgrade_compatible_a_divergent_version_moves_nothing() {
    let (dir, model, host, v1) = waiting_on_v1(&["--on-new-version", "upgrade-compatible"]).await;
    let before = histories(&host).await;

    // A step inserted before the wait: each instance diverges at its wait,
    // each is listed with that step, and none moves or changes.
    let (_, report) = drop_in(&host, dir.path(), "versioned-inserted", &v1).await;
    assert_eq!(report["policy"], "upgrade-compatible", "{report}");
    assert_eq!(report["instances"], INSTANCES, "{report}");
    assert_eq!(report["divergent"], INSTANCES, "{report}");
    assert_eq!(
        (
            &report["compatible"],
            &report["upgraded"],
            &report["unchecked"]
        ),
        (&json!(0), &json!(0), &json!(0)),
        "{report}"
    );
    let divergences = report["divergences"].as_array().unwrap();
    let mut named: Vec<&str> = divergences
        .iter()
        .map(|d| d["instanceId"].as_str().unwrap())
        .collect();
    named.sort_unstable();
    assert_eq!(named, ids().iter().map(String::as_str).collect::<Vec<_>>());
    for (divergence, was) in divergences.iter().zip(&before) {
        // The step is the wait's place in the instance's own journal.
        let wait_at = was["historyEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["call"].is_string())
            .position(|e| e["call"] == "wait_for_event")
            .unwrap();
        assert_eq!(divergence["step"], wait_at, "{divergence}");
        assert_eq!(divergence["journal"], "wait-for-event(go)", "{divergence}");
        assert_eq!(
            divergence["newCode"], "call-activity(step_c)",
            "{divergence}"
        );
        assert_eq!(divergence["digest"], v1.as_str(), "{divergence}");
    }
    assert_eq!(histories(&host).await, before, "an instance changed");
    // Every one finishes on version 1.
    finish(&host, &ids(), "v1", &v1).await;
    assert!(model.requests().is_empty(), "{:?}", model.requests());
}

#[tokio::test(flavor = "multi_thread")]
async fn under_upgrade_compatible_a_compatible_version_moves_every_waiting_instance() {
    let (dir, model, host, v1) = waiting_on_v1(&["--on-new-version", "upgrade-compatible"]).await;

    let (logged, report) = drop_in(&host, dir.path(), "versioned-logged", &v1).await;
    assert_eq!(report["instances"], INSTANCES, "{report}");
    assert_eq!(report["compatible"], INSTANCES, "{report}");
    assert_eq!(report["upgraded"], INSTANCES, "{report}");
    assert_eq!(
        (
            &report["divergent"],
            &report["unchecked"],
            &report["movedOn"]
        ),
        (&json!(0), &json!(0), &json!(0)),
        "{report}"
    );
    for id in ids() {
        let (_, body) = status(&host, &id).await;
        assert_eq!(body["componentDigest"], logged.as_str(), "{body}");
    }
    // Each finishes on the new build, its journal kept whole.
    finish(&host, &ids(), "v1-logged", &logged).await;
    let metrics =
        crate::support::prometheus_text(client().get(host.url("/metrics")).send().await.unwrap())
            .await;
    assert!(
        metrics.contains(&format!(
            "agenthost_replay_checked_instances_total{{result=\"upgraded\"}} {INSTANCES}"
        )),
        "{metrics}"
    );
    assert!(model.requests().is_empty(), "{:?}", model.requests());
}

/// `check-replay` beside a host whose instances finish while it reads: an
/// instance that ended is no instance to judge (the report counts it
/// `ended`), and the check still passes.
#[tokio::test(flavor = "multi_thread")]
async fn instances_that_end_during_a_check_do_not_fail_it() {
    let (dir, _model, host, v1) = waiting_on_v1(&[]).await;
    let raising = {
        let base = host.url("");
        tokio::spawn(async move {
            for id in ids() {
                let url =
                    format!("{base}/runtime/webhooks/durabletask/instances/{id}/raiseEvent/go");
                let answer = client().post(url).json(&json!(null)).send().await.unwrap();
                assert_eq!(answer.status(), 202);
            }
        })
    };
    let dir_path = dir.path().to_path_buf();
    let (code, report) =
        tokio::task::spawn_blocking(move || check_replay(&dir_path, "versioned-logged"))
            .await
            .unwrap();
    raising.await.unwrap();
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["divergent"], 0, "{report}");
    assert_eq!(report["unchecked"], 0, "{report}");
    let judged = report["compatible"].as_u64().unwrap() + report["ended"].as_u64().unwrap();
    assert_eq!(judged, report["instances"].as_u64().unwrap(), "{report}");
    for id in ids() {
        let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
        assert_eq!(done["output"], "v1", "{done}");
        assert_eq!(done["componentDigest"], v1.as_str(), "{done}");
    }
}
