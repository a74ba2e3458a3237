//! Model configuration (OpenAI and Azure URL shapes and auth headers),
//! retries on 429 honouring Retry-After, and model failures answered as 502.

use std::time::Duration;

use serde_json::Value;

use crate::support::{client, fake_model::echo_of, FakeModel, HostBuilder, Reply};

#[tokio::test(flavor = "multi_thread")]
async fn openai_settings_call_chat_completions_with_a_bearer_key() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.expect_auth("authorization", "Bearer sk-right");
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk-right")
        .start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .body("hi")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let request = &model.requests()[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.body["model"], "gpt-test");
}

#[tokio::test(flavor = "multi_thread")]
async fn azure_settings_call_the_deployment_url_with_an_api_key_header() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.expect_auth("api-key", "azure-secret");
    let host = HostBuilder::new(dir.path())
        .env("AZURE_OPENAI_ENDPOINT", &model.endpoint())
        .env("AZURE_OPENAI_CHAT_DEPLOYMENT_NAME", "gpt-deploy")
        .env("AZURE_OPENAI_API_KEY", "azure-secret")
        .start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .body("hi azure")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), echo_of("hi azure"));
    let request = &model.requests()[0];
    assert_eq!(
        request.path,
        "/openai/deployments/gpt-deploy/chat/completions"
    );
    assert!(
        request
            .query
            .as_deref()
            .unwrap_or("")
            .starts_with("api-version="),
        "{:?}",
        request.query
    );
    assert!(
        request.headers.get("authorization").is_none(),
        "Azure keys go in api-key, not Authorization"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_429_with_retry_after_is_retried_after_the_pause() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::Status(429, Some(1)));
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .body("patience")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), echo_of("patience"));
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let pause = requests[1].at - requests[0].at;
    assert!(
        pause >= Duration::from_millis(950),
        "retried after {pause:?}, before Retry-After's 1 s"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_key_answers_502_naming_the_model_refusal() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.expect_auth("authorization", "Bearer sk-right");
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk-wrong")
        .start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .body("hi")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "model_unauthorized");
    assert!(body["error"].as_str().unwrap().contains("401"), "{body}");
    assert_eq!(model.requests().len(), 1, "a 401 is not retried");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_403_answers_502_too() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::Status(403, None));
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .body("hi")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    assert_eq!(
        response.json::<Value>().await.unwrap()["code"],
        "model_unauthorized"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_model_answers_502_with_the_address() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bind one, then free it.
    let port = crate::support::free_port();
    let host = HostBuilder::new(dir.path())
        .env("OPENAI_BASE_URL", &format!("http://127.0.0.1:{port}/v1"))
        .env("OPENAI_API_KEY", "sk-never-shown")
        .env("OPENAI_MODEL", "gpt-test")
        .start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .body("anyone?")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "model_unreachable");
    let error = body["error"].as_str().unwrap();
    assert!(error.contains(&format!("127.0.0.1:{port}")), "{error}");
    assert!(
        !error.contains("sk-never-shown"),
        "the key must never appear in errors: {error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_model_that_keeps_failing_answers_502_after_bounded_retries() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    for _ in 0..5 {
        model.push(Reply::Status(500, Some(0)));
    }
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .body("hi")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "model_error");
    assert!(
        body["error"].as_str().unwrap().contains("HTTP 500"),
        "{body}"
    );
    assert_eq!(model.requests().len(), 5, "one attempt and four retries");
}
