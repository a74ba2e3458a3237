//! Endpoint keys (issue 19): with keys configured, every route answers 401
//! without a key or with an unknown one, 403 with an invoke key on an admin
//! route, and its normal answer with a key of its scope, whichever way the
//! key is presented; health stays open; the stream URL handed out in a 202
//! opens that run's stream without a key, and no other. The URLs of other
//! 202s in `capability_urls`, keys from a file in `key_file`.

mod capability_urls;
mod key_file;
mod run_visibility;

use std::process::Command;

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::{client, FakeModel, HostBuilder};

const ADMIN: &str = "admin-key-0123456789abcdef";
const INVOKE: &str = "invoke-key-0123456789abcdef";

/// One route to call: the scope it needs (`None`: open) and what it answers
/// to the request `call` sends with a key of that scope (the status the
/// document gives for that request).
struct Route {
    method: Method,
    path: String,
    scope: Option<&'static str>,
    answer: u16,
}

fn route(
    method: Method,
    path: impl Into<String>,
    scope: Option<&'static str>,
    answer: u16,
) -> Route {
    Route {
        method,
        path: path.into(),
        scope,
        answer,
    }
}

/// Every route the host serves. `run` is a run of the writer in session
/// `session`; instance `keyed-1` waits for an event (so every call below
/// answers the same however often it is made); `gone-1` does not exist.
fn routes(run: &str, session: &str) -> Vec<Route> {
    let instance = "/runtime/webhooks/durabletask/instances";
    let (open, invoke, admin) = (None, Some("invoke"), Some("admin"));
    vec![
        route(Method::GET, "/api/health", open, 200),
        route(Method::GET, "/api/health/live", open, 200),
        route(Method::POST, "/agenthost-wake", open, 200),
        route(Method::GET, "/api/health/ready", open, 200),
        route(Method::GET, "/api/openapi.json", open, 200),
        route(Method::POST, "/api/agents/writer/run", invoke, 202),
        route(
            Method::GET,
            format!("/api/agents/writer/runs/{run}"),
            invoke,
            200,
        ),
        route(
            Method::GET,
            format!("/api/agents/writer/runs/{run}/stream"),
            invoke,
            200,
        ),
        route(Method::GET, "/api/agents/writer/runs", admin, 200),
        // A2A: the cards are open (discovery); a call wants an invoke key,
        // and the body `call` sends is not JSON-RPC (an error object, 200).
        route(Method::GET, "/.well-known/agent-card.json", open, 200),
        route(
            Method::GET,
            "/a2a/writer/.well-known/agent-card.json",
            open,
            200,
        ),
        route(Method::POST, "/a2a/writer", invoke, 200),
        route(Method::POST, "/a2a/writer/", invoke, 200),
        // The HTTP+JSON binding: `call` sends no A2A-Version header (an
        // A2A 0.3 caller, refused with 400).
        route(Method::POST, "/a2a/writer/message:send", invoke, 400),
        route(Method::GET, "/a2a/writer/tasks", invoke, 400),
        route(Method::GET, format!("/a2a/writer/tasks/{run}"), invoke, 400),
        route(
            Method::POST,
            format!("/a2a/writer/tasks/{run}:cancel"),
            invoke,
            400,
        ),
        route(
            Method::POST,
            format!("/a2a/writer/tasks/{run}/pushNotificationConfigs"),
            invoke,
            400,
        ),
        route(
            Method::GET,
            format!("/a2a/writer/tasks/{run}/pushNotificationConfigs"),
            invoke,
            400,
        ),
        route(
            Method::GET,
            format!("/a2a/writer/tasks/{run}/pushNotificationConfigs/c1"),
            invoke,
            400,
        ),
        route(
            Method::DELETE,
            format!("/a2a/writer/tasks/{run}/pushNotificationConfigs/c1"),
            invoke,
            400,
        ),
        // The run has ended: nothing to cancel.
        route(
            Method::POST,
            format!("/api/agents/writer/runs/{run}/cancel"),
            invoke,
            409,
        ),
        // The body `call` sends is not a decision.
        route(
            Method::POST,
            format!("/api/agents/writer/runs/{run}/approvals"),
            invoke,
            400,
        ),
        route(Method::POST, "/api/orchestrators/sequence", invoke, 202),
        // An unfinished instance has that id.
        route(
            Method::POST,
            "/api/orchestrators/sequence/keyed-1",
            invoke,
            409,
        ),
        route(Method::POST, "/api/declared/by/a/component", invoke, 404),
        route(
            Method::GET,
            format!("/api/agents/writer/sessions/{session}"),
            admin,
            200,
        ),
        route(
            Method::DELETE,
            "/api/agents/writer/sessions/s-1",
            admin,
            404,
        ),
        route(
            Method::GET,
            format!("/api/agents/writer/{session}"),
            admin,
            200,
        ),
        route(Method::GET, "/api/components", admin, 200),
        route(Method::GET, "/api/components/writer", admin, 200),
        route(Method::GET, "/metrics", admin, 200),
        route(Method::GET, instance, admin, 200),
        route(
            Method::DELETE,
            format!("{instance}?instanceIdPrefix=none-such-"),
            admin,
            200,
        ),
        route(Method::GET, format!("{instance}/keyed-1"), admin, 202),
        // Not finished: its history is kept.
        route(Method::DELETE, format!("{instance}/keyed-1"), admin, 409),
        route(
            Method::POST,
            format!("{instance}/keyed-1/raiseEvent/other"),
            admin,
            202,
        ),
        route(
            Method::POST,
            format!("{instance}/gone-1/terminate"),
            admin,
            404,
        ),
        route(
            Method::POST,
            format!("{instance}/gone-1/suspend"),
            admin,
            404,
        ),
        route(
            Method::POST,
            format!("{instance}/gone-1/resume"),
            admin,
            404,
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
    // The host says at start that keys are on, and how many of each scope.
    let said = host.output();
    let line = said
        .lines()
        .find(|l| l.contains("endpoint keys on"))
        .unwrap_or_else(|| panic!("no line says the keys are on:\n{said}"));
    assert!(
        line.contains("invoke_keys=2") && line.contains("admin_keys=1"),
        "{line}"
    );
    assert!(!line.contains(ADMIN) && !line.contains(INVOKE), "{line}");
    // A run to address the run routes to, and an instance that waits.
    let (status, accepted) = call(
        &host.base,
        &Method::POST,
        "/api/agents/writer/run",
        Some((INVOKE, Presented::Bearer)),
    )
    .await;
    assert_eq!(status, 202, "{accepted}");
    let run = accepted["correlationId"].as_str().unwrap().to_string();
    let session = accepted["sessionId"].as_str().unwrap().to_string();
    crate::support::wait_run_finished(&format!(
        "{}/api/agents/writer/runs/{run}?code={ADMIN}",
        host.base
    ))
    .await;
    let (status, started) = call(
        &host.base,
        &Method::POST,
        "/api/orchestrators/wait_event/keyed-1",
        Some((ADMIN, Presented::Bearer)),
    )
    .await;
    assert_eq!(status, 202, "{started}");

    // The A2A card says how a key is presented.
    let card: Value = client()
        .get(host.url("/a2a/writer/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "Bearer",
        "{card}"
    );

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
    let table = routes(&run, &session);
    let mut documented = 0;
    for (template, item) in document["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            documented += 1;
            let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let matching: Vec<_> = table
                .iter()
                .filter(|r| r.method == method && matches_template(template, &r.path))
                .collect();
            assert_eq!(matching.len(), 1, "{method} {template} is tested once");
            let declared = operation["description"]
                .as_str()
                .and_then(|d| d.split("Scope: `").nth(1))
                .and_then(|rest| rest.split('`').next());
            assert_eq!(
                declared, matching[0].scope,
                "{method} {template}: {operation}"
            );
            let answers = operation["responses"]
                .as_object()
                .unwrap()
                .keys()
                .any(|code| {
                    let answer = matching[0].answer;
                    *code == answer.to_string() || *code == format!("{}XX", answer / 100)
                });
            assert!(
                answers,
                "{method} {template} documents {}: {operation}",
                matching[0].answer
            );
        }
    }
    assert_eq!(documented, table.len(), "every tested route is documented");

    for Route {
        method,
        path,
        scope,
        answer,
    } in table
    {
        let what = format!("{method} {path}");
        let Some(scope) = scope else {
            let (status, body) = call(&host.base, &method, &path, None).await;
            assert_eq!(status, answer, "{what} is open: {body}");
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
            assert_eq!(status, answer, "{what} with an invoke key: {body}");
        }
        for how in [
            Presented::Bearer,
            Presented::ApiKey,
            Presented::FunctionsKey,
            Presented::Code,
        ] {
            let (status, body) = call(&host.base, &method, &path, Some((ADMIN, how))).await;
            assert_eq!(
                status, answer,
                "{what} with the admin key as {how:?}: {body}"
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
        .env(
            "AGENTHOST_API_KEYS",
            &format!("invoke:{INVOKE},admin:{ADMIN}"),
        )
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
    let path = path.split('?').next().unwrap_or(path);
    if template == "/api/{path}" {
        return path.starts_with("/api/declared/");
    }
    // A path the router gives a literal route of its own (`…/runs`) is not
    // the session route's `{session_id}`.
    if template == "/api/agents/{name}/{session_id}" && path.ends_with("/runs") {
        return false;
    }
    let t: Vec<&str> = template.split('/').collect();
    let p: Vec<&str> = path.split('/').collect();
    t.len() == p.len()
        && t.iter()
            .zip(&p)
            .all(|(t, p)| (t.starts_with('{') && t.ends_with('}') && !p.is_empty()) || t == p)
}
