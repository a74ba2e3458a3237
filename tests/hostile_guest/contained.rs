//! Attacks the sandbox contained before the suite measured a tenant beside
//! them (files, environment, the network, determinism, blocking, oversized
//! and deep values), and timer and activity floods: each ends in a clear
//! error for the attacker, with the tenant measured while it is under way.

use super::*;

/// Starts `attacks` (orchestration, input) of the hostile component at
/// once, measures the tenant while more of them keep coming
/// ([`measure_while_attacking`]), and returns how the first ones ended.
async fn attacked(host: &Host, what: &str, attacks: &[(&str, Value)]) -> Vec<Value> {
    let mut ids = Vec::new();
    for (name, input) in attacks {
        ids.push(start(host, name, input).await);
    }
    measure_while_attacking(host, what, attacks).await;
    let mut ends = Vec::new();
    for id in &ids {
        ends.push(wait_for(host, id, &["Completed", "Failed"]).await);
    }
    ends
}

/// The instance failed, its output saying each of `said`.
fn failed_saying(done: &Value, said: &[&str]) {
    assert_eq!(done["runtimeStatus"], "Failed", "{done}");
    let output = done["output"].as_str().unwrap_or_default();
    for words in said {
        assert!(output.contains(words), "'{words}' not in: {done}");
    }
}

/// Runs the hostile component's own activity `{activity, input}`; the
/// instance fails with the activity's error.
fn activity(name: &str, input: Value) -> (&'static str, Value) {
    (
        "strict_activity",
        json!({ "activity": name, "input": input }),
    )
}

/// No file of the host is open to a guest (no directory is preopened):
/// not the system's, not the host's store, not its process's environment.
#[tokio::test(flavor = "multi_thread")]
async fn a_guest_reads_no_file_of_the_host() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let store = dir.path().join("agenthost.db");
    let paths = [
        "/etc/passwd".to_string(),
        store.display().to_string(),
        // The host runs in the test's directory.
        "agenthost.db".to_string(),
        "/proc/self/environ".to_string(),
    ];
    let attacks: Vec<_> = paths
        .iter()
        .map(|path| activity("read_file", json!({ "path": path })))
        .collect();
    let ends = attacked(&host, "reads of the host's files", &attacks).await;
    for (path, done) in paths.iter().zip(&ends) {
        failed_saying(done, &[&format!("cannot open {path}")]);
        assert!(!done.to_string().contains("root:"), "{done}");
    }
}

/// A guest's environment holds only the variables its grants name: with
/// none, nothing, in activities and in orchestration code alike (the host
/// runs with the model's key in its own).
#[tokio::test(flavor = "multi_thread")]
async fn a_guest_sees_no_environment_it_was_not_granted() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let attacks = [activity("env", json!({})), ("env_in_code", json!(null))];
    for done in attacked(&host, "reads of the environment", &attacks).await {
        assert_eq!(done["runtimeStatus"], "Completed", "{done}");
        assert_eq!(done["output"], json!({}), "{done}");
    }
}

/// A local server: `/away` redirects to another local server (never
/// granted, counting what reaches it), `/near` to its own `/here`.
async fn serve_redirector() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let hits = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let elsewhere = axum::Router::new().fallback(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        async { "the ungranted server answered" }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let away = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, elsewhere).await });
    let app = axum::Router::new()
        .route(
            "/away",
            axum::routing::get(move || {
                let away = away.clone();
                async move { axum::response::Redirect::temporary(&away) }
            }),
        )
        .route(
            "/near",
            axum::routing::get(|| async { axum::response::Redirect::to("/here") }),
        )
        .route("/here", axum::routing::get(|| async { "reached" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, hits)
}

/// The network past a guest's grants, each way there is: sockets opened
/// with the standard library (no `wasi:sockets` address is allowed), the
/// host's own address and the metadata service written every way a URL
/// can write them (none granted: refused before a connection), granted
/// names that resolve inside the host's network (refused once resolved),
/// and a redirect from a granted server to an ungranted one. Each fails
/// the attacker's own instance with the reason; nothing reaches a local
/// listener or the ungranted server.
#[tokio::test(flavor = "multi_thread")]
async fn a_guest_reaches_nothing_inside_the_hosts_network() {
    use std::sync::atomic::Ordering;
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let (redirector, elsewhere_hits) = serve_redirector().await;
    // A listener no guest may reach: anything accepted here is a leak.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let local = listener.local_addr().unwrap();
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::write(
        components.join("hostile.toml"),
        format!("allowed_hosts = [\"*.inside.test\", \"127.0.0.1:{redirector}\"]\n"),
    )
    .unwrap();
    let inside = [
        ("loopback", "127.0.0.1"),
        ("metadata", "169.254.169.254"),
        ("mapped", "::ffff:127.0.0.1"),
        ("nat64", "64:ff9b::a9fe:a9fe"),
        ("unique-local", "fd00:ec2::254"),
        ("private", "10.0.0.1"),
        ("shared", "100.100.100.200"),
        ("unspecified", "0.0.0.0"),
    ];
    let resolve: Vec<String> = inside
        .iter()
        .map(|(name, address)| format!("{name}.inside.test={address}"))
        .collect();
    let host = beside(dir.path(), &model, &[])
        .arg("--resolve")
        .arg(&resolve.join(";"))
        .start();
    let port = local.port();
    let mut cases: Vec<(String, (&str, Value), &str)> = Vec::new();
    for (op, address) in [
        ("connect", format!("127.0.0.1:{port}")),
        ("connect", format!("localhost:{port}")),
        ("connect", "169.254.169.254:80".to_string()),
        ("bind", "0.0.0.0:0".to_string()),
        ("udp", format!("127.0.0.1:{port}")),
    ] {
        let case = activity("socket", json!({ "op": op, "address": address }));
        cases.push((format!("{op} {address}"), case, "socket"));
    }
    let own = host.base.trim_start_matches("http://").to_string();
    let own_port = own.rsplit(':').next().unwrap_or_default().to_string();
    let ungranted = [
        format!("http://{own}/api/health"),
        format!("http://localhost:{own_port}/api/health"),
        format!("http://0x7f000001:{own_port}/"),
        format!("http://2130706433:{own_port}/"),
        format!("http://0177.0.0.1:{own_port}/"),
        format!("http://127.1:{own_port}/"),
        format!("http://[::1]:{own_port}/"),
        format!("http://[::ffff:7f00:1]:{own_port}/"),
        "http://169.254.169.254/latest/meta-data/".to_string(),
        "http://metadata.google.internal/computeMetadata/v1/".to_string(),
        "http://100.100.100.200/latest/meta-data/".to_string(),
        "http://[fd00:ec2::254]/latest/meta-data/".to_string(),
    ];
    for url in ungranted {
        let case = activity("fetch", json!({ "url": url }));
        cases.push((url, case, "HttpRequestDenied"));
    }
    for (name, _) in inside {
        let url = format!("http://{name}.inside.test/");
        let case = activity("fetch", json!({ "url": url }));
        cases.push((url, case, "DestinationIpProhibited"));
    }
    let away = format!("http://127.0.0.1:{redirector}/away");
    cases.push((
        away.clone(),
        activity("fetch", json!({ "url": away })),
        "HttpRequestDenied",
    ));
    let attacks: Vec<_> = cases.iter().map(|(_, case, _)| case.clone()).collect();
    let ends = attacked(&host, "reaches into the host's network", &attacks).await;
    for ((what, _, said), done) in cases.iter().zip(&ends) {
        assert_eq!(done["runtimeStatus"], "Failed", "{what}: {done}");
        let output = done["output"].as_str().unwrap_or_default();
        let expected = if *said == "socket" {
            // The standard library's words for a refused address, and
            // for a refused name lookup.
            ["Permission denied", "failed to lookup address information"]
                .iter()
                .any(|words| output.contains(words))
        } else {
            output.contains(said)
        };
        assert!(expected, "{what}: {done}");
    }
    assert!(
        listener.accept().is_err(),
        "a guest connected to a local listener"
    );
    assert_eq!(
        elsewhere_hits.load(Ordering::SeqCst),
        0,
        "a redirect was followed"
    );
    // Within the grant, a redirect is followed: the refusals are the grants'.
    let near = start(
        &host,
        "strict_activity",
        &json!({ "activity": "fetch", "input": { "url": format!("http://127.0.0.1:{redirector}/near") } }),
    )
    .await;
    let done = wait_for(&host, &near, &["Completed", "Failed"]).await;
    assert_eq!(
        done["output"],
        json!({ "status": 200, "body": "reached" }),
        "{done}"
    );
}

/// Orchestration code that tries to tell a replay from the first run by
/// the clock, randomness or a hash map's order (to take another step on
/// replay) computes on every replay the values it journaled: the instance
/// completes, nothing differed. (`determinism::` shows the same for the
/// values one by one, and a code change caught as non-deterministic.)
#[tokio::test(flavor = "multi_thread")]
async fn orchestration_code_cannot_tell_a_replay_by_the_clock_randomness_or_map_order() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let attacks = [("leak_ambient", json!(null)), ("leak_ambient", json!(null))];
    let ends = attacked(&host, "replays looking for a leak", &attacks).await;
    for done in &ends {
        assert_eq!(done["runtimeStatus"], "Completed", "{done}");
        assert_eq!(done["output"]["differed"], json!(false), "{done}");
        assert_eq!(
            done["output"]["journaled"]["map_order"]
                .as_array()
                .map(Vec::len),
            Some(16),
            "{done}"
        );
    }
    // Two instances are two seeds: what is fixed is each replay, not the
    // values themselves.
    assert_ne!(
        ends[0]["output"]["journaled"]["random"], ends[1]["output"]["journaled"]["random"],
        "{ends:?}"
    );
}

/// Orchestration code that blocks (a sleep) traps at once, naming the
/// durable timer to use instead; code that spins is stopped by the
/// episode's CPU budget. Neither holds another component's episode.
#[tokio::test(flavor = "multi_thread")]
async fn orchestration_code_that_blocks_or_spins_fails_its_own_instance() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let attacks = [
        ("block", json!(null)),
        ("block", json!(null)),
        ("spin_code", json!(null)),
    ];
    let ends = attacked(&host, "orchestration code that blocks or spins", &attacks).await;
    failed_saying(&ends[0], &["waited on the clock", "durable timer"]);
    failed_saying(&ends[1], &["waited on the clock", "durable timer"]);
    failed_saying(&ends[2], &["--episode-cpu-time"]);
}

/// Every value orchestration code hands the host is held to
/// `--max-payload-bytes` (1 MiB) before it is stored: its output, custom
/// status, an activity's input and result, a continue-as-new input. Each
/// 2 MiB one fails its own instance, naming the limit.
#[tokio::test(flavor = "multi_thread")]
async fn oversized_values_fail_their_own_instance_naming_the_limit() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let places = [
        "output",
        "custom_status",
        "activity_input",
        "activity_result",
        "continue_as_new",
    ];
    let attacks: Vec<_> = places
        .iter()
        .map(|place| {
            (
                "hand_over",
                json!({ "place": place, "shape": "big", "bytes": 2 << 20 }),
            )
        })
        .collect();
    let ends = attacked(&host, "2 MiB values", &attacks).await;
    for (place, done) in places.iter().zip(&ends) {
        assert_eq!(done["runtimeStatus"], "Failed", "{place}: {done}");
        let output = done["output"].as_str().unwrap_or_default();
        assert!(
            output.contains("over the limit of 1048576 bytes"),
            "{place}: {output}"
        );
    }
}

/// JSON nested 100,000 deep (200 KB, under the payload limit; 1,000 where
/// the guest's serializer must write it) handed to the host at each place
/// a guest can: no parser of the host recurses down it (serde_json stops
/// at 128): what it keeps it keeps as text, served back whole as a JSON
/// string; where the attacker's own SDK parses it back (an activity's
/// arguments, a continue-as-new input) its instance fails with the
/// parser's error. The host answers for every instance and stays healthy.
#[tokio::test(flavor = "multi_thread")]
async fn deeply_nested_json_is_kept_as_text_and_never_parsed_down_by_the_host() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let places = [
        ("output", 1_000),
        ("custom_status", 100_000),
        ("activity_input", 100_000),
        ("activity_result", 1_000),
        ("continue_as_new", 100_000),
    ];
    let attacks: Vec<_> = places
        .iter()
        .map(|(place, depth)| {
            (
                "hand_over",
                json!({ "place": place, "shape": "deep", "depth": depth }),
            )
        })
        .collect();
    let ends = attacked(&host, "JSON nested 100,000 deep", &attacks).await;
    let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    // Where the guest's own SDK parses it back, its parser's limit fails
    // the instance with its error.
    failed_saying(&ends[2], &["invalid arguments: recursion limit exceeded"]);
    failed_saying(&ends[4], &["invalid input: recursion limit exceeded"]);
    // What the host keeps, it keeps as the text it was given, parsed no
    // deeper than its parser's limit: served as a JSON string, whole.
    assert_eq!(ends[0]["runtimeStatus"], "Completed", "{}", ends[0]);
    assert_eq!(ends[0]["output"], json!(nested(1_000)));
    assert_eq!(ends[1]["runtimeStatus"], "Completed", "{}", ends[1]);
    assert_eq!(ends[1]["customStatus"], json!(nested(100_000)));
    // A result the code awaits without parsing reaches it.
    assert_eq!(
        ends[3]["output"],
        json!("the result came back"),
        "{}",
        ends[3]
    );
    let health: Value = crate::support::get_json(host.url("/api/health")).await;
    assert_eq!(health["status"], "healthy", "{health}");
}

/// One orchestration scheduling thousands of timers, or of activities, at
/// once: past `--max-history-events` (here 2,000) the instance fails
/// naming the limit, before anything of it is stored; within it the flood
/// runs on its component's share while the tenant is measured.
#[tokio::test(flavor = "multi_thread")]
async fn a_timer_or_activity_flood_is_held_to_the_history_limit() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[])
        .arg("--max-history-events")
        .arg("2000")
        .start();
    let attacks = [
        ("timer_flood", json!({ "count": 5_000, "ms": 500 })),
        ("activity_flood", json!({ "count": 5_000 })),
        ("timer_flood", json!({ "count": 500, "ms": 500 })),
        ("activity_flood", json!({ "count": 500 })),
    ];
    let ends = attacked(&host, "timer and activity floods", &attacks).await;
    // A timer is two calls (the timer and its wait): 10,000 in one
    // episode, past `--max-episode-calls` before the history limit.
    failed_saying(&ends[0], &["10000 calls", "--max-episode-calls"]);
    failed_saying(&ends[1], &["over the limit of 2000 events"]);
    for done in &ends[2..] {
        assert_eq!(done["runtimeStatus"], "Completed", "{done}");
        assert_eq!(done["output"], json!(500), "{done}");
    }
}

/// One orchestration scheduling 15,000 activities, within the default
/// `--max-history-events` (50,000). Their results, coalesced, were queued
/// to the store's writer all at once (first come, first served), and on
/// SQLite every write of another tenant waited behind them: the tenant's
/// one-step orchestration took 12.5 to 31.6 s and its agent run 12.5 to
/// 35.4 s (debug build; issue 54). One call's writes are now queued a
/// group at a time. Scheduled in one episode, the 15,000 were journaled
/// and scheduled in one commit, which held the tenant 5.5 s (make test,
/// SQLite): an episode may make `--max-episode-calls` (5,000) calls, past
/// which its instance fails naming the limit; the same 15,000 in batches of
/// 5,000 run, and the tenant is measured again and again from the start of
/// the flood to its end, so the moment each batch lands is measured.
///
/// Each batch's 5,000 tasks were spawned at once and filled the host's
/// async runtime's shared queue (4,600 tasks), where every task woken from
/// outside the runtime, each answer of the store's writer, waited behind
/// them: the tenant took 2.1 to 2.5 s during each batch (issue 54's bound
/// of 5 s was crossed in CI). A fan-out is now started a chunk at a time:
/// the queue, scraped all along (`agenthost_runtime_queued_tasks`), stays
/// short, which is measured rather than timed.
#[tokio::test(flavor = "multi_thread")]
async fn an_activity_flood_within_the_history_limit_leaves_others_their_share() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let at_once = start(&host, "activity_flood", &json!({ "count": 15_000 })).await;
    let refused = wait_for(&host, &at_once, &["Completed", "Failed"]).await;
    failed_saying(&refused, &["15000 calls", "--max-episode-calls"]);
    let flood = start(
        &host,
        "activity_flood",
        &json!({ "count": 15_000, "batch": 5_000 }),
    )
    .await;
    let began = std::time::Instant::now();
    let queue = RuntimeQueue::watch(&host);
    let mut measured = 0;
    let done = loop {
        let (_, status) = crate::support::durable::status(&host, &flood).await;
        if !matches!(
            status["runtimeStatus"].as_str(),
            Some("Pending" | "Running")
        ) {
            break status;
        }
        assert!(
            began.elapsed() < std::time::Duration::from_secs(240),
            "the flood still runs after 240 s: {status}"
        );
        tenant::measure(&host, "15,000 activities of one orchestration").await;
        measured += 1;
    };
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(done["output"], json!(15_000), "{done}");
    assert!(
        measured > 1,
        "the tenant was measured {measured} times during the flood"
    );
    let (scrapes, longest) = queue.stop().await;
    assert!(
        scrapes > 10,
        "the runtime's queue was scraped {scrapes} times"
    );
    assert!(
        longest < RUNTIME_QUEUE_BOUND,
        "the host's async runtime queued {longest} tasks during the flood (bound {RUNTIME_QUEUE_BOUND})"
    );
}

/// The most tasks the host's runtime may hold ready in its shared queue
/// during the flood: 4,600 when a batch's 5,000 were spawned at once; a
/// few when started 64 at a time.
const RUNTIME_QUEUE_BOUND: f64 = 1_000.0;

/// Scrapes `agenthost_runtime_queued_tasks` until stopped, keeping the
/// longest queue seen.
struct RuntimeQueue {
    stop: tokio::sync::oneshot::Sender<()>,
    scraping: tokio::task::JoinHandle<(usize, f64)>,
}

impl RuntimeQueue {
    fn watch(host: &crate::support::host::Host) -> Self {
        let url = host.url("/metrics");
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let scraping = tokio::spawn(async move {
            let (mut scrapes, mut longest) = (0, 0.0_f64);
            while stopped.try_recv().is_err() {
                let queued =
                    crate::support::metric_at(url.clone(), "agenthost_runtime_queued_tasks").await;
                scrapes += 1;
                longest = longest.max(queued);
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            (scrapes, longest)
        });
        Self { stop, scraping }
    }

    async fn stop(self) -> (usize, f64) {
        let _ = self.stop.send(());
        self.scraping.await.unwrap()
    }
}
