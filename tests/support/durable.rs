//! Helpers for the durable HTTP API.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::{client, host::Host};

pub fn instance_url(host: &Host, id: &str) -> String {
    host.url(&format!("/runtime/webhooks/durabletask/instances/{id}"))
}

/// Starts orchestration `name` with `input`; returns the instance id.
pub async fn start(host: &Host, name: &str, input: &Value) -> String {
    start_at(host, &format!("/api/orchestrators/{name}"), input).await
}

/// Starts orchestration `name` as instance `id` (a finished id starts anew).
pub async fn start_with_id(host: &Host, name: &str, id: &str, input: &Value) -> String {
    start_at(host, &format!("/api/orchestrators/{name}/{id}"), input).await
}

async fn start_at(host: &Host, path: &str, input: &Value) -> String {
    let response = client()
        .post(host.url(path))
        .json(input)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202, "POST {path}");
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().to_string()
}

/// The status code and body of `GET instances/{id}`.
pub async fn status(host: &Host, id: &str) -> (u16, Value) {
    let response = client().get(instance_url(host, id)).send().await.unwrap();
    let code = response.status().as_u16();
    (code, response.json().await.unwrap_or(Value::Null))
}

/// Polls until the instance's runtimeStatus is one of `statuses`.
pub async fn wait_for(host: &Host, id: &str, statuses: &[&str]) -> Value {
    wait_for_within(host, id, statuses, Duration::from_secs(30)).await
}

/// [`wait_for`] with a bound of its own, for long workloads.
pub async fn wait_for_within(host: &Host, id: &str, statuses: &[&str], limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let (_, body) = status(host, id).await;
        if statuses.iter().any(|s| body["runtimeStatus"] == *s) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "instance {id} never reached {statuses:?}; last status: {body}\n{}",
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls until the instance's custom status equals `expected` at `pointer`.
pub async fn wait_for_custom_status(
    host: &Host,
    id: &str,
    pointer: &str,
    expected: &Value,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, body) = status(host, id).await;
        if body["customStatus"].pointer(pointer) == Some(expected) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "instance {id} never showed {expected} at {pointer}; last: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn raise(host: &Host, id: &str, event: &str, payload: &Value) -> u16 {
    client()
        .post(format!("{}/raiseEvent/{event}", instance_url(host, id)))
        .json(payload)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}
