//! A component built to attack the host from inside (issue 54): each attack
//! ends in a clear error for the attacker's own instance or run, and a
//! second tenant's work is measured while the attack is under way
//! ([`tenant::measure`]): its one-step orchestration and its agent run
//! answer within the bounds stated in `docs/reliability.md`, and the host's
//! memory stays under its bound.

use serde_json::{json, Value};

use crate::support::durable::{start, status as status_of, wait_for, wait_for_custom_status};
use crate::support::host::Host;
use crate::support::{client, FakeModel, HostBuilder, Reply};

/// A host serving the attacker (`hostile`), the second tenant
/// ([`tenant::COMPONENTS`]) and `others` (what an attack meets), on the
/// fake model, answering as [`script_the_model`] says.
fn beside(dir: &std::path::Path, model: &FakeModel, others: &[&str]) -> HostBuilder {
    script_the_model(model);
    let mut components = vec!["hostile"];
    components.extend(tenant::COMPONENTS);
    for other in others {
        if !components.contains(other) {
            components.push(other);
        }
    }
    HostBuilder::new(dir)
        .components(&components)
        .openai(model, "sk-test")
}

/// The hostile agent's requests are answered from its user message (a JSON
/// list of tool calls, `[[name, arguments], …]`) and then with what its
/// tools said; every other agent's with the echo. Scripted replies would
/// go to whichever agent asks first, the tenant's included.
fn script_the_model(model: &FakeModel) {
    model.respond_with(std::sync::Arc::new(|request| {
        if !is_hostile(request) {
            return Reply::Echo;
        }
        let last = request.messages().last().cloned().unwrap_or_default();
        if last["role"] == "tool" {
            return Reply::ToolResult;
        }
        let calls: Vec<(String, Value)> =
            serde_json::from_str(&request.last_user_message()).unwrap_or_default();
        Reply::ToolCalls(calls)
    }));
}

/// Whether `request` is the hostile agent's (by its instructions).
fn is_hostile(request: &crate::support::fake_model::Recorded) -> bool {
    request
        .messages()
        .first()
        .is_some_and(|m| m["content"].as_str() == Some("Call the tool the user names."))
}

/// The hostile agent's last request to the model.
fn last_hostile_request(model: &FakeModel) -> crate::support::fake_model::Recorded {
    model
        .requests()
        .into_iter()
        .rev()
        .find(is_hostile)
        .expect("a request of the hostile agent")
}

/// The cores shared between components.
mod cpu_share;

/// A second tenant: another component's one-step orchestration and agent
/// run, measured while an attack is under way, and the host's memory.
pub(crate) mod tenant {
    use std::time::{Duration, Instant};

    use serde_json::{json, Value};

    use crate::support::durable::{start, wait_for_within};
    use crate::support::host::Host;

    /// What the host must serve besides the attacker: the sample agent
    /// `writer`, and `orchestration-tests` (its `sequence`, one activity).
    pub(crate) const COMPONENTS: [&str; 2] = ["writer", "orchestration-tests"];

    /// The tenant's one-step orchestration, start to `Completed`. It takes
    /// about 0.1 s on an idle debug build; the bound leaves room for a busy
    /// machine (two cores, other builds) and still tells a tenant held
    /// behind an attack (30 s before issue 54) from one that is not.
    pub(crate) const TENANT_ORCHESTRATION_BOUND: Duration = Duration::from_secs(5);

    /// The tenant's agent run, `POST /api/agents/writer/run` to its 200
    /// (one model turn against the fake model).
    pub(crate) const TENANT_RUN_BOUND: Duration = Duration::from_secs(5);

    /// The host's peak resident memory (`VmHWM`) at the end of the
    /// measurement: a debug build serving the three components peaks at
    /// 72 to 95 MiB under these attacks; one attack (an await naming one
    /// task 6,000 times) used to take a host to 5.9 GB.
    pub(crate) const RSS_BOUND_MIB: u64 = 512;

    /// What was measured.
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Measured {
        pub(crate) orchestration: Duration,
        pub(crate) run: Duration,
        pub(crate) rss_mib: u64,
        pub(crate) peak_rss_mib: u64,
    }

    impl Measured {
        /// Prints what was measured during `attack`, and asserts each
        /// against its bound.
        pub(crate) fn check(&self, attack: &str) {
            let Self {
                orchestration,
                run,
                rss_mib,
                peak_rss_mib,
            } = *self;
            eprintln!(
                "tenant during {attack}: orchestration {:.2} s, run {:.2} s, RSS {rss_mib} MiB (peak {peak_rss_mib} MiB)",
                orchestration.as_secs_f64(),
                run.as_secs_f64(),
            );
            assert!(
                orchestration < TENANT_ORCHESTRATION_BOUND,
                "during {attack} the tenant's orchestration took {orchestration:?} (bound {TENANT_ORCHESTRATION_BOUND:?})"
            );
            assert!(
                run < TENANT_RUN_BOUND,
                "during {attack} the tenant's agent run took {run:?} (bound {TENANT_RUN_BOUND:?})"
            );
            assert!(
                peak_rss_mib < RSS_BOUND_MIB,
                "during {attack} the host's RSS peaked at {peak_rss_mib} MiB (bound {RSS_BOUND_MIB} MiB)"
            );
        }
    }

    /// Runs the tenant's orchestration and agent run at once, on `host`
    /// (which serves [`COMPONENTS`]), while `attack` is under way; asserts
    /// each against its bound, prints and returns what was measured.
    pub(crate) async fn measure(host: &Host, attack: &str) -> Measured {
        let (orchestration, run) = tokio::join!(one_step(host, attack), agent_run(host, attack));
        let measured = Measured {
            orchestration,
            run,
            rss_mib: host.rss_kib().unwrap_or(0) / 1024,
            peak_rss_mib: peak_rss_kib(host) / 1024,
        };
        measured.check(attack);
        measured
    }

    async fn one_step(host: &Host, attack: &str) -> Duration {
        let began = Instant::now();
        let id = start(host, "sequence", &json!({ "n": 1 })).await;
        // Waited for past its bound, so that a slow tenant fails on its
        // time (said above) rather than on the wait.
        let done =
            wait_for_within(host, &id, &["Completed", "Failed"], Duration::from_secs(60)).await;
        let took = began.elapsed();
        assert_eq!(
            done["runtimeStatus"], "Completed",
            "during {attack} the tenant's orchestration: {done}"
        );
        assert_eq!(done["output"], json!(0), "{done}");
        took
    }

    async fn agent_run(host: &Host, attack: &str) -> Duration {
        let began = Instant::now();
        let response = crate::support::client()
            .post(host.url("/api/agents/writer/run"))
            .header("accept", "application/json")
            .json(&json!({ "message": "a tenant's question" }))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or_default();
        let took = began.elapsed();
        assert_eq!(status, 200, "during {attack} the tenant's run: {body}");
        assert!(
            body["response"]
                .as_str()
                .is_some_and(|r| r.contains("a tenant's question")),
            "during {attack} the tenant's run: {body}"
        );
        took
    }

    /// The host's peak resident memory so far (`VmHWM`), in KiB.
    fn peak_rss_kib(host: &Host) -> u64 {
        host.pid()
            .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
            .and_then(|status| {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            })
            .unwrap_or(0)
    }
}

/// A retry policy whose backoff coefficient is NaN or ±infinity cannot be
/// stored (JSON has no such numbers: it would be written as `null`, and the
/// scheduler's read of due tasks, every instance's, failed on it from then
/// on, across restarts). It is refused where it enters the host: the
/// attacker's instance fails naming it, and another component's retried
/// activity fails on time, as its own code says.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_policy_that_is_not_a_number_fails_its_own_instance_and_no_other() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let mut poisoned = Vec::new();
    for coefficient in ["nan", "inf", "-inf"] {
        let id = start(
            &host,
            "poisoned_retry",
            &json!({ "coefficient": coefficient }),
        )
        .await;
        poisoned.push((coefficient, id));
    }
    let attack = [("poisoned_retry", json!({ "coefficient": "nan" }))];
    measure_while_attacking(&host, "retry policies that are not numbers", &attack).await;
    let victim = start(&host, "failing_activity", &json!(null)).await;
    // Two attempts 50 ms apart: it fails as soon as the scheduler runs the
    // second (wait_for's bound is 30 s; before the fix it stayed Running).
    let done = wait_for(&host, &victim, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Failed", "{done}");
    assert!(
        done["output"]
            .as_str()
            .is_some_and(|o| o.contains("this activity always fails")),
        "{done}"
    );
    for (coefficient, id) in poisoned {
        let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
        assert_eq!(done["runtimeStatus"], "Failed", "{coefficient}: {done}");
        assert!(
            done["output"]
                .as_str()
                .is_some_and(|o| o.contains("backoff_coefficient")),
            "{coefficient}: {done}"
        );
    }
    let log = host.output();
    assert!(
        !log.contains("could not read due tasks"),
        "the scheduler failed to read its tasks:\n{log}"
    );
}

/// `await-all` naming one task thousands of times was answered with a copy
/// of its result per name, made in the host's memory before the guest's
/// limit could stop it (0.9 MB × 6,000: 5 GB of host memory). A task named
/// twice in one await is refused before any copy, as the guest's own error.
#[tokio::test(flavor = "multi_thread")]
async fn an_await_naming_one_task_many_times_is_refused_before_any_copy() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let attack = start(
        &host,
        "await_repeated",
        &json!({ "times": 300, "bytes": 900_000 }),
    )
    .await;
    let again = [("await_repeated", json!({ "times": 300, "bytes": 900_000 }))];
    measure_while_attacking(&host, "an await naming one task 300 times", &again).await;
    let done = wait_for(&host, &attack, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Failed", "{done}");
    assert!(
        done["output"]
            .as_str()
            .is_some_and(|o| o.contains("named more than once in one await")),
        "{done}"
    );
    // The same task awaited once is answered.
    let once = start(&host, "await_repeated", &json!({ "times": 1, "bytes": 10 })).await;
    let done = wait_for(&host, &once, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(done["output"], json!(1), "{done}");
}

/// The test host's store, opened beside it to damage rows the way an older
/// host or a bad disk would.
enum RawStore {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool, String),
}

impl RawStore {
    async fn open(dir: &std::path::Path) -> Self {
        match crate::support::host::test_store() {
            Some(url) => {
                let pool = sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect(&url)
                    .await
                    .unwrap();
                let schema = format!("\"taskhub_{}\"", crate::support::host::hub_for(dir));
                Self::Postgres(pool, schema)
            }
            None => {
                // The hub's own file beside the one named (see `TaskHub`).
                let hub = crate::support::host::hub_for(dir);
                let file = dir.join(format!("agenthost.{hub}.db"));
                let url = format!("sqlite://{}", file.display());
                let pool = sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect(&url)
                    .await
                    .unwrap();
                Self::Sqlite(pool)
            }
        }
    }

    fn tasks(&self) -> String {
        match self {
            Self::Sqlite(_) => "tasks".into(),
            Self::Postgres(_, schema) => format!("{schema}.tasks"),
        }
    }

    /// When the instance's task is next due, once it waits for a retry.
    async fn retry_due_at(&self, id: &str) -> Option<i64> {
        let sql = format!(
            "SELECT due_at FROM {} WHERE instance_id = $1 AND attempt > 0",
            self.tasks()
        );
        match self {
            Self::Sqlite(pool) => sqlx::query_scalar(&sql).bind(id).fetch_optional(pool).await,
            Self::Postgres(pool, _) => sqlx::query_scalar(&sql).bind(id).fetch_optional(pool).await,
        }
        .unwrap()
    }

    async fn set_task_column(&self, id: &str, assignment: &str) {
        let sql = format!(
            "UPDATE {} SET {assignment} WHERE instance_id = $1",
            self.tasks()
        );
        let changed = match self {
            Self::Sqlite(pool) => sqlx::query(&sql)
                .bind(id)
                .execute(pool)
                .await
                .unwrap()
                .rows_affected(),
            Self::Postgres(pool, _) => sqlx::query(&sql)
                .bind(id)
                .execute(pool)
                .await
                .unwrap()
                .rows_affected(),
        };
        assert_eq!(changed, 1, "{sql}");
    }
}

/// Starts `slow_retry` (its activity fails, retried after `delay_ms`) and
/// waits until its retry is stored: its id and when the retry is due.
async fn waiting_on_a_retry(
    host: &crate::support::host::Host,
    dir: &std::path::Path,
    delay_ms: u64,
) -> (RawStore, String, i64) {
    let id = start(host, "slow_retry", &json!({ "delay_ms": delay_ms })).await;
    // Opened once the host has made it.
    let raw = RawStore::open(dir).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Some(due) = raw.retry_due_at(&id).await {
            return (raw, id, due);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{id}'s retry was never stored\n{}",
            host.output()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Sleeps until `due_at` (ms since the epoch) has passed by `margin_ms`.
async fn sleep_past(due_at: i64, margin_ms: i64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let wait = (due_at + margin_ms - now).max(0) as u64;
    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
}

/// A due task whose stored call cannot be decoded (an older host's row, a
/// damaged one) failed the scheduler's whole read of due tasks, pass after
/// pass, across restarts: no delayed retry or task ran for any instance. It
/// is quarantined: its own instance fails with the reason, logged once, and
/// another component's delayed retry runs on time.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreadable_task_row_fails_its_own_instance_and_no_other() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let (raw, damaged, due_at) = waiting_on_a_retry(&host, dir.path(), 1_500).await;
    raw.set_task_column(&damaged, r#"call = '{"bad":'"#).await;
    sleep_past(due_at, 300).await;
    tenant::measure(&host, "an unreadable task row").await;
    // Two attempts 50 ms apart: the second is found by the scheduler's
    // read of due tasks, the one the damaged row used to fail.
    let started = std::time::Instant::now();
    let victim = start(&host, "failing_activity", &json!(null)).await;
    let done = wait_for(&host, &victim, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Failed", "{done}");
    assert!(
        done["output"]
            .as_str()
            .is_some_and(|o| o.contains("this activity always fails")),
        "{done}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the victim's retry waited {:?}",
        started.elapsed()
    );
    let done = wait_for(&host, &damaged, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Failed", "{done}");
    assert!(
        done["output"]
            .as_str()
            .is_some_and(|o| o.contains("the stored task could not be read")),
        "{done}"
    );
    // Passes go on a second apart at most: the row is not read again.
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    let log = host.output();
    assert_eq!(
        log.matches("a due task could not be read from the store")
            .count(),
        1,
        "{log}"
    );
    assert!(!log.contains("could not read due tasks"), "{log}");
    let metrics = crate::support::client()
        .get(host.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"agenthost_tasks_unreadable_total{orchestration="slow_retry"} 1"#),
        "{metrics}"
    );
}

/// A scheduler whose reads keep failing (here a due task whose key cannot
/// be read, which names no task to fail: SQLite stores text in an integer
/// column) holds every timer and delayed retry: `/api/health` says so after
/// a few passes, and the error is logged once, not every second.
#[tokio::test(flavor = "multi_thread")]
async fn health_reports_a_scheduler_whose_reads_keep_failing() {
    if crate::support::host::test_store().is_some() {
        // PostgreSQL keeps a column's type: nothing to damage this way.
        return;
    }
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let health: serde_json::Value = crate::support::get_json(host.url("/api/health")).await;
    assert_eq!(health["status"], "healthy", "{health}");
    let (raw, damaged, due_at) = waiting_on_a_retry(&host, dir.path(), 300).await;
    raw.set_task_column(&damaged, "attempt = 'x'").await;
    sleep_past(due_at, 0).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let health = loop {
        let health: serde_json::Value = crate::support::get_json(host.url("/api/health")).await;
        if health["status"] == "degraded" {
            break health;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{health}\n{}",
            host.output()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(
        health["reason"]
            .as_str()
            .is_some_and(|r| r.contains("could not read due tasks")),
        "{health}"
    );
    // The reads keep failing meanwhile.
    tenant::measure(&host, "a scheduler whose reads keep failing").await;
    let log = host.output();
    assert_eq!(
        log.matches("the scheduler could not read the store")
            .count(),
        1,
        "{log}"
    );
}

/// A component's event route reaches only the instances of the
/// orchestrations its own component serves. The hostile component declares
/// `evil/{instanceId}` raising `go`, the event another component's
/// `wait_event` waits for: called on that instance, it answers as for an
/// unknown instance (404, the same body) and the instance keeps waiting,
/// then completes by its own route. The route still raises on the hostile
/// component's own instance. (Before, it completed the other component's
/// instance with the attacker's payload.)
#[tokio::test(flavor = "multi_thread")]
async fn a_components_event_route_reaches_only_its_own_components_instances() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let victim = start(&host, "wait_event", &json!(null)).await;
    wait_for_custom_status(&host, &victim, "", &json!("waiting")).await;

    let evil = format!("/api/evil/{victim}");
    let ((status, refused), _) = tokio::join!(
        post(&host, &evil, "attacker"),
        tenant::measure(
            &host,
            "an event route called on another component's instance"
        )
    );
    let never = "never-was-an-instance";
    let (unknown_status, unknown) = post(&host, &format!("/api/evil/{never}"), "attacker").await;
    assert_eq!(
        (status, unknown_status),
        (404, 404),
        "{refused} / {unknown}"
    );
    assert_eq!(
        refused.to_string().replace(&victim, never),
        unknown.to_string(),
        "another component's instance answers as an unknown one"
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (_, waiting) = status_of(&host, &victim).await;
    assert_eq!(waiting["runtimeStatus"], "Running", "{waiting}");

    // Its own component's route completes it, with its own payload.
    let (status, accepted) = post(&host, &format!("/api/go/{victim}"), "owner").await;
    assert_eq!(status, 202, "{accepted}");
    let done = wait_for(&host, &victim, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(done["output"], json!("owner"), "{done}");

    // The route works on the instances of its own component.
    let own = start(&host, "evil_route", &json!(null)).await;
    wait_for(&host, &own, &["Running"]).await;
    let (status, accepted) = post(&host, &format!("/api/evil/{own}"), "mine").await;
    assert_eq!(status, 202, "{accepted}");
    let done = wait_for(&host, &own, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], json!("mine"), "{done}");
}

/// `POST` `path` with the JSON string `payload`: status and body.
async fn post(host: &Host, path: &str, payload: &str) -> (u16, Value) {
    let response = client()
        .post(host.url(path))
        .json(&json!(payload))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A tool's result over `--max-tool-result-bytes` is refused to the model
/// with a tool error saying its size, and nothing of it is stored: a 30 MB
/// result went to the model in a 31.5 MB request and stayed in the session
/// for every later one. Results under the limit are held to the history
/// budget: while a turn is over it, its oldest results are left out.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_result_over_the_limit_is_refused_to_the_model_and_not_stored() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let calls = json!([["big_result", { "bytes": 30_000_000 }]]);
    let (answer, _) = tokio::join!(
        run(&host, "huge", &calls),
        tenant::measure(&host, "a 30 MB tool result")
    );
    let request = last_hostile_request(&model);
    let size = request.body.to_string().len();
    assert!(size < 1 << 20, "the model was sent {size} bytes");
    let said = request.last_tool_result().unwrap_or_default();
    assert!(
        said.contains("'big_result' was 30000002 bytes, over the host's limit of 131072 bytes"),
        "{said}"
    );
    assert!(answer.contains("over the host's limit"), "{answer}");
    let stored = session(&host, "huge").await;
    assert!(
        stored.len() < 1 << 20,
        "the session holds {} bytes",
        stored.len()
    );

    // Four results of 100 KB each (under the limit), about 100,000 tokens
    // in one turn: over the default budget of 64,000, the oldest two go.
    let calls: Vec<Value> = (0..4)
        .map(|_| json!(["big_result", { "bytes": 100_000 }]))
        .collect();
    run(&host, "four", &json!(calls)).await;
    let request = last_hostile_request(&model);
    let size = request.body.to_string().len();
    assert!(size < 300_000, "the model was sent {size} bytes");
    let results: Vec<String> = request
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect();
    assert_eq!(results.len(), 4, "one result per call");
    assert!(
        results[..2]
            .iter()
            .all(|r| r.contains("left out") && r.contains("history budget")),
        "{:?}",
        results.iter().map(|r| r.len()).collect::<Vec<_>>()
    );
    assert!(results[2..].iter().all(|r| r.len() > 100_000));
}

/// Runs the hostile agent in session `session`, the model asking for the
/// tool `calls` (`[[name, arguments], …]`): its answer.
async fn run(host: &Host, session: &str, calls: &Value) -> String {
    let response = client()
        .post(host.url("/api/agents/hostile/run"))
        .header("accept", "application/json")
        .json(&json!({ "message": calls.to_string(), "sessionId": session }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["response"].as_str().unwrap_or_default().to_string()
}

/// The stored conversation of `session`, as the sessions API answers it.
async fn session(host: &Host, session: &str) -> String {
    client()
        .get(host.url(&format!("/api/agents/hostile/sessions/{session}")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// An orchestration's agent call acts for the instance (or, with keys, the
/// key that started it): a conversation a user started over HTTP cannot be
/// joined by a component naming its session id, and nothing of the call
/// lands in it; a conversation the instance starts is its own to continue.
#[tokio::test(flavor = "multi_thread")]
async fn an_orchestration_cannot_join_a_conversation_it_did_not_start() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let told = crate::support::client()
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "my secret is 42", "sessionId": "bob-session-7"}))
        .send()
        .await
        .unwrap();
    assert_eq!(told.status(), 200);
    let attack = start(&host, "join_session", &json!({"session": "bob-session-7"})).await;
    let again = [("join_session", json!({"session": "bob-session-7"}))];
    measure_while_attacking(
        &host,
        "an orchestration joining another's conversation",
        &again,
    )
    .await;
    let done = wait_for(&host, &attack, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Failed", "{done}");
    assert!(
        done["output"]
            .as_str()
            .is_some_and(|o| o.contains("started by another caller")),
        "{done}"
    );
    assert!(
        !done.to_string().contains("secret is 42"),
        "the user's conversation leaked: {done}"
    );
    // The model never saw the user's message again, and the user's
    // conversation holds only the user's turn.
    let heard = model
        .requests()
        .iter()
        .filter(|r| r.body.to_string().contains("my secret is 42"))
        .count();
    assert_eq!(heard, 1, "the model was asked over the user's history");
    let session: serde_json::Value =
        crate::support::get_json(host.url("/api/agents/writer/sessions/bob-session-7")).await;
    assert!(
        !session.to_string().contains("what did I tell you"),
        "the component's turn landed in the user's conversation: {session}"
    );
    // A conversation of its own (the chaining sample continues one).
    let own = start(&host, "join_session", &json!({"session": "mine-1"})).await;
    let done = wait_for(&host, &own, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
}

/// An orchestration that continues as new at once, forever, ran ~3,500
/// generations a second (six held both cores; two ran ~270 a second each
/// in a debug build): each instance may continue as new 20 times at once,
/// then 10 times a second. Another component's one-step orchestration
/// completes meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_continue_as_new_loop_is_paced_and_others_run_meanwhile() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let input = json!(0);
    let mut loops = Vec::new();
    for _ in 0..2 {
        loops.push(start(&host, "forever_new", &input).await);
    }
    let began = std::time::Instant::now();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    tenant::measure(&host, "two continue-as-new loops").await;
    let victim = start(&host, "sequence", &json!({ "n": 1 })).await;
    let done = crate::support::durable::wait_for_within(
        &host,
        &victim,
        &["Completed", "Failed"],
        std::time::Duration::from_secs(5),
    )
    .await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let seconds = began.elapsed().as_secs_f64();
    for id in &loops {
        let (_, status) = crate::support::durable::status(&host, id).await;
        // The input of the execution running now is its generation.
        let generation = status["input"]
            .as_str()
            .and_then(|i| i.parse::<f64>().ok())
            .or_else(|| status["input"].as_f64())
            .unwrap_or_else(|| panic!("{status}"));
        eprintln!("{id}: {generation} generations in {seconds:.1} s");
        // 20 at once, then 10 a second; unpaced it was hundreds a second.
        assert!(
            generation < 20.0 + 13.0 * seconds,
            "{id} ran {generation} generations in {seconds:.1} s"
        );
        assert!(
            generation >= 20.0,
            "{id} ran {generation} generations: {status}"
        );
    }
}

/// Activities that sleep (no CPU) holding every guest slot made another
/// component's one-step orchestration fail after the episode timeout,
/// "orchestration code must not block": its wait for a slot was counted as
/// its own running time. The timeout starts when the guest has a slot, and
/// a component without a `max_instances` grant holds half the host's slots
/// at most: the victim completes before any nap ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_component_holding_every_slot_does_not_fail_another_components_episode() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[])
        .arg("--max-instances")
        .arg("8")
        .arg("--episode-timeout")
        .arg("2s")
        .start();
    // Naps far longer than the victim needs, so that the bound below
    // holds on a busy machine and still tells the two apart.
    let flood = start(&host, "nap_flood", &json!({ "count": 8, "ms": 8_000 })).await;
    // Until the naps hold their slots (none is free: an episode of the
    // flood itself needs one too).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    let victim = start(&host, "sequence", &json!({ "n": 1 })).await;
    let done = wait_for(&host, &victim, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    let took = started.elapsed();
    eprintln!("the victim completed in {took:?}");
    // The flood holds its share, half the slots: the victim never waits for
    // a nap to end (without the share it waited for the first: 7.5 s here).
    assert!(
        took < std::time::Duration::from_secs(4),
        "the victim took {took:?}"
    );
    tenant::measure(&host, "eight naps holding the component's share").await;
    let (_, napping) = status_of(&host, &flood).await;
    assert!(
        ["Pending", "Running"].contains(&napping["runtimeStatus"].as_str().unwrap_or_default()),
        "measured after the attack: {napping}"
    );
    let done = wait_for(&host, &flood, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(done["output"], json!(8), "{done}");
}

/// Many instances of one component, each with an activity that sleeps:
/// their share of guest slots held, the rest of their episodes waited for
/// it holding the engine's episode slots (32), and another component's
/// episodes queued behind them for as long as the naps lasted. An episode
/// waits for its component's share without an engine slot.
#[tokio::test(flavor = "multi_thread")]
async fn episodes_waiting_for_their_components_share_do_not_hold_others_back() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[])
        .arg("--max-instances")
        .arg("64")
        .start();
    // 32 naps hold the share (half of 64); 34 more episodes wait for it.
    // Naps far longer than the victim needs (see the bound below).
    let input = json!({ "count": 1, "ms": 6_000 });
    let mut floods = Vec::new();
    for _ in 0..66 {
        floods.push(start(&host, "nap_flood", &input).await);
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let victim = start(&host, "sequence", &json!({ "n": 1 })).await;
    let done = wait_for(&host, &victim, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    let took = started.elapsed();
    eprintln!("the victim completed in {took:?}");
    // Queued behind the naps it waited about as long as they last (5.6 s
    // here); now it waits for none (0.1 s), half a nap is the bound.
    assert!(
        took < std::time::Duration::from_secs(3),
        "the victim took {took:?}"
    );
    tenant::measure(&host, "66 instances of naps holding their share").await;
    let (_, napping) = status_of(&host, &floods[65]).await;
    assert!(
        ["Pending", "Running"].contains(&napping["runtimeStatus"].as_str().unwrap_or_default()),
        "measured after the attack: {napping}"
    );
    for id in &floods {
        let done = wait_for(&host, id, &["Completed", "Failed"]).await;
        assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    }
}

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

/// Measures the tenant while the hostile component's `attacks` are started
/// again and again, until the measurement ends: an attack that fails in a
/// millisecond is still under way for the whole measurement.
async fn measure_while_attacking(
    host: &Host,
    what: &str,
    attacks: &[(&str, Value)],
) -> tenant::Measured {
    let measuring = tenant::measure(host, what);
    tokio::pin!(measuring);
    let mut rounds = 0;
    loop {
        let round = async {
            for (name, input) in attacks {
                start(host, name, input).await;
            }
        };
        tokio::select! {
            measured = &mut measuring => {
                eprintln!("{what}: {rounds} more rounds of the attack started whole while measuring, one in part");
                return measured;
            }
            () = round => rounds += 1,
        }
    }
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
}
