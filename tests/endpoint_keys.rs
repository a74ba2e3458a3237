//! Endpoint keys (issue 19): with keys configured, every route answers 401
//! without a key or with an unknown one, 403 with an invoke key on an admin
//! route, and its normal answer with a key of its scope, whichever way the
//! key is presented; health stays open; the stream URL handed out in a 202
//! opens that run's stream without a key, and no other.

use std::process::Command;

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::{client, FakeModel, HostBuilder};

const ADMIN: &str = "admin-key-0123456789abcdef";
const INVOKE: &str = "invoke-key-0123456789abcdef";

/// Every route the host serves, with the scope it needs (`None`: open).
fn routes(run: &str) -> Vec<(Method, String, Option<&'static str>)> {
    let instance = "/runtime/webhooks/durabletask/instances";
    vec![
        (Method::GET, "/api/health".into(), None),
        (Method::GET, "/api/health/live".into(), None),
        (Method::GET, "/api/health/ready".into(), None),
        (Method::GET, "/api/openapi.json".into(), None),
        (
            Method::POST,
            "/api/agents/writer/run".into(),
            Some("invoke"),
        ),
        (
            Method::GET,
            format!("/api/agents/writer/runs/{run}"),
            Some("invoke"),
        ),
        (
            Method::GET,
            format!("/api/agents/writer/runs/{run}/stream"),
            Some("invoke"),
        ),
        (
            Method::POST,
            format!("/api/agents/writer/runs/{run}/approvals"),
            Some("invoke"),
        ),
        (
            Method::POST,
            "/api/orchestrators/sequence".into(),
            Some("invoke"),
        ),
        (
            Method::POST,
            "/api/orchestrators/sequence/keyed-1".into(),
            Some("invoke"),
        ),
        (
            Method::POST,
            "/api/declared/by/a/component".into(),
            Some("invoke"),
        ),
        (
            Method::GET,
            "/api/agents/writer/sessions/s-1".into(),
            Some("admin"),
        ),
        (
            Method::DELETE,
            "/api/agents/writer/sessions/s-1".into(),
            Some("admin"),
        ),
        (Method::GET, "/api/agents/writer/s-1".into(), Some("admin")),
        (Method::GET, "/api/components".into(), Some("admin")),
        (Method::GET, "/metrics".into(), Some("admin")),
        (Method::GET, instance.into(), Some("admin")),
        (Method::DELETE, instance.into(), Some("admin")),
        (Method::GET, format!("{instance}/keyed-1"), Some("admin")),
        (Method::DELETE, format!("{instance}/keyed-1"), Some("admin")),
        (
            Method::POST,
            format!("{instance}/keyed-1/raiseEvent/go"),
            Some("admin"),
        ),
        (
            Method::POST,
            format!("{instance}/keyed-1/terminate"),
            Some("admin"),
        ),
        (
            Method::POST,
            format!("{instance}/keyed-1/suspend"),
            Some("admin"),
        ),
        (
            Method::POST,
            format!("{instance}/keyed-1/resume"),
            Some("admin"),
        ),
    ]
}

/// How a key is presented: the four ways the function host accepts.
#[derive(Clone, Copy, Debug)]
enum Presented {
    Bearer,
    ApiKey,
    FunctionsKey,
    Code,
}

async fn call(
    base: &str,
    method: &Method,
    path: &str,
    key: Option<(&str, Presented)>,
) -> (u16, Value) {
    let mut url = format!("{base}{path}");
    let mut request = client().request(method.clone(), &url);
    if let Some((key, how)) = key {
        request = match how {
            Presented::Bearer => request.bearer_auth(key),
            Presented::ApiKey => request.header("x-api-key", key),
            Presented::FunctionsKey => request.header("x-functions-key", key),
            Presented::Code => {
                url.push_str(if url.contains('?') { "&" } else { "?" });
                url.push_str(&format!("code={key}"));
                client().request(method.clone(), &url)
            }
        };
    }
    if method == Method::POST {
        request = request.json(&json!({"message": "hi", "waitForResponse": false}));
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn with_keys_every_route_wants_a_key_of_its_scope_and_health_stays_open() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "orchestration-tests"])
        .openai(&model, "sk")
        .arg("--api-key")
        .arg(&format!("admin:{ADMIN}"))
        .arg("--api-key")
        .arg(&format!("invoke:{INVOKE},invoke:rotated-{INVOKE}"))
        .start();
    // A run to address the run routes to.
    let (status, accepted) = call(
        &host.base,
        &Method::POST,
        "/api/agents/writer/run",
        Some((INVOKE, Presented::Bearer)),
    )
    .await;
    assert_eq!(status, 202, "{accepted}");
    let run = accepted["correlationId"].as_str().unwrap().to_string();

    // The table above is every operation of the OpenAPI document, with the
    // scope the document declares for it, and nothing else.
    let document: Value = client()
        .get(host.url("/api/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let table = routes(&run);
    let mut documented = 0;
    for (template, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            documented += 1;
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let matching: Vec<_> = table
                .iter()
                .filter(|(m, path, _)| *m == method && matches_template(template, path))
                .collect();
            assert_eq!(matching.len(), 1, "{method} {template} is tested once");
            let declared = operation["description"]
                .as_str()
                .and_then(|d| d.split("Scope: `").nth(1))
                .and_then(|rest| rest.split('`').next());
            assert_eq!(declared, matching[0].2, "{method} {template}: {operation}");
        }
    }
    assert_eq!(documented, table.len(), "every tested route is documented");

    for (method, path, scope) in table {
        let what = format!("{method} {path}");
        let Some(scope) = scope else {
            let (status, body) = call(&host.base, &method, &path, None).await;
            assert_eq!(status, 200, "{what} is open: {body}");
            continue;
        };
        let (status, body) = call(&host.base, &method, &path, None).await;
        assert_eq!(status, 401, "{what} without a key: {body}");
        assert_eq!(body["errorCode"], "unauthorized", "{what}: {body}");
        let wrong = Some(("not-a-key-of-this-host-at-all", Presented::Bearer));
        let (status, body) = call(&host.base, &method, &path, wrong).await;
        assert_eq!(status, 401, "{what} with an unknown key: {body}");
        let (status, body) = call(
            &host.base,
            &method,
            &path,
            Some((INVOKE, Presented::ApiKey)),
        )
        .await;
        if scope == "admin" {
            assert_eq!(status, 403, "{what} with an invoke key: {body}");
            assert_eq!(body["errorCode"], "forbidden", "{what}: {body}");
        } else {
            assert!(
                ![401, 403].contains(&status),
                "{what} with an invoke key: {status} {body}"
            );
        }
        for how in [
            Presented::Bearer,
            Presented::ApiKey,
            Presented::FunctionsKey,
            Presented::Code,
        ] {
            let (status, body) = call(&host.base, &method, &path, Some((ADMIN, how))).await;
            assert!(
                ![401, 403].contains(&status),
                "{what} with the admin key as {how:?}: {status} {body}"
            );
        }
    }
    // A rotated key works as well as the first.
    let rotated = format!("rotated-{INVOKE}");
    let (status, body) = call(
        &host.base,
        &Method::POST,
        "/api/agents/writer/run",
        Some((&rotated, Presented::FunctionsKey)),
    )
    .await;
    assert_eq!(status, 202, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_stream_url_of_a_202_opens_that_stream_without_a_key_and_no_other() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk")
        .env("AGENTHOST_API_KEYS", &format!("invoke:{INVOKE}"))
        .start();
    let start = |message: &'static str| {
        client()
            .post(host.url("/api/agents/writer/run"))
            .bearer_auth(INVOKE)
            .json(&json!({"message": message, "waitForResponse": false}))
            .send()
    };
    let first: Value = start("first").await.unwrap().json().await.unwrap();
    let second: Value = start("second").await.unwrap().json().await.unwrap();
    let url = first["streamUrl"].as_str().unwrap();
    assert!(url.contains("?token="), "{first}");
    assert_eq!(first["stream_url"], first["streamUrl"]);
    let text = client()
        .get(host.url(url))
        .header("accept", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(text.status(), 200);
    assert_eq!(
        text.text().await.unwrap(),
        crate::support::fake_model::echo_of("first")
    );
    // The first run's token on the second run's stream, and on its record.
    let token = url.split("?token=").nth(1).unwrap();
    let run = second["correlationId"].as_str().unwrap();
    for path in [
        format!("/api/agents/writer/runs/{run}/stream?token={token}"),
        format!("/api/agents/writer/runs/{run}?token={token}"),
    ] {
        let refused = client().get(host.url(&path)).send().await.unwrap();
        assert_eq!(refused.status(), 401, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_client_takes_a_key_and_a_host_that_requires_keys_will_not_start_without() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk")
        .arg("--api-key")
        .arg(&format!("admin:{ADMIN}"))
        .start();
    let client_run = |key: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agenthost"));
        command.args(["client", "--endpoint", &host.base]);
        if let Some(key) = key {
            command.args(["--api-key", key]);
        }
        command
            .args(["agent", "run", "writer", "Keys please."])
            .env_remove("DURABLE_TASK_SCHEDULER_CONNECTION_STRING")
            .env_remove("AGENTHOST_API_KEY")
            .output()
            .unwrap()
    };
    let refused = client_run(None);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("401"));
    let answered = client_run(Some(ADMIN));
    assert!(
        answered.status.success(),
        "{}",
        String::from_utf8_lossy(&answered.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&answered.stdout).trim(),
        crate::support::fake_model::echo_of("Keys please.")
    );

    let store = format!("sqlite://{}", dir.path().join("other.db").display());
    let output = Command::new(env!("CARGO_BIN_EXE_agenthost"))
        .args(["serve", "--port", "0", "--require-keys", "--store", &store])
        .env_remove("AGENTHOST_API_KEYS")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--require-keys"), "{stderr}");
    let output = Command::new(env!("CARGO_BIN_EXE_agenthost"))
        .args([
            "serve",
            "--port",
            "0",
            "--api-key",
            "admin:short",
            "--store",
            &store,
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("at least 16") && !stderr.contains("short"),
        "{stderr}"
    );
}

/// Whether `path` is an instance of the OpenAPI `template` (`{x}` is one
/// segment; the catch-all `/api/{path}` any rest).
fn matches_template(template: &str, path: &str) -> bool {
    if template == "/api/{path}" {
        return path.starts_with("/api/declared/");
    }
    let t: Vec<&str> = template.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| (t.starts_with('{') && t.ends_with('}')) || t == p)
}
