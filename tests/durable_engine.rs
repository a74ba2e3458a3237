//! Engine v2 from outside: executions never mix (a reused id, continue-as-new
//! loops, terminate then re-create), huge fan-outs, and every limit that keeps
//! one instance from hurting the host (history, inbox, blocking code, retry
//! policies), each answered with a clear reason while the host stays healthy.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::durable::{
    instance_url, raise, start, start_with_id, status, wait_for, wait_for_custom_status,
    wait_for_within,
};
use crate::support::fake_model::echo_of;
use crate::support::{client, FakeModel, HostBuilder};

/// A host serving the writer agent and the engine's test orchestrations,
/// with `flags` (name, value) on its command line.
fn engine(dir: &Path, flags: &[(&str, &str)]) -> HostBuilder {
    flags.iter().fold(
        HostBuilder::new(dir).components(&["writer", "orchestration-tests"]),
        |builder, (name, value)| builder.arg(name).arg(value),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reused_finished_id_runs_a_new_execution_with_its_own_agent_call() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = engine(dir.path(), &[]).openai(&model, "sk").start();
    start_with_id(&host, "ask_writer", "reused", &json!("first question")).await;
    let first = wait_for(&host, "reused", &["Completed", "Failed"]).await;
    assert_eq!(first["output"], echo_of("first question"), "{first}");

    start_with_id(&host, "ask_writer", "reused", &json!("second question")).await;
    let second = wait_for(&host, "reused", &["Completed", "Failed"]).await;
    assert_eq!(
        second["output"],
        echo_of("second question"),
        "the new execution asked the model itself: {second}"
    );
    assert_eq!(model.requests().len(), 2, "one model call per execution");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_continue_as_new_loop_that_calls_an_agent_gets_a_fresh_answer_each_generation() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = engine(dir.path(), &[]).openai(&model, "sk").start();
    let input = json!({"generation": 1, "until": 3, "answers": []});
    let id = start(&host, "agent_loop", &input).await;
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(
        done["output"],
        json!([
            echo_of("generation 1"),
            echo_of("generation 2"),
            echo_of("generation 3")
        ]),
        "{done}"
    );
    assert_eq!(model.requests().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn terminate_then_recreate_runs_only_the_new_incarnation() {
    let dir = tempfile::tempdir().unwrap();
    let host = engine(dir.path(), &[]).start();
    start_with_id(&host, "wait_event", "again", &json!(null)).await;
    wait_for_custom_status(&host, "again", "", &json!("waiting")).await;
    let terminated = client()
        .post(format!(
            "{}/terminate?reason=stop",
            instance_url(&host, "again")
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(terminated.status(), 202);
    wait_for(&host, "again", &["Terminated"]).await;

    start_with_id(&host, "wait_event", "again", &json!(null)).await;
    wait_for_custom_status(&host, "again", "", &json!("waiting")).await;
    assert_eq!(raise(&host, "again", "go", &json!("new")).await, 202);
    let done = wait_for(&host, "again", &["Completed", "Failed"]).await;
    assert_eq!(done["output"], "new", "{done}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_7000_way_fan_out_completes_with_the_right_sum() {
    let dir = tempfile::tempdir().unwrap();
    // One episode schedules all 7,000: past the default
    // `--max-episode-calls` (5,000), which an operator raises for this.
    let host = engine(dir.path(), &[("--max-episode-calls", "8000")]).start();
    let id = start(&host, "fanout", &json!({"n": 7000})).await;
    let done = wait_for_within(
        &host,
        &id,
        &["Completed", "Failed"],
        Duration::from_secs(240),
    )
    .await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(done["output"], json!((0..7000u64).sum::<u64>()));
}

#[tokio::test(flavor = "multi_thread")]
async fn two_waits_for_one_event_name_take_two_events() {
    let dir = tempfile::tempdir().unwrap();
    let host = engine(dir.path(), &[]).start();
    let id = start(&host, "both_waits", &json!(null)).await;
    wait_for_custom_status(&host, &id, "", &json!("waiting")).await;
    assert_eq!(raise(&host, &id, "step", &json!(1)).await, 202);
    // The instance consumes the first event and must keep waiting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (code, body) = status(&host, &id).await;
    assert_eq!(
        (code, body["runtimeStatus"].clone()),
        (202, json!("Running")),
        "{body}"
    );
    assert_eq!(raise(&host, &id, "step", &json!(2)).await, 202);
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], json!([1, 2]), "{done}");
}

/// Events reach a hot instance in memory, also while its episode runs: none
/// may be lost or taken twice, and each raiser's events keep their order.
#[tokio::test(flavor = "multi_thread")]
async fn events_raised_at_a_busy_hot_instance_are_each_taken_once_in_order() {
    const RAISERS: u32 = 8;
    const EACH: u32 = 40;
    let dir = tempfile::tempdir().unwrap();
    let host = std::sync::Arc::new(engine(dir.path(), &[]).start());
    let id = start(&host, "collect", &json!({"n": RAISERS * EACH})).await;
    let raisers: Vec<_> = (0..RAISERS)
        .map(|r| {
            let (host, id) = (host.clone(), id.clone());
            tokio::spawn(async move {
                for i in 0..EACH {
                    assert_eq!(raise(&host, &id, "item", &json!(r * EACH + i)).await, 202);
                }
            })
        })
        .collect();
    for raiser in raisers {
        raiser.await.unwrap();
    }
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    let items: Vec<u32> = serde_json::from_value(done["output"].clone()).expect("a list");
    let mut sorted = items.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..RAISERS * EACH).collect::<Vec<_>>(),
        "each event once"
    );
    for r in 0..RAISERS {
        let mine: Vec<u32> = items.iter().copied().filter(|i| i / EACH == r).collect();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "raiser {r} out of order: {mine:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_instance_over_its_history_limit_fails_with_a_clear_reason_and_the_host_stays_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let host = engine(dir.path(), &[("--max-history-events", "40")]).start();
    let id = start(&host, "sequence", &json!({"n": 50})).await;
    let failed = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(failed["runtimeStatus"], "Failed", "{failed}");
    let reason = failed["output"].as_str().unwrap_or_default();
    assert!(
        reason.contains("history would hold") && reason.contains("continue-as-new"),
        "{reason}"
    );
    let health = client().get(host.url("/api/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let small = start(&host, "sequence", &json!({"n": 3})).await;
    let done = wait_for(&host, &small, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], json!(3), "{done}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_1_mib_raises_gets_429_before_memory_grows_past_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let host = engine(
        dir.path(),
        &[
            ("--max-body-bytes", "2097152"),
            ("--max-inbox-bytes", "8388608"),
        ],
    )
    .start();
    let id = start(&host, "wait_event", &json!(null)).await;
    wait_for_custom_status(&host, &id, "", &json!("waiting")).await;
    // Suspended, it consumes nothing: every raise stays in its inbox.
    let suspended = client()
        .post(format!("{}/suspend", instance_url(&host, &id)))
        .send()
        .await
        .unwrap();
    assert_eq!(suspended.status(), 202);
    let payload = Value::String("x".repeat(1_000_000));
    let mut accepted = 0;
    let mut refusal = None;
    for _ in 0..40 {
        let response = client()
            .post(format!("{}/raiseEvent/go", instance_url(&host, &id)))
            .json(&payload)
            .send()
            .await
            .unwrap();
        match response.status().as_u16() {
            202 => accepted += 1,
            429 => {
                refusal = Some(response.json::<Value>().await.unwrap());
                break;
            }
            other => panic!("raise answered {other}"),
        }
    }
    let refusal = refusal.expect("no raise was refused");
    assert_eq!(refusal["code"], "inbox_full", "{refusal}");
    assert!(
        refusal["error"]
            .as_str()
            .unwrap_or_default()
            .contains("waiting in its inbox"),
        "{refusal}"
    );
    assert!(
        (6..=8).contains(&accepted),
        "{accepted} raises of 1 MB fit in 8 MiB"
    );
    let rss = host.rss_kib().unwrap_or(0);
    assert!(rss < 400 * 1024, "the host grew to {rss} KiB");

    let resumed = client()
        .post(format!("{}/resume", instance_url(&host, &id)))
        .send()
        .await
        .unwrap();
    assert_eq!(resumed.status(), 202);
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(
        done["runtimeStatus"], "Completed",
        "nothing accepted was lost"
    );
    assert_eq!(done["output"], payload);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_orchestration_that_sleeps_in_its_code_traps_at_once_naming_the_durable_timer_and_the_others_keep_running(
) {
    let dir = tempfile::tempdir().unwrap();
    // A wall-clock limit far past the test's wait: only a sleep that traps
    // at once lets the others through.
    let host = engine(dir.path(), &[("--episode-timeout", "120s")]).start();
    // More sleepers than there are episode permits (32).
    let mut sleepers = Vec::new();
    for _ in 0..40 {
        sleepers.push(start(&host, "sleeper", &json!(null)).await);
    }
    let other = start(&host, "sequence", &json!({"n": 3})).await;
    let done = wait_for(&host, &other, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], json!(3), "{done}");
    for id in &sleepers {
        let failed = wait_for(&host, id, &["Completed", "Failed"]).await;
        assert_eq!(failed["runtimeStatus"], "Failed", "{failed}");
        let reason = failed["output"].as_str().unwrap_or_default();
        assert!(reason.contains("waited on the clock"), "{reason}");
        assert!(reason.contains("durable timer"), "{reason}");
    }
}

/// Orchestration code that spins is stopped by the episode's CPU budget
/// (1 s by default), long before the component's own CPU limit (10 s) or
/// the wall-clock limit: its instance fails naming the budget, and the
/// slots it held serve the others.
#[tokio::test(flavor = "multi_thread")]
async fn an_orchestration_that_spins_is_stopped_by_the_episode_cpu_budget_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let host = engine(dir.path(), &[("--episode-timeout", "120s")]).start();
    let started = std::time::Instant::now();
    let spinners: Vec<String> =
        futures::future::join_all((0..2).map(|_| start(&host, "spinner", &json!(null)))).await;
    let other = start(&host, "sequence", &json!({"n": 3})).await;
    let done = wait_for(&host, &other, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], json!(3), "{done}");
    for id in &spinners {
        let failed = wait_for(&host, id, &["Completed", "Failed"]).await;
        assert_eq!(failed["runtimeStatus"], "Failed", "{failed}");
        let reason = failed["output"].as_str().unwrap_or_default();
        assert!(reason.contains("--episode-cpu-time"), "{reason}");
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(8),
        "stopped only after {:?}: not by a 1 s budget",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_retry_policy_of_endless_instant_retries_is_capped() {
    let dir = tempfile::tempdir().unwrap();
    let host = engine(
        dir.path(),
        &[("--max-task-attempts", "4"), ("--min-retry-delay", "20ms")],
    )
    .start();
    let id = start(&host, "greedy_retry", &json!(null)).await;
    let failed = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(failed["runtimeStatus"], "Failed", "{failed}");
    let reason = failed["output"].as_str().unwrap_or_default();
    assert!(reason.contains("gave up after 4 attempts"), "{reason}");
}
