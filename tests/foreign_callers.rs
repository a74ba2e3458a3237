//! A host without keys answers only what is addressed to it on this
//! machine: a request whose `Host` is another name (DNS rebinding) or whose
//! `Origin` is another site (a web page the developer opened posting
//! `text/plain`, which needs no CORS preflight) is refused 403 in JSON
//! naming the setting, before any model is asked; `--allowed-hosts` and
//! `--allowed-origins` admit what is listed (the latter with CORS).

use reqwest::StatusCode;
use serde_json::Value;

use crate::support::{client, FakeModel, HostBuilder};

/// Posts a run of `writer` as a page would: a `text/plain` body, with the
/// `Host` and `Origin` given.
async fn run_as(
    host: &crate::support::host::Host,
    host_header: &str,
    origin: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = client()
        .post(host.url("/api/agents/writer/run"))
        .header("host", host_header)
        .header("content-type", "text/plain")
        .body("write a haiku");
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    let response = request.send().await.unwrap();
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_keyless_host_refuses_other_names_and_other_sites_pages_before_asking_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk")
        .start();
    let port = host
        .url("")
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .trim_end_matches('/')
        .to_string();

    // DNS rebinding: a name the page controls, pointed at 127.0.0.1.
    let (status, body) = run_as(&host, &format!("evil.example:{port}"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["errorCode"], "host_not_allowed", "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("--allowed-hosts"),
        "{body}"
    );
    // A page of another site posting to the right name.
    let (status, body) = run_as(
        &host,
        &format!("127.0.0.1:{port}"),
        Some("https://evil.example"),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    assert_eq!(body["errorCode"], "origin_not_allowed", "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap_or_default()
            .contains("--allowed-origins"),
        "{body}"
    );
    // Not even the management API reads for it.
    let listed = client()
        .get(host.url("/runtime/webhooks/durabletask/instances"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(listed.status(), StatusCode::FORBIDDEN);
    assert!(
        model.requests().is_empty(),
        "the model was asked for a refused caller"
    );

    // The machine's own names, with no Origin or a local page's.
    for (name, origin) in [
        (format!("localhost:{port}"), None),
        (format!("127.0.0.1:{port}"), None),
        (format!("[::1]:{port}"), None),
        (format!("localhost:{port}"), Some("http://localhost:3000")),
    ] {
        let (status, body) = run_as(&host, &name, origin).await;
        assert_eq!(status, StatusCode::OK, "{name} {origin:?}: {body}");
    }
    assert_eq!(model.requests().len(), 4);
    // A platform's probe is answered whatever name it uses.
    let live = client()
        .get(host.url("/api/health/live"))
        .header("host", "10.1.2.3:7071")
        .send()
        .await
        .unwrap();
    assert_eq!(live.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread")]
async fn listed_names_and_origins_are_answered_the_origins_with_cors() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk")
        .arg("--allowed-hosts")
        .arg("agents.internal")
        .env("AGENTHOST_ALLOWED_ORIGINS", "https://app.example.com")
        .start();
    let (status, body) = run_as(&host, "agents.internal:7071", None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, _) = run_as(&host, "evil.example", None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The listed origin's page: its preflight and its call, with CORS.
    let preflight = client()
        .request(reqwest::Method::OPTIONS, host.url("/api/agents/writer/run"))
        .header("origin", "https://app.example.com")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .send()
        .await
        .unwrap();
    assert!(preflight.status().is_success(), "{}", preflight.status());
    assert_eq!(
        preflight
            .headers()
            .get("access-control-allow-origin")
            .and_then(|v| v.to_str().ok()),
        Some("https://app.example.com")
    );
    let (status, body) = run_as(&host, "localhost", Some("https://app.example.com")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = run_as(&host, "localhost", Some("https://other.example.com")).await;
    assert_eq!(
        (status, &body["errorCode"]),
        (StatusCode::FORBIDDEN, &Value::from("origin_not_allowed"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn with_keys_any_name_is_answered_unless_a_list_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let key = "invoke:0123456789abcdef-invoke";
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk")
        .arg("--api-key")
        .arg(key)
        .start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .header("host", "agents.example.com")
        .header("origin", "https://agents.example.com")
        .header("x-api-key", "0123456789abcdef-invoke")
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}
