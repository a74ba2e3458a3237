//! Orchestrations survive kill -9: an instance awaiting an agent call and one
//! awaiting a timer both complete after a restart on the same store, and no
//! agent call that had completed is made again.

use std::time::Duration;

use serde_json::json;

use crate::support::durable::{start, wait_for, wait_for_custom_status};
use crate::support::fake_model::echo_of;
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
