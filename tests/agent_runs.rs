//! Synchronous runs: text and JSON answers, thread continuity, the
//! `session_id` alias, and the offline model.

use serde_json::{json, Value};

use crate::support::{client, fake_model::echo_of, FakeModel, HostBuilder};

#[tokio::test(flavor = "multi_thread")]
async fn text_run_answers_200_text_with_a_generated_thread_id() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk-test")
        .start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .body("Hello writer")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/plain; charset=utf-8"
    );
    let thread = response.headers()["x-ms-thread-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(thread.len(), 32, "thread id {thread}");
    assert!(thread.chars().all(|c| c.is_ascii_hexdigit()));
    assert_eq!(response.text().await.unwrap(), echo_of("Hello writer"));
    let request = &model.requests()[0];
    assert_eq!(request.body["model"], "gpt-test");
    let messages = request.messages();
    assert_eq!(messages[0]["role"], "system");
    assert!(messages[0]["content"]
        .as_str()
        .unwrap()
        .starts_with("You refine short pieces of text."));
    assert_eq!(
        messages[1],
        json!({"role": "user", "content": "Hello writer"})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn second_request_on_a_thread_sends_the_first_exchange_to_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk-test")
        .start();
    let http = client();
    let first = http
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "Learning is growth.", "thread_id": "t-1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["x-ms-thread-id"], "t-1");
    // `session_id` is accepted as an alias of `thread_id`.
    let second = http
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "Polish it.", "session_id": "t-1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(second.status(), 200);
    assert_eq!(second.text().await.unwrap(), echo_of("Polish it."));
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].transcript()[1..],
        [
            "user: Learning is growth.".to_string(),
            format!("assistant: {}", echo_of("Learning is growth.")),
            "user: Polish it.".to_string(),
        ]
    );
    // Another thread starts empty.
    http.post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "Fresh", "thread_id": "t-2"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        model.requests()[2].transcript()[1..],
        ["user: Fresh".to_string()]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn accept_json_returns_response_ids_status_and_usage() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk-test")
        .start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .header("accept", "application/json")
        .body("Hi")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let thread = response.headers()["x-ms-thread-id"]
        .to_str()
        .unwrap()
        .to_string();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["response"], echo_of("Hi"));
    assert_eq!(body["status"], "success");
    assert_eq!(body["thread_id"], thread);
    assert!(uuid::Uuid::parse_str(body["correlation_id"].as_str().unwrap()).is_ok());
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_model_the_offline_model_answers_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path()).start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .body("Hello")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let text = response.text().await.unwrap();
    assert!(text.starts_with("[offline model]"), "{text}");
    assert!(text.contains("\"Hello\""), "{text}");
    assert!(
        host.output().contains("built-in offline model"),
        "{}",
        host.output()
    );
}
