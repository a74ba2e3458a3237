//! `--session-ttl` forgets idle conversations.

use std::time::Duration;

use serde_json::json;

use crate::support::{client, FakeModel, HostBuilder};

#[tokio::test(flavor = "multi_thread")]
async fn an_idle_session_past_its_ttl_starts_over() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk")
        .arg("--session-ttl")
        .arg("1s")
        .start();
    let send = |message: &str| {
        client()
            .post(host.url("/api/agents/writer/run"))
            .json(&json!({"message": message, "thread_id": "short-lived"}))
            .send()
    };
    assert_eq!(send("one").await.unwrap().status(), 200);
    assert_eq!(send("two").await.unwrap().status(), 200);
    assert_eq!(
        model.requests()[1].transcript().len(),
        4,
        "within the TTL the thread continues"
    );
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(send("three").await.unwrap().status(), 200);
    assert_eq!(
        model.requests()[2].transcript()[1..],
        ["user: three".to_string()]
    );
}
