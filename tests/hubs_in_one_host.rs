//! Several task hubs served by one host, as the managed Durable Task
//! Scheduler serves them behind one endpoint: SDK workers and clients of two
//! hubs, each naming its hub in the `taskhub` metadata, never see each
//! other's instances, work items or entities; a hub not listed is refused
//! (and logged once) unless the host serves hubs dynamically; two callers
//! naming one new hub at once open it once; the HTTP routes take the hub as
//! `?taskHub=`. On SQLite, and on PostgreSQL with two hosts sharing the hubs.

use std::time::Duration;

use serde_json::Value;

use crate::support::host::{hub_for, test_store, Host};
use crate::support::{client, workspace, HostBuilder};

fn python() -> std::path::PathBuf {
    crate::support::venv_python("durabletask-venv")
}

/// `tests/durabletask/hubs.py ADDRESS HUB WHAT`: its JSON lines.
async fn hub_script(host: &Host, hub: &str, what: &str) -> Vec<Value> {
    let address = host.grpc_address();
    let script = workspace().join("tests/durabletask/hubs.py");
    let stdout = crate::support::python_script(
        &python(),
        &script,
        &[&address, hub, what],
        host,
        Duration::from_secs(240),
    )
    .await;
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn step<'a>(steps: &'a [Value], name: &str) -> &'a Value {
    steps
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {steps:?}"))
}

/// What one hub's worker and client saw: only their own work.
fn saw_only_its_own(hub: &str, steps: &[Value], count: usize) {
    let ids: Vec<String> = (0..count).map(|k| format!("i-{k}")).collect();
    let outputs: Vec<String> = ids.iter().map(|id| format!("{hub}:{id}")).collect();
    assert_eq!(
        step(steps, "outputs")["outputs"],
        serde_json::json!(outputs),
        "hub {hub}: an activity ran on another hub's worker"
    );
    assert_eq!(
        step(steps, "entity")["value"],
        count,
        "hub {hub}: its entity took another hub's signals, or lost its own"
    );
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(
        step(steps, "instances")["ids"],
        serde_json::json!(sorted),
        "hub {hub}: the client listed another hub's instances"
    );
}

/// The instance ids `GET …/instances?taskHub=HUB` lists on `host`.
async fn listed_over_http(host: &Host, hub: &str) -> (u16, Value) {
    let response = client()
        .get(host.url(&format!(
            "/runtime/webhooks/durabletask/instances?taskHub={hub}"
        )))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn ids_of(listed: &Value) -> Vec<String> {
    let mut ids: Vec<String> = listed
        .as_array()
        .map(|all| {
            all.iter()
                .filter_map(|i| i["instanceId"].as_str())
                .filter(|id| !id.starts_with('@'))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    ids.sort();
    ids
}

fn grpc_host(dir: &std::path::Path, hub: &str, more: &[&str]) -> HostBuilder {
    let mut builder = HostBuilder::new(dir)
        .taskhub(hub)
        .arg("--grpc")
        .arg("--grpc-port")
        .arg("0");
    for arg in more {
        builder = builder.arg(arg);
    }
    builder
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hubs_of_one_host_never_see_each_others_work_and_a_hub_not_listed_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let base = hub_for(dir.path());
    let (blue, green) = (format!("{base}-blue"), format!("{base}-green"));
    let host = grpc_host(dir.path(), &blue, &["--taskhubs", &green]).start();

    let (b, g) = tokio::join!(
        hub_script(&host, &blue, "5"),
        hub_script(&host, &green, "5")
    );
    saw_only_its_own(&blue, &b, 5);
    saw_only_its_own(&green, &g, 5);

    // Over HTTP: the host's own hub by default, another with `?taskHub=`.
    let (status, listed) = listed_over_http(&host, &green).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(ids_of(&listed), ["i-0", "i-1", "i-2", "i-3", "i-4"]);
    // The dashboard's page passes its `?taskHub=` on to the API it calls.
    let shown: Value = crate::support::get_json(host.url(&format!(
        "/dashboard/api/runtime/webhooks/durabletask/instances?taskHub={green}"
    )))
    .await;
    assert_eq!(ids_of(&shown), ["i-0", "i-1", "i-2", "i-3", "i-4"]);
    let own: Value =
        crate::support::get_json(host.url("/runtime/webhooks/durabletask/instances")).await;
    assert_eq!(ids_of(&own), ["i-0", "i-1", "i-2", "i-3", "i-4"]);

    // Each hub's gauges, by hub.
    let scrape = client()
        .get(host.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for hub in [&blue, &green] {
        for gauge in ["agenthost_hot_instances", "agenthost_waiting_instances"] {
            let series = format!("{gauge}{{taskhub=\"{hub}\"}}");
            assert!(scrape.contains(&series), "no {series} in:\n{scrape}");
        }
    }

    // A third hub: refused, over gRPC and HTTP, saying how to admit it,
    // and logged once however often it is named.
    let third = format!("{base}-third");
    let before = host.output().len();
    let logged = host.output().matches("does not serve: refused").count();
    let refused = hub_script(&host, &third, "refused").await;
    let refused = step(&refused, "refused");
    assert_eq!(refused["code"], "NOT_FOUND", "{refused}");
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&third) && message.contains("--dynamic-task-hubs"),
        "{message}"
    );
    host.wait_logged("does not serve: refused", logged).await;
    let (status, body) = listed_over_http(&host, &third).await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["error"].as_str().unwrap_or_default().contains(&third),
        "{body}"
    );
    assert_eq!(
        host.output()[before..]
            .matches("does not serve: refused")
            .count(),
        1,
        "{}",
        host.output()
    );
    // Nothing of the refused hub was created.
    if test_store().is_none() {
        let files: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .collect();
        assert!(!files.iter().any(|f| f.contains("third")), "{files:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn with_dynamic_hubs_a_named_hub_is_created_on_first_use_once_however_many_race_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let base = hub_for(dir.path());
    let host = grpc_host(
        dir.path(),
        &base,
        &["--dynamic-task-hubs", "--max-task-hubs", "3"],
    )
    .start();

    // Eight callers name one new hub at once: one opening, eight answers.
    let racing = format!("{base}-race");
    let before = host.output().len();
    let served = host.output().matches("task hub served").count();
    let answers = futures::future::join_all((0..8).map(|_| listed_over_http(&host, &racing))).await;
    for (status, body) in &answers {
        assert_eq!(*status, 200, "{body}");
        assert_eq!(ids_of(body), Vec::<String>::new());
    }
    host.wait_logged("task hub served", served).await;
    let opened = host.output()[before..]
        .lines()
        .filter(|l| l.contains("task hub served") && l.contains(&racing))
        .count();
    assert_eq!(opened, 1, "{}", host.output());

    // An SDK worker and client on a hub nobody listed.
    let fresh = format!("{base}-fresh");
    let steps = hub_script(&host, &fresh, "3").await;
    saw_only_its_own(&fresh, &steps, 3);
    // A fourth hub is past --max-task-hubs: refused, saying so.
    let (status, body) = listed_over_http(&host, &format!("{base}-fourth")).await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("--max-task-hubs 3"),
        "{body}"
    );
    // An invalid name is a clear error, not a hub.
    let (status, body) = listed_over_http(&host, "no%20spaces").await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("invalid task hub name"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hosts_on_postgres_serve_two_hubs_each_without_crosstalk() {
    if test_store().is_none() {
        return; // SQLite: one host per file.
    }
    let dir = tempfile::tempdir().unwrap();
    let base = hub_for(dir.path());
    let (blue, green) = (format!("{base}-blue"), format!("{base}-green"));
    let first = grpc_host(dir.path(), &blue, &["--taskhubs", &green]).start();
    let second = grpc_host(dir.path(), &blue, &["--taskhubs", &green]).start();

    let (b, g) = tokio::join!(
        hub_script(&first, &blue, "5"),
        hub_script(&second, &green, "5")
    );
    saw_only_its_own(&blue, &b, 5);
    saw_only_its_own(&green, &g, 5);
    // Each host reads both hubs of the shared store, and each alone.
    for host in [&first, &second] {
        for hub in [&blue, &green] {
            let (status, listed) = listed_over_http(host, hub).await;
            assert_eq!(status, 200, "{listed}");
            assert_eq!(ids_of(&listed), ["i-0", "i-1", "i-2", "i-3", "i-4"]);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hub_a_front_opens_for_a_caller_is_worked_by_the_workers_that_list_it() {
    if test_store().is_none() {
        return; // SQLite: one host per file, no fronts.
    }
    let dir = tempfile::tempdir().unwrap();
    let base = hub_for(dir.path());
    let fresh = format!("{base}-fresh");
    let builder = || {
        HostBuilder::new(dir.path())
            .taskhub(&base)
            .components(&["orchestration-tests"])
    };
    let front = builder()
        .arg("--no-worker")
        .arg("--dynamic-task-hubs")
        .start();
    let _worker = builder().arg("--taskhubs").arg(&fresh).start_worker();

    // The front opens the hub for the caller; the worker that lists it runs it.
    let started = client()
        .post(front.url(&format!(
            "/api/orchestrators/sequence/in-a-new-hub?taskHub={fresh}"
        )))
        .json(&serde_json::json!({"n": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202, "{}", front.output());
    let urls: Value = started.json().await.unwrap();
    let status_url = urls["statusQueryGetUri"].as_str().unwrap().to_string();
    assert!(status_url.contains(&format!("taskHub={fresh}")), "{urls}");
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let status: Value = crate::support::get_json(&status_url).await;
        if status["runtimeStatus"] == "Completed" {
            assert_eq!(status["output"], 3, "{status}");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the worker never took up hub {fresh}: {status}\n{}",
            front.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The host's own hub never saw it.
    let own: Value =
        crate::support::get_json(front.url("/runtime/webhooks/durabletask/instances")).await;
    assert_eq!(ids_of(&own), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn behind_endpoint_keys_nothing_about_a_hub_is_told_to_a_caller_without_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let base = hub_for(dir.path());
    let other = format!("{base}-other");
    let admin = "admin-key-for-hubs-0123456789";
    let host = grpc_host(
        dir.path(),
        &base,
        &["--taskhubs", &other, "--api-key", &format!("admin:{admin}")],
    )
    .start();
    let ask = |hub: String, key: Option<&'static str>| {
        let url = host.url(&format!(
            "/runtime/webhooks/durabletask/instances?taskHub={hub}"
        ));
        async move {
            let mut request = client().get(url);
            if let Some(key) = key {
                request = request.bearer_auth(key);
            }
            request.send().await.unwrap().status().as_u16()
        }
    };
    // Without a key: 401 for a hub served, one not served, and a bad name
    // alike, so nothing tells which hubs exist.
    for hub in [other.clone(), format!("{base}-nope"), "no%20spaces".into()] {
        assert_eq!(ask(hub.clone(), None).await, 401, "{hub}");
        assert_eq!(
            ask(hub.clone(), Some("not-a-key-of-this-host")).await,
            401,
            "{hub}"
        );
    }
    // With the key: the hub served answers, the other is refused.
    assert_eq!(ask(other.clone(), Some(admin)).await, 200);
    assert_eq!(ask(format!("{base}-nope"), Some(admin)).await, 404);
    assert_eq!(ask("no%20spaces".into(), Some(admin)).await, 400);
}
