//! Orchestrations survive kill -9: an instance awaiting an agent call and one
//! awaiting a timer both complete after a restart on the same store, and no
//! agent call that had completed is made again. Under kill -9 at random
//! moments over a mixed load, every instance completes, and neither a
//! completed agent call nor a completed activity runs again.

use std::time::Duration;

use serde_json::json;

use crate::support::durable::{start, wait_for, wait_for_custom_status};
use crate::support::fake_model::echo_of;
use crate::support::run_log::RunLog;
use crate::support::{FakeModel, HostBuilder, Reply};

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_while_awaiting_an_agent_call_then_restart_completes_without_repeating_calls() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::Text("First draft.".into()));
    // The second call hangs: the host is killed while the instance awaits it.
    model.push(Reply::Delay(Duration::from_secs(60), Box::new(Reply::Echo)));
    let builder = HostBuilder::new(dir.path())
        .components(&["writer", "chaining"])
        .openai(&model, "sk");
    let mut host = builder.start();
    let id = start(&host, "chaining", &json!(null)).await;
    model.wait_for_requests(2, Duration::from_secs(20)).await;
    host.kill();

    let host = builder.start();
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    let improve = "Improve this further while keeping it under 25 words: First draft.";
    assert_eq!(done["output"], echo_of(improve), "{done}");
    let requests = model.requests();
    let firsts = requests
        .iter()
        .filter(|r| r.last_user_message().starts_with("Write a concise"))
        .count();
    assert_eq!(firsts, 1, "the completed first call was not made again");
    assert_eq!(requests.len(), 3, "only the interrupted call was repeated");
    assert_eq!(
        requests[2].transcript(),
        requests[1].transcript(),
        "the resumed call sends the same conversation"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_while_awaiting_a_timer_then_restart_fires_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let builder = HostBuilder::new(dir.path())
        .components(&["writer", "approval"])
        .openai(&model, "sk");
    let mut host = builder.start();
    let id = start(
        &host,
        "approval",
        &json!({"topic": "rain", "timeout_seconds": 2}),
    )
    .await;
    wait_for_custom_status(&host, &id, "/state", &json!("awaiting_approval")).await;
    host.kill();
    // Stay down past the timer's firing time: it fires at the next start.
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let host = builder.start();
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["output"]["status"], "escalated", "{done}");
    assert_eq!(model.requests().len(), 1, "the draft was written once");
}

/// Checks the activity runs of `counted` sequences across process lives
/// (`ends[i]` is how many runs the log held when life `i` was killed).
/// Step `k + 1` is scheduled only after step `k`'s result is committed, so a
/// run of step `k` after any run of step `k + 1` would be a completed
/// activity run again. Within one life nothing runs twice; across a kill
/// only the step in flight may.
fn assert_no_completed_activity_ran_again(runs: &[(String, u32)], ends: &[usize], steps: u32) {
    use std::collections::{HashMap, HashSet};
    let mut life_start = 0;
    for end in ends.iter().copied().chain([runs.len()]) {
        let mut seen = HashSet::new();
        for run in &runs[life_start..end] {
            assert!(seen.insert(run), "{run:?} ran twice in one process life");
        }
        life_start = end;
    }
    let mut highest: HashMap<&str, u32> = HashMap::new();
    for (tag, step) in runs {
        let top = highest.entry(tag).or_insert(*step);
        assert!(
            *step >= *top,
            "{tag} step {step} ran again after step {top} had started: its result was committed"
        );
        *top = (*top).max(*step);
    }
    let tags: HashSet<&str> = runs.iter().map(|(t, _)| t.as_str()).collect();
    for tag in tags {
        let ran: HashSet<u32> = runs.iter().filter(|(t, _)| t == tag).map(|r| r.1).collect();
        assert_eq!(ran.len() as u32, steps, "every step of {tag} ran");
        let repeats = runs.iter().filter(|(t, _)| t == tag).count() - ran.len();
        assert!(
            repeats <= ends.len(),
            "{tag}: {repeats} repeats over {} kills",
            ends.len()
        );
    }
}

/// A varying delay (30–200 ms) from the clock: each run of the test kills at
/// other moments of the load.
fn some_moment() -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    Duration::from_millis(30 + u64::from(nanos % 170))
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_at_random_moments_over_a_mixed_load_loses_nothing_and_repeats_no_completed_call() {
    use crate::support::durable::{raise, wait_for_within};
    use std::collections::HashMap;

    const KILLS: usize = 3;
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let builder = HostBuilder::new(dir.path())
        .components(&["writer", "orchestration-tests"])
        .openai(&model, "sk");
    // Slow answers keep agent calls in flight when the kills come (longer
    // than it takes to start everything, however fast the steps run).
    for _ in 0..10 + KILLS * 10 {
        model.push(Reply::Delay(
            Duration::from_millis(2_000),
            Box::new(Reply::Echo),
        ));
    }
    // The `counted` sequences report each activity run to a local server.
    let run_log = RunLog::serve().await;
    run_log.grant(dir.path());
    const STEPS: u32 = 60;
    let mut host = builder.start();
    let mut expected: Vec<(String, serde_json::Value)> = Vec::new();
    let mut waiters = Vec::new();
    let mut asker: HashMap<String, String> = HashMap::new();
    for i in 0..4 {
        let url = format!("http://127.0.0.1:{}/c{i}", run_log.port);
        let input = json!({"n": STEPS, "url": url});
        expected.push((start(&host, "counted", &input).await, json!(STEPS)));
    }
    for i in 0..10 {
        // Long enough to be under way at the first kill: a step is one
        // commit, well under a millisecond.
        expected.push((
            start(&host, "sequence", &json!({"n": 400})).await,
            json!(79_800),
        ));
        let question = format!("question {i}");
        let id = start(&host, "ask_writer", &json!(question)).await;
        expected.push((id.clone(), json!(echo_of(&question))));
        asker.insert(question, id);
        let id = start(&host, "wait_event", &json!(null)).await;
        expected.push((id.clone(), json!(i)));
        waiters.push((id, i));
        if i % 2 == 0 {
            expected.push((
                start(&host, "fanout", &json!({"n": 200})).await,
                json!(19900),
            ));
        }
    }
    // Model requests made by each process life, between kills.
    let mut lives = Vec::new();
    let mut seen = 0;
    let mut unfinished_at_kills = Vec::new();
    let mut completed_at_kills = Vec::new();
    let mut runs_at_kills = Vec::new();
    for _ in 0..KILLS {
        tokio::time::sleep(some_moment()).await;
        let mut completed = std::collections::HashSet::new();
        for (id, _) in &expected {
            let (_, body) = crate::support::durable::status(&host, id).await;
            if body["runtimeStatus"] == "Completed" {
                completed.insert(id.clone());
            }
        }
        unfinished_at_kills.push(expected.len() - completed.len());
        completed_at_kills.push(completed);
        host.kill();
        // A request the dead process sent may still be in the server's queue.
        tokio::time::sleep(Duration::from_millis(100)).await;
        runs_at_kills.push(run_log.runs().len());
        let requests = model.requests();
        lives.push(requests[seen..].to_vec());
        seen = requests.len();
        host = builder.start();
    }
    // The ten waiters are always unfinished; the first kill must also land
    // in the middle of steps, agent calls and fan-outs.
    assert!(
        unfinished_at_kills[0] > 14 && unfinished_at_kills.iter().all(|n| *n >= 10),
        "the kills must land in the middle of work: {unfinished_at_kills:?}"
    );
    for (id, i) in &waiters {
        // An instance may still be Pending after a kill: the raise is queued.
        assert_eq!(raise(&host, id, "go", &json!(i)).await, 202);
    }
    for (id, output) in &expected {
        let done = wait_for_within(
            &host,
            id,
            &["Completed", "Failed", "Terminated"],
            Duration::from_secs(120),
        )
        .await;
        assert_eq!(done["runtimeStatus"], "Completed", "{done}");
        assert_eq!(&done["output"], output, "{done}");
    }
    lives.push(model.requests()[seen..].to_vec());
    assert_no_completed_activity_ran_again(&run_log.runs(), &runs_at_kills, STEPS);
    let mut asked: HashMap<String, usize> = HashMap::new();
    for (life_index, life) in lives.iter().enumerate() {
        let mut in_this_life: HashMap<String, usize> = HashMap::new();
        for request in life {
            // An instance seen Completed before a kill had its answer committed.
            if let Some(before) = life_index.checked_sub(1).map(|k| &completed_at_kills[k]) {
                let id = &asker[&request.last_user_message()];
                assert!(
                    !before.contains(id),
                    "'{}' was asked again after its instance {id} had completed",
                    request.last_user_message()
                );
            }
            *in_this_life.entry(request.last_user_message()).or_default() += 1;
        }
        for (message, n) in in_this_life {
            assert_eq!(n, 1, "'{message}' was asked {n} times by one process");
            *asked.entry(message).or_default() += 1;
        }
    }
    assert_eq!(asked.len(), 10, "every question was asked: {asked:?}");
    for (message, n) in &asked {
        assert!(
            *n <= 1 + KILLS,
            "'{message}' asked {n} times over {KILLS} kills"
        );
    }
}
