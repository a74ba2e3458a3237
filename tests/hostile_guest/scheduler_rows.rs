//! Findings whose poison reached the scheduler's reads (issue 54): a retry
//! policy that is not a number, one task named many times, a task row that
//! cannot be read, and a scheduler whose reads keep failing. Each fails the
//! attacker's own instance, or is said by health, and leaves the others'.

use super::*;

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
