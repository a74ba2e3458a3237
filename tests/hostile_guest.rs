//! A component built to attack the host from inside (issue 54): each attack
//! ends in a clear error for the attacker's own instance or run, and another
//! component's work goes on meanwhile.

use serde_json::json;

use crate::support::durable::{start, wait_for};
use crate::support::{FakeModel, HostBuilder};

/// A retry policy whose backoff coefficient is NaN or ±infinity cannot be
/// stored (JSON has no such numbers: it would be written as `null`, and the
/// scheduler's read of due tasks, every instance's, failed on it from then
/// on, across restarts). It is refused where it enters the host: the
/// attacker's instance fails naming it, and another component's retried
/// activity fails on time, as its own code says.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_policy_that_is_not_a_number_fails_its_own_instance_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["hostile", "orchestration-tests"])
        .openai(&model, "sk-test")
        .start();
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
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["hostile", "orchestration-tests"])
        .openai(&model, "sk-test")
        .start();
    let attack = start(
        &host,
        "await_repeated",
        &json!({ "times": 300, "bytes": 900_000 }),
    )
    .await;
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
