//! Orchestrations written with the Durable Task Python SDK (PyPI
//! `durabletask`, installed into target/durabletask-venv by `make test`),
//! run by agenthost over gRPC: the SDK's worker replays the history the
//! host sends and answers with actions, which the engine journals and
//! carries out as it does a wasm orchestration's calls. Sequences, fan-out,
//! an event racing a timer, sub-orchestrations across wasm and SDK,
//! continue-as-new, failures, and the management calls; a host killed with
//! -9 mid-run loses nothing and runs no committed activity twice.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::Command;

use crate::support::free_port;
use crate::support::host::Host;
use crate::support::{client, workspace, HostBuilder};

fn python() -> std::path::PathBuf {
    crate::support::venv_python("durabletask-venv")
}

fn script_path() -> std::path::PathBuf {
    workspace().join("tests/durabletask/orchestrations.py")
}

/// Runs the client side of the script; its JSON lines by step.
async fn client_script(host: &Host, args: &[&str]) -> HashMap<String, Value> {
    client_of(&script_path(), host, args).await
}

/// Runs the client side of `script` (`MODE ADDRESS ARGS…`); its JSON lines
/// by step.
pub(crate) async fn client_of(
    script: &std::path::Path,
    host: &Host,
    args: &[&str],
) -> HashMap<String, Value> {
    let address = host.grpc_address();
    let mut all = vec![args[0], address.as_str()];
    all.extend_from_slice(&args[1..]);
    let stdout =
        crate::support::python_script(&python(), script, &all, host, Duration::from_secs(300))
            .await;
    stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| (v["step"].as_str().unwrap_or_default().to_string(), v))
        .collect()
}

/// How many times each step (`chain-I/STEP`) ran to its end, by the
/// workers' `done` lines.
fn runs_of(lines: &[String]) -> HashMap<String, usize> {
    let mut runs: HashMap<String, usize> = HashMap::new();
    for line in lines.iter().filter_map(|l| l.strip_prefix("done ")) {
        *runs.entry(line.to_string()).or_default() += 1;
    }
    runs
}

/// The SDK worker serving the script's orchestrations and activities; it
/// reconnects by itself when the host restarts.
async fn sdk_worker(host: &Host, log: &std::path::Path) -> tokio::process::Child {
    script_worker(host, log, "worker").await
}

/// The script's worker of kind `mode` (`worker`, `narrow`).
async fn script_worker(host: &Host, log: &std::path::Path, mode: &str) -> tokio::process::Child {
    worker_of(&script_path(), host, log, mode).await
}

/// `script`'s worker of kind `mode`, connected; it reconnects by itself
/// when the host restarts.
pub(crate) async fn worker_of(
    script: &std::path::Path,
    host: &Host,
    log: &std::path::Path,
    mode: &str,
) -> tokio::process::Child {
    let connected = host.output().matches("an SDK worker connected").count();
    let child = Command::new(python())
        .arg(script)
        .arg(mode)
        .arg(host.grpc_address())
        .arg(log)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    host.wait_logged("an SDK worker connected", connected).await;
    child
}

pub(crate) fn grpc_host(dir: &std::path::Path, port: u16) -> HostBuilder {
    HostBuilder::new(dir)
        .components(&["orchestration-tests"])
        .arg("--grpc")
        .arg("--grpc-port")
        .arg(&port.to_string())
}

pub(crate) fn lines_of(log: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn orchestrations_written_with_the_python_sdk_run_on_agenthost_and_share_the_hub_with_wasm() {
    let dir = tempfile::tempdir().unwrap();
    let host = grpc_host(dir.path(), 0).start();
    let log = dir.path().join("activities.log");
    let _worker = sdk_worker(&host, &log).await;
    let steps = client_script(&host, &["scenario"]).await;
    let step = |name: &str| {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}: {steps:?}"))
            .clone()
    };

    // An activity sequence: each step's output is the next one's input.
    assert_eq!(step("sequence")["status"], "COMPLETED", "{steps:?}");
    assert_eq!(step("sequence")["output"], json!(4));
    let ran: Vec<String> = lines_of(&log)
        .into_iter()
        .filter(|l| l.starts_with("start sdk-seq/"))
        .collect();
    assert_eq!(
        ran,
        ["start sdk-seq/1", "start sdk-seq/2", "start sdk-seq/3"],
        "each step ran once, in order"
    );
    // Fan-out and fan-in: 0 + 1 + 4 + 9 + 16.
    assert_eq!(step("fan")["output"], json!(30));
    // An external event racing a timer, both ways.
    assert_eq!(
        step("approved")["output"],
        json!({"approved": {"by": "ann"}})
    );
    assert_eq!(step("timed out")["output"], json!("timed out"));
    // Sub-orchestrations: an SDK one, a wasm one; and a wasm activity.
    assert_eq!(
        step("parent")["output"],
        json!({"sdk child": 4, "wasm child": 3, "wasm activity": 7}),
        "{steps:?}"
    );
    // A failed activity fails the orchestration with the worker's reason.
    assert_eq!(step("failing")["status"], "FAILED");
    let failure = step("failing")["failure"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(failure.contains("no tea today"), "{failure}");
    // Its failure details are the worker's own: the error's type apart
    // from its message, as the emulator gives them back.
    assert_eq!(
        step("failing")["error_type"],
        "durabletask.task.TaskFailedError",
        "{steps:?}"
    );
    assert!(!failure.contains("TaskFailedError"), "{failure}");
    // A caught activity failure: the error's type, message and stack as the
    // worker reported them (not the host's `Type: message` text).
    assert_eq!(
        step("caught")["output"],
        json!({"type": "builtins.ValueError", "message": "no tea today", "stack": true})
    );
    // An absent input and output read back absent (None), not as 'null'.
    assert_eq!(
        step("empty"),
        json!({"step": "empty", "status": "COMPLETED", "input": null, "output": null})
    );
    // A child called under the same SDK-derived id by every execution of a
    // parent that continues as new: each execution's child runs (the last
    // one's result is the parent's), the finished one before it replaced.
    assert_eq!(
        step("continue with child"),
        json!({"step": "continue with child", "status": "COMPLETED", "output": {"n": 3, "child": 6}, "failure": null, "error_type": null, "name": "sdk_continue_with_child"}),
        "{steps:?}"
    );
    // The version the client started the instance with reaches its code.
    assert_eq!(step("version")["output"], json!("2.5.0"), "{steps:?}");
    // A child runs on the version its call names (none: none), not on the
    // parent's.
    assert_eq!(
        step("child versions")["output"],
        json!({"own": "2.5.0", "named": "1.0.0", "unnamed": null}),
        "{steps:?}"
    );
    // Continue-as-new, three times, then the last execution's output.
    assert_eq!(
        step("continue")["output"],
        json!({"n": 3, "square": 9, "started": true})
    );
    // Continue-as-new naming a new version (the protocol's `newVersion`):
    // the next execution runs on it, and the instance stays on it.
    assert_eq!(
        step("continue on a new version")["output"],
        json!({"input": "to-v2", "version": "2.0"}),
        "{steps:?}"
    );
    let (_, bumped) = crate::support::durable::status(&host, "sdk-bump").await;
    assert_eq!(bumped["componentDigest"], "durabletask-sdk@2.0", "{bumped}");
    // A start scheduled 3 s ahead (`start_at`): Pending a second in, its
    // first episode no earlier than the time asked (and not long after).
    let scheduled = step("scheduled start");
    assert_eq!(scheduled["early"], "PENDING", "{scheduled}");
    assert_eq!(scheduled["status"], "COMPLETED", "{scheduled}");
    let late_by = scheduled["late_by"].as_f64().unwrap_or(f64::NAN);
    assert!(
        (-0.001..30.0).contains(&late_by),
        "started {late_by} s after the time asked: {scheduled}"
    );
    // The management API says when it was asked to start.
    let (_, later) = crate::support::durable::status(&host, "sdk-later").await;
    let asked = later["scheduledStartTime"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.timestamp_millis());
    let at_ms = scheduled["at_ms"].as_i64();
    assert!(
        asked.zip(at_ms).is_some_and(|(a, b)| (a - b).abs() <= 1),
        "{later} against {scheduled}"
    );
    // A start for a time already past runs at once and keeps that time,
    // as an entity's start does.
    let overdue = step("overdue start");
    assert_eq!(overdue["status"], "COMPLETED", "{overdue}");
    assert!(
        overdue["waited"].as_f64().is_some_and(|s| s < 10.0),
        "{overdue}"
    );
    let (_, kept) = crate::support::durable::status(&host, "sdk-overdue").await;
    let kept_ms = kept["scheduledStartTime"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.timestamp_millis());
    assert!(
        kept_ms
            .zip(overdue["at_ms"].as_i64())
            .is_some_and(|(a, b)| (a - b).abs() <= 1),
        "{kept} against {overdue}"
    );
    // A counter entity: two signals from the client (5), then an
    // orchestration's two signals and a call, run in order (5 + 2 + 3 + 10).
    assert_eq!(step("entity signalled")["state"], json!(5), "{steps:?}");
    assert_eq!(step("entity signalled")["missing"], json!(true));
    assert_eq!(step("entity called")["output"], json!(20), "{steps:?}");
    assert_eq!(step("entity query")["ids"], json!(["@counter@c1"]));
    assert_eq!(step("entity query")["state"], json!(20));
    // The entity is an instance of the hub: the management API shows it.
    let (code, entity) = crate::support::durable::status(&host, "@counter@c1").await;
    assert_eq!(code, 202, "running, as an entity always is: {entity}");
    assert_eq!(entity["name"], "counter");
    assert_eq!(entity["output"], json!(20));
    // What an entity's operation asks for besides its result is carried
    // out with its batch: a signal, and orchestrations started by name,
    // an SDK one (1 + 3 steps) and a wasm one, each exactly once.
    let actions = step("entity actions");
    assert_eq!(actions["sdk"]["status"], "COMPLETED", "{actions}");
    assert_eq!(actions["sdk"]["output"], json!(7), "{actions}");
    assert_eq!(actions["wasm"]["status"], "COMPLETED", "{actions}");
    assert_eq!(actions["wasm"]["name"], "sequence", "{actions}");
    assert_eq!(actions["relayed"], json!(4), "{actions}");
    let started_twice = lines_of(&log)
        .iter()
        .filter(|l| l.as_str() == "start sdk-from-entity/4")
        .count();
    assert_eq!(started_twice, 1, "the started orchestration ran once");
    // A class entity registered under a mixed-case name of its own: its
    // signals reach it, its metadata reads back unlocked, and a query by
    // id prefix finds the one entity under it (ids are in lower case).
    let custom = step("custom entity name");
    assert_eq!(custom["counted"], json!([1, 2]), "{custom}");
    assert_eq!(custom["id"], "@tallycustom@p1-t", "{custom}");
    assert_eq!(custom["locked"], Value::Null, "{custom}");
    assert_eq!(custom["before_now"], json!(true), "{custom}");
    assert_eq!(
        custom["by_prefix"],
        json!(["@tallycustom@p1-t"]),
        "{custom}"
    );
    assert_eq!(custom["prefixed_state"], json!([1]), "{custom}");
    // Signals scheduled 3 s ahead, by the client and by an orchestration:
    // unseen a second in, carried out after their time.
    for name in ["client signal later", "orchestration signal later"] {
        let later = step(name);
        assert_eq!(later["early"], Value::Null, "{name}: {later}");
        let wanted = if name.starts_with("client") { 5 } else { 7 };
        assert_eq!(later["state"], json!(wanted), "{name}: {later}");
        let waited = later["waited"].as_f64().unwrap_or_default();
        assert!(waited >= 2.5, "{name}: carried out after {waited} s");
    }
    // An entity terminated with a call queued at it: the caller is told
    // why, and goes on.
    let told = step("entity terminated");
    assert_eq!(told["status"], "COMPLETED", "{told}");
    let said = told["output"].as_str().unwrap_or_default();
    assert!(
        said.starts_with("failed: ") && said.contains("terminated") && said.contains("@sleepy@z1"),
        "{told}"
    );
    // A batch the worker gives back every time (it cannot parse the id)
    // fails after ten instead of going round for good, and its caller hears
    // of it (this SDK then fails the orchestration on that id too).
    let given = step("given back");
    assert_eq!(given["status"], "FAILED", "{given}");
    host.wait_logged(
        "SDK workers gave the entity's operations back 10 times in a row; the batch fails",
        0,
    )
    .await;
    // An answer past the payload limit fails its task with the reason.
    let big = step("too large");
    assert_eq!(big["status"], "FAILED", "{big}");
    assert!(
        big["failure"]
            .as_str()
            .is_some_and(|f| f.contains("over the limit")),
        "{big}"
    );

    // Custom status; an event raised while suspended waits for the resume.
    assert_eq!(step("custom status")["value"], json!("\"waiting\""));
    assert_eq!(step("suspended")["status"], "SUSPENDED");
    assert_eq!(step("resumed")["output"], json!("on"));
    assert_eq!(step("terminated")["status"], "TERMINATED");
    assert!(step("query")["ids"]
        .as_array()
        .is_some_and(|ids| ids.contains(&json!("sdk-seq")) && ids.contains(&json!("sdk-stuck"))));
    // The ids of ended orchestrations, in pages of two with the key to the
    // next: each once, no entity, no running one.
    let listed = step("instance ids");
    let completed = listed["completed"].as_array().cloned().unwrap_or_default();
    assert!(
        completed.contains(&json!("sdk-seq")) && !completed.contains(&json!("sdk-failing")),
        "{listed}"
    );
    assert!(listed["pages"].as_u64().unwrap_or_default() > 1, "{listed}");
    assert_eq!(listed["unique"], true, "{listed}");
    assert_eq!(listed["entities"], json!([]), "{listed}");
    assert!(
        listed["failed"]
            .as_array()
            .is_some_and(|f| f.contains(&json!("sdk-failing"))),
        "{listed}"
    );
    assert_eq!(listed["running"], json!([]), "{listed}");
    assert_eq!(listed["terminated"], true, "{listed}");
    // Entities are instances of the hub, but the protocol lists
    // orchestrations alone (entities have their own query).
    assert_eq!(step("query")["entities"], json!([]), "{steps:?}");
    assert_eq!(step("purged")["deleted"], json!(1));
    assert_eq!(step("purged")["after"], json!(true));
    assert_eq!(step("purge unknown")["deleted"], json!(0));
    // A recursive terminate stops the whole tree, SDK and wasm children at
    // every depth; a recursive purge deletes it. Each child has the id its
    // worker named: the code's choice, else the SDK's `{parent}:{task}`.
    let felled = step("tree terminated");
    assert_eq!(felled["tree"]["status"], "TERMINATED", "{felled}");
    assert_eq!(
        felled["below"],
        json!([
            ["sdk-tree", "sdk_tree", "TERMINATED"],
            ["sdk-tree-nest", "sdk_nest", "TERMINATED"],
            ["sdk-tree-nest:0001", "sdk_waiter", "TERMINATED"],
            ["sdk-tree-nest:0002", "wait_event", "TERMINATED"]
        ]),
        "{felled}"
    );
    assert_eq!(step("tree purged")["deleted"], json!(4), "{steps:?}");
    assert_eq!(step("tree purged")["left"], json!([]), "{steps:?}");
    // Forty entity batches waiting on their worker hold none of the 32
    // episode slots: a wasm orchestration behind them completes.
    assert_eq!(step("crowd")["wasm"], "COMPLETED", "{steps:?}");

    // SDK instances are the hub's instances: the management API shows them.
    let (code, seq) = crate::support::durable::status(&host, "sdk-seq").await;
    assert_eq!(code, 200);
    assert_eq!(seq["name"], "sdk_sequence");
    assert_eq!(seq["runtimeStatus"], "Completed");
    assert_eq!(seq["output"], json!(4));

    // A wasm orchestration calls an SDK orchestration by name.
    let started = client()
        .post(host.url("/api/orchestrators/parent_of/wasm-parent"))
        .json(&json!({"name": "sdk_fan", "input": 4}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);
    let done = crate::support::durable::wait_for_within(
        &host,
        "wasm-parent",
        &["Completed", "Failed"],
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(done["output"], json!({"child said": 14}), "{done}");
}

#[tokio::test(flavor = "multi_thread")]
async fn sdk_orchestrations_survive_a_host_killed_mid_run_and_no_committed_activity_runs_twice() {
    let dir = tempfile::tempdir().unwrap();
    // A fixed gRPC port, so the worker finds the restarted host where it was.
    let port = free_port();
    let builder = grpc_host(dir.path(), port);
    let mut host = builder.start();
    let log = dir.path().join("activities.log");
    let _worker = sdk_worker(&host, &log).await;

    const CHAINS: usize = 6;
    const LENGTH: usize = 8;
    client_script(&host, &["chains", &CHAINS.to_string(), &LENGTH.to_string()]).await;
    // Killed once a few steps of every chain are behind it.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while lines_of(&log)
        .iter()
        .filter(|l| l.starts_with("done "))
        .count()
        < CHAINS * 3
    {
        assert!(std::time::Instant::now() < deadline, "{}", host.output());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    host.kill();
    let at_kill = lines_of(&log);

    let host = builder.start();
    host.wait_logged("an SDK worker connected", 0).await;
    let finished = client_script(&host, &["finish", &CHAINS.to_string()]).await;
    for i in 0..CHAINS {
        let chain = &finished["finish"]["done"][format!("chain-{i}")];
        assert_eq!(chain["status"], "COMPLETED", "{finished:?}");
        assert_eq!(chain["output"], json!(LENGTH));
    }
    // Every step ran to its end, and none ran twice but one in flight at
    // the kill: in a chain, step i + 1 starts only once step i's result is
    // committed, so every step before the last one started before the kill
    // was committed and must have run exactly once.
    let lines = lines_of(&log);
    let runs = runs_of(&lines);
    assert_eq!(runs.len(), CHAINS * LENGTH, "every step ran:\n{lines:?}");
    for i in 0..CHAINS {
        let last_started = (0..LENGTH)
            .filter(|step| at_kill.contains(&format!("start chain-{i}/{step}")))
            .max()
            .expect("every chain was under way at the kill");
        for step in 0..last_started {
            assert_eq!(
                runs[&format!("chain-{i}/{step}")],
                1,
                "committed before the kill, run once: chain-{i}/{step}\n{lines:?}"
            );
        }
        assert!(runs[&format!("chain-{i}/{last_started}")] <= 2);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hosts_on_one_postgresql_hub_each_with_an_sdk_worker_lose_nothing_when_one_is_killed() {
    if crate::support::host::test_store().is_none() {
        return; // SQLite: one host per file.
    }
    let dir = tempfile::tempdir().unwrap();
    let shared = |port: u16| grpc_host(dir.path(), port).arg("--lease").arg("3s");
    let mut first = shared(0).start();
    let second = shared(0).start();
    let (first_log, second_log) = (dir.path().join("first.log"), dir.path().join("second.log"));
    let _first_worker = sdk_worker(&first, &first_log).await;
    let _second_worker = sdk_worker(&second, &second_log).await;
    let both = || {
        let mut lines = lines_of(&first_log);
        lines.extend(lines_of(&second_log));
        lines
    };

    const CHAINS: usize = 8;
    const LENGTH: usize = 8;
    client_script(
        &first,
        &["chains", &CHAINS.to_string(), &LENGTH.to_string()],
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while lines_of(&first_log)
        .iter()
        .filter(|l| l.starts_with("done "))
        .count()
        < 6
    {
        assert!(std::time::Instant::now() < deadline, "{}", first.output());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    first.kill();
    let at_kill = both();

    // The survivor takes the killed host's instances over, and its worker
    // runs them.
    let finished = client_script(&second, &["finish", &CHAINS.to_string()]).await;
    for i in 0..CHAINS {
        let chain = &finished["finish"]["done"][format!("chain-{i}")];
        assert_eq!(
            chain["status"],
            "COMPLETED",
            "{finished:?}\n{}",
            second.output()
        );
        assert_eq!(chain["output"], json!(LENGTH));
    }
    let lines = both();
    let runs = runs_of(&lines);
    assert_eq!(runs.len(), CHAINS * LENGTH, "every step ran:\n{lines:?}");
    for i in 0..CHAINS {
        let last_started = (0..LENGTH)
            .filter(|step| at_kill.contains(&format!("start chain-{i}/{step}")))
            .max();
        for step in 0..last_started.unwrap_or(0) {
            assert_eq!(
                runs[&format!("chain-{i}/{step}")],
                1,
                "committed before the kill, run once: chain-{i}/{step}\n{lines:?}"
            );
        }
        // One step of a chain was in flight at the kill (sent to the killed
        // host's worker, which may start it only after): it alone may have
        // run twice.
        let again: Vec<usize> = (0..LENGTH)
            .filter(|step| runs[&format!("chain-{i}/{step}")] > 1)
            .collect();
        assert!(
            again.len() <= 1
                && again
                    .iter()
                    .all(|step| runs[&format!("chain-{i}/{step}")] == 2),
            "chain-{i}: steps {again:?} ran again\n{lines:?}"
        );
    }
    assert!(
        lines_of(&second_log).iter().any(|l| l.starts_with("done ")),
        "the survivor's worker ran steps"
    );
}

/// A worker that runs two activities at once, and says so, is sent a
/// fan-out of 50 two-second activities: each runs exactly once, though most
/// wait far longer than the host's patience for an answer (10 s) before
/// the worker has room for them. They wait in the host, unsent, not in the
/// worker where their patience would run out unstarted.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_running_two_activities_at_once_runs_each_of_a_50_fan_out_once() {
    let dir = tempfile::tempdir().unwrap();
    let host = grpc_host(dir.path(), 0)
        .arg("--sdk-activity-timeout")
        .arg("10s")
        .start();
    let log = dir.path().join("activities.log");
    let _worker = script_worker(&host, &log, "narrow").await;
    let naps = client_script(&host, &["naps", "50"]).await;
    assert_eq!(naps["naps"]["status"], "COMPLETED", "{naps:?}");
    assert_eq!(naps["naps"]["output"], json!(50), "{naps:?}");
    let lines = lines_of(&log);
    let started = |i: usize| {
        lines
            .iter()
            .filter(|l| **l == format!("start nap-{i}"))
            .count()
    };
    let twice: Vec<usize> = (0..50).filter(|&i| started(i) != 1).collect();
    assert!(
        twice.is_empty(),
        "not run exactly once: {twice:?}\n{lines:?}"
    );
    assert!(
        !host.output().contains("did not answer in time"),
        "{}",
        host.output()
    );
}
