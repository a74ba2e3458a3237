//! What the store says of the take-over scenario: when each run's end is
//! first seen committed, and, once all is done, the runs, the instances'
//! journals and the sessions' messages as stored.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{now_ms, StoredRun, FIRST, IMPROVE};

/// Records, every 20 ms, when each run's end is first seen committed.
pub(super) async fn observe_commits(
    pool: sqlx::PgPool,
    schema: String,
    seen: Arc<Mutex<HashMap<String, i64>>>,
    observing: Arc<AtomicBool>,
) {
    let sql = format!("SELECT correlation_id FROM {schema}.runs WHERE status = 'completed'");
    while observing.load(Ordering::Relaxed) {
        // Before the first host made the hub's tables, the read fails.
        if let Ok(ids) = sqlx::query_scalar::<_, String>(&sql).fetch_all(&pool).await {
            let now = now_ms();
            let mut seen = seen.lock().unwrap();
            for id in ids {
                seen.entry(id).or_insert(now);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub(super) async fn wait_runs_ended(pool: &sqlx::PgPool, schema: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    let sql = format!("SELECT count(*) FROM {schema}.runs WHERE status IN ('pending', 'running')");
    loop {
        let left: i64 = sqlx::query_scalar(&sql).fetch_one(pool).await.unwrap();
        if left == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{left} runs never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every run of the hub, by correlation id.
pub(super) async fn read_runs(
    pool: &sqlx::PgPool,
    schema: &str,
    seen: &HashMap<String, i64>,
) -> BTreeMap<String, StoredRun> {
    type Row = (String, String, String, String, Option<String>, i64);
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT correlation_id, session_id, message, status, response, updated_at FROM {schema}.runs"
    ))
    .fetch_all(pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(
            |(correlation_id, session_id, message, status, response, updated_ms)| {
                let run = StoredRun {
                    updated_ms,
                    seen_committed_ms: seen.get(&correlation_id).copied(),
                    correlation_id: correlation_id.clone(),
                    session_id,
                    message,
                    status,
                    response,
                };
                (correlation_id, run)
            },
        )
        .collect()
}

/// The runs are exactly those asked for, each completed once: the writer
/// runs queued, and two per instance (its agent calls' first attempts),
/// whose answers the instance's journal took once each, in order, the
/// second its output.
pub(super) async fn check_journal(
    pool: &sqlx::PgPool,
    schema: &str,
    instances: &[String],
    runs: &[super::QueuedRun],
    stored: &BTreeMap<String, StoredRun>,
) {
    let mut expected: HashSet<&str> = runs.iter().map(|(id, _)| id.as_str()).collect();
    for (id, message) in runs {
        let run = &stored[id];
        assert_eq!(&run.message, message);
    }
    for id in instances {
        let rows: Vec<(String,)> = sqlx::query_as(&format!(
            "SELECT entry FROM {schema}.journal WHERE instance_id = $1 ORDER BY seq"
        ))
        .bind(id)
        .fetch_all(pool)
        .await
        .unwrap();
        let entries: Vec<Value> = rows
            .iter()
            .map(|(e,)| serde_json::from_str(e).unwrap())
            .collect();
        let calls: Vec<&Value> = entries
            .iter()
            .filter(|e| e["kind"] == "call" && e["body"]["call"] == "call_agent")
            .collect();
        let completions: Vec<&Value> = entries
            .iter()
            .filter(|e| e["kind"] == "event")
            .map(|e| &e["body"])
            .collect();
        assert_eq!(calls.len(), 2, "{id}: {entries:#?}");
        assert_eq!(completions.len(), 2, "{id}: {entries:#?}");
        // Executions are numbered across the hub: read this one's.
        let (execution, output): (i64, Option<String>) = sqlx::query_as(&format!(
            "SELECT execution, output FROM {schema}.instances WHERE id = $1"
        ))
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap();
        let mut answers: Vec<&StoredRun> = Vec::new();
        for event in completions {
            assert_eq!(event["event"], "task_completed", "{id}: {event}");
            let task = event["task"].as_u64().unwrap();
            let correlation_id = format!("{id}:{execution}:{task}:0");
            let run = stored
                .get(&correlation_id)
                .unwrap_or_else(|| panic!("{id}: no run {correlation_id}"));
            let response = run.response.clone().unwrap_or_default();
            let result = event["result"].as_str().unwrap_or_default();
            assert_eq!(result, response, "{id} took the answer of {correlation_id}");
            expected.insert(run.correlation_id.as_str());
            answers.push(run);
        }
        let first = answers[0].response.clone().unwrap_or_default();
        assert_eq!(answers[0].message, FIRST, "{id}");
        assert_eq!(answers[1].message, format!("{IMPROVE}{first}"), "{id}");
        let last = answers[1].response.clone().unwrap_or_default();
        assert_eq!(
            output.as_deref(),
            Some(json!(last).to_string().as_str()),
            "{id}"
        );
    }
    let found: HashSet<&str> = stored.keys().map(String::as_str).collect();
    assert_eq!(found, expected, "runs besides those asked for");
    for run in stored.values() {
        assert_eq!(run.status, "completed", "{run:?}");
    }
}

/// Each run's exchange is stored once: its question, then its answer.
pub(super) async fn check_messages(
    pool: &sqlx::PgPool,
    schema: &str,
    stored: &BTreeMap<String, StoredRun>,
) {
    let rows: Vec<(String, String)> = sqlx::query_as(&format!(
        "SELECT correlation_id, body FROM {schema}.messages ORDER BY agent, session_id, seq"
    ))
    .fetch_all(pool)
    .await
    .unwrap();
    let mut exchanges: HashMap<&str, Vec<(String, String)>> = HashMap::new();
    for (correlation_id, body) in &rows {
        let body: Value = serde_json::from_str(body).unwrap();
        exchanges.entry(correlation_id.as_str()).or_default().push((
            body["role"].as_str().unwrap_or_default().to_string(),
            body["content"].as_str().unwrap_or_default().to_string(),
        ));
    }
    for run in stored.values() {
        let exchange = exchanges.get(run.correlation_id.as_str());
        let want = vec![
            ("user".to_string(), run.message.clone()),
            (
                "assistant".to_string(),
                run.response.clone().unwrap_or_default(),
            ),
        ];
        assert_eq!(
            exchange,
            Some(&want),
            "{} on session {}",
            run.correlation_id,
            run.session_id
        );
    }
    assert_eq!(exchanges.len(), stored.len(), "messages of no run");
}
