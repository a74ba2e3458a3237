//! Bad requests get a 4xx JSON `{error, code}` and change nothing.

use serde_json::Value;

use crate::support::get_json;
use crate::support::{client, FakeModel, HostBuilder};

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_json_errors_and_never_reach_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk")
        .arg("--max-body-bytes")
        .arg("1024")
        .start();
    let http = client();
    let run = host.url("/api/agents/writer/run");

    let unknown = http
        .post(host.url("/api/agents/poet/run"))
        .body("hi")
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(body["code"], "agent_not_found");
    assert!(
        body["error"].as_str().unwrap().contains("weather, writer"),
        "{body}"
    );
    assert_eq!(body["agents"], serde_json::json!(["weather", "writer"]));

    for empty in ["", "   \n"] {
        let response = http.post(&run).body(empty).send().await.unwrap();
        assert_eq!(response.status(), 400);
        assert_eq!(
            response.json::<Value>().await.unwrap()["code"],
            "empty_message"
        );
    }
    let empty_json = http
        .post(&run)
        .header("content-type", "application/json")
        .body(r#"{"message": ""}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(empty_json.status(), 400);

    let malformed = http
        .post(&run)
        .header("content-type", "application/json")
        .body("{\"message\": ")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 400);
    let body: Value = malformed.json().await.unwrap();
    assert_eq!(body["code"], "invalid_json");
    assert!(body["error"].as_str().unwrap().contains("EOF"), "{body}");

    let wrong_type = http
        .post(&run)
        .header("content-type", "application/json")
        .body(r#"{"message": 5}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_type.status(), 400);

    let huge = http.post(&run).body("x".repeat(4096)).send().await.unwrap();
    assert_eq!(huge.status(), 413);
    assert_eq!(
        huge.json::<Value>().await.unwrap()["code"],
        "body_too_large"
    );

    let bad_format = http
        .post(&run)
        .json(&serde_json::json!({"message": "hi", "response_format": "json please"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad_format.status(), 400);
    assert_eq!(
        bad_format.json::<Value>().await.unwrap()["code"],
        "invalid_response_format"
    );

    let no_route = http.get(host.url("/api/nothing")).send().await.unwrap();
    assert_eq!(no_route.status(), 404);
    assert_eq!(no_route.json::<Value>().await.unwrap()["code"], "not_found");

    assert!(
        model.requests().is_empty(),
        "no bad request reached the model"
    );
    // And the host still serves.
    assert_eq!(
        http.post(&run).body("fine").send().await.unwrap().status(),
        200
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn health_lists_every_served_agent_and_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "weather", "scientists"])
        .start();
    let health: Value = get_json(host.url("/api/health")).await;
    assert_eq!(
        health,
        serde_json::json!({"status": "healthy", "agents": [
            {"name": "chemist", "status": "ready"},
            {"name": "physicist", "status": "ready"},
            {"name": "weather", "status": "ready"},
            {"name": "writer", "status": "ready"},
        ]})
    );
    drop(host);
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .arg("--enable-health-check=false")
        .start();
    assert_eq!(
        client()
            .get(host.url("/api/health"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
}
