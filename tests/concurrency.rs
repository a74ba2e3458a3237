//! One session runs one request at a time: 50 concurrent requests on one
//! thread all succeed and the history holds every exchange, none interleaved.

use std::time::Duration;

use serde_json::json;

use crate::support::{client, fake_model::echo_of, FakeModel, HostBuilder};

#[tokio::test(flavor = "multi_thread")]
async fn fifty_concurrent_requests_on_one_thread_are_serialized() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk-test")
        .start();
    let http = client();
    let calls = (0..50).map(|i| {
        let http = http.clone();
        let url = host.url("/api/agents/writer/run");
        async move {
            let response = http
                .post(url)
                .json(&json!({"message": format!("message {i}"), "thread_id": "busy"}))
                .send()
                .await
                .unwrap();
            (i, response.status(), response.text().await.unwrap())
        }
    });
    for (i, status, text) in futures_join_all(calls).await {
        assert_eq!(status, 200, "request {i}: {text}");
        assert_eq!(text, echo_of(&format!("message {i}")));
    }
    let requests = model.wait_for_requests(50, Duration::from_secs(5)).await;
    // The last model call saw the whole history: 49 complete exchanges, in
    // pairs, each answer right after its question, then the 50th question.
    let last = requests.last().unwrap().transcript();
    assert_eq!(last.len(), 1 + 49 * 2 + 1, "system + history + new message");
    let mut seen = std::collections::BTreeSet::new();
    for pair in last[1..99].chunks(2) {
        let question = pair[0].strip_prefix("user: ").expect("a user message");
        assert_eq!(pair[1], format!("assistant: {}", echo_of(question)));
        seen.insert(question.to_string());
    }
    seen.insert(last[99].strip_prefix("user: ").unwrap().to_string());
    assert_eq!(
        seen.len(),
        50,
        "every request is in the history exactly once"
    );
}

/// `futures::future::join_all` without the dependency.
async fn futures_join_all<F: std::future::Future + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}
