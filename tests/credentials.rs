//! Model credentials without keys: a managed identity (a fake IMDS, a fake
//! App Service identity endpoint), a workload identity (a federated token
//! file and a fake Entra token endpoint), and the Azure CLI (a stub `az` on
//! PATH) each put `Authorization: Bearer <token>` on the model's requests;
//! tokens are cached and fetched again before they expire; the default
//! chain's order; a credential that cannot get a token fails the start with
//! the spec's message, and a request with 502; no token ever in the logs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Json;
use serde_json::{json, Value};

use crate::support::{client, fake_model::echo_of, FakeModel, HostBuilder};

/// A fake of the token endpoints: counts what it issued, and can be told to
/// fail or to issue short-lived tokens.
#[derive(Clone, Default)]
struct Tokens {
    issued: Arc<Mutex<Vec<String>>>,
    failing: Arc<Mutex<bool>>,
    /// `expires_in` of the tokens it issues, in seconds.
    lifetime: Arc<Mutex<u64>>,
}

impl Tokens {
    fn issue(&self, kind: &str) -> Response {
        if *self.failing.lock().unwrap() {
            return (StatusCode::BAD_REQUEST, "identity not found").into_response();
        }
        let mut issued = self.issued.lock().unwrap();
        let token = format!("{kind}-token-{}", issued.len() + 1);
        issued.push(token.clone());
        let lifetime = *self.lifetime.lock().unwrap();
        Json(json!({"access_token": token, "expires_in": lifetime.to_string(), "token_type": "Bearer"}))
            .into_response()
    }

    fn issued(&self) -> Vec<String> {
        self.issued.lock().unwrap().clone()
    }
}

async fn start_tokens() -> (String, Tokens) {
    let tokens = Tokens::default();
    *tokens.lifetime.lock().unwrap() = 3600;
    let app = axum::Router::new()
        .route(
            "/imds",
            get(
                |State(t): State<Tokens>,
                 headers: HeaderMap,
                 Query(q): Query<HashMap<String, String>>| async move {
                    if headers.get("metadata").map(|v| v.as_bytes()) != Some(b"true")
                        || q.get("resource").map(String::as_str)
                            != Some("https://cognitiveservices.azure.com")
                    {
                        return (StatusCode::BAD_REQUEST, "not an IMDS request").into_response();
                    }
                    t.issue("imds")
                },
            ),
        )
        .route(
            "/appservice",
            get(|State(t): State<Tokens>, headers: HeaderMap| async move {
                if headers.get("x-identity-header").map(|v| v.as_bytes()) != Some(b"app-secret") {
                    return (StatusCode::UNAUTHORIZED, "bad identity header").into_response();
                }
                t.issue("appservice")
            }),
        )
        .route(
            "/{tenant}/oauth2/v2.0/token",
            post(
                |State(t): State<Tokens>,
                 Path(tenant): Path<String>,
                 Form(form): Form<HashMap<String, String>>| async move {
                    let valid = tenant == "tenant-1"
                        && form.get("client_id").map(String::as_str) == Some("client-1")
                        && form.get("client_assertion").map(String::as_str)
                            == Some("federated-jwt")
                        && form.get("grant_type").map(String::as_str) == Some("client_credentials");
                    if !valid {
                        return (StatusCode::BAD_REQUEST, "invalid_client").into_response();
                    }
                    t.issue("workload")
                },
            ),
        )
        .with_state(tokens.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, tokens)
}

/// A host on Azure OpenAI (the fake model) with no key.
fn azure(dir: &std::path::Path, model: &FakeModel, credential: &str) -> HostBuilder {
    HostBuilder::new(dir)
        .env("AZURE_OPENAI_ENDPOINT", &model.endpoint())
        .env("AZURE_OPENAI_DEPLOYMENT_NAME", "gpt-test")
        .env("AGENTHOST_MODEL_CREDENTIAL", credential)
}

async fn ask(host: &crate::support::host::Host, message: &str) -> reqwest::Response {
    client()
        .post(host.url("/api/agents/writer/run"))
        .body(message.to_string())
        .send()
        .await
        .unwrap()
}

fn bearer(model: &FakeModel, index: usize) -> String {
    model.requests()[index].headers["authorization"]
        .to_str()
        .unwrap()
        .to_string()
}

/// A credential, the environment it needs, the header the model must see.
type Case = (&'static str, Vec<(&'static str, String)>, &'static str);

#[tokio::test(flavor = "multi_thread")]
async fn each_credential_puts_its_bearer_token_on_the_model_requests() {
    let (tokens_url, tokens) = start_tokens().await;
    let stub = tempfile::tempdir().unwrap();
    let az = stub.path().join("az");
    std::fs::write(
        &az,
        "#!/bin/sh\n[ \"$1 $2\" = \"account get-access-token\" ] || exit 2\n\
         echo '{\"accessToken\": \"cli-token\", \"expires_on\": 4102444800, \"tokenType\": \"Bearer\"}'\n",
    )
    .unwrap();
    std::fs::set_permissions(&az, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let token_file = stub.path().join("federated");
    std::fs::write(&token_file, "federated-jwt\n").unwrap();
    let path = format!(
        "{}:{}",
        stub.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );

    let cases: Vec<Case> = vec![
        (
            "managed-identity",
            vec![("AGENTHOST_IMDS_ENDPOINT", format!("{tokens_url}/imds"))],
            "Bearer imds-token-1",
        ),
        (
            "managed-identity",
            vec![
                ("IDENTITY_ENDPOINT", format!("{tokens_url}/appservice")),
                ("IDENTITY_HEADER", "app-secret".into()),
            ],
            "Bearer appservice-token-2",
        ),
        (
            "workload-identity",
            vec![
                (
                    "AZURE_FEDERATED_TOKEN_FILE",
                    token_file.display().to_string(),
                ),
                ("AZURE_CLIENT_ID", "client-1".into()),
                ("AZURE_TENANT_ID", "tenant-1".into()),
                ("AZURE_AUTHORITY_HOST", tokens_url.clone()),
            ],
            "Bearer workload-token-3",
        ),
        ("cli", vec![("PATH", path.clone())], "Bearer cli-token"),
    ];
    for (credential, env, expected) in cases {
        let dir = tempfile::tempdir().unwrap();
        let model = FakeModel::start().await;
        model.expect_auth("authorization", expected);
        let mut builder = azure(dir.path(), &model, credential);
        for (k, v) in &env {
            builder = builder.env(k, v);
        }
        let host = builder.start();
        let response = ask(&host, "hello").await;
        assert_eq!(response.status(), 200, "{credential}: {}", host.output());
        assert_eq!(response.text().await.unwrap(), echo_of("hello"));
        assert!(
            model.requests()[0].headers.get("api-key").is_none(),
            "no key is sent"
        );
        let output = host.output();
        assert!(
            output.contains(&format!("credential=\"{credential}\""))
                || output.contains(&format!("credential={credential}")),
            "{output}"
        );
        assert!(
            !output.contains(expected.trim_start_matches("Bearer ")),
            "a token in the logs:\n{output}"
        );
    }
    assert_eq!(tokens.issued().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_are_cached_and_fetched_again_before_they_expire() {
    let (tokens_url, tokens) = start_tokens().await;
    // Five minutes and two seconds: two seconds before it must be renewed.
    *tokens.lifetime.lock().unwrap() = 302;
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = azure(dir.path(), &model, "managed-identity")
        .env("AGENTHOST_IMDS_ENDPOINT", &format!("{tokens_url}/imds"))
        .start();
    assert_eq!(
        tokens.issued(),
        ["imds-token-1"],
        "one token at start (fail fast)"
    );
    for _ in 0..3 {
        assert_eq!(ask(&host, "cached").await.status(), 200);
    }
    assert_eq!(tokens.issued().len(), 1, "cached");
    assert_eq!(bearer(&model, 2), "Bearer imds-token-1");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(ask(&host, "renewed").await.status(), 200);
    assert_eq!(tokens.issued().len(), 2, "renewed before it expired");
    assert_eq!(bearer(&model, 3), "Bearer imds-token-2");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_default_chain_tries_workload_then_managed_identity_then_the_cli() {
    let (tokens_url, _tokens) = start_tokens().await;
    let stub = tempfile::tempdir().unwrap();
    let token_file = stub.path().join("federated");
    std::fs::write(&token_file, "federated-jwt").unwrap();
    // Both set up: the workload identity comes first.
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = azure(dir.path(), &model, "default")
        .env(
            "AZURE_FEDERATED_TOKEN_FILE",
            &token_file.display().to_string(),
        )
        .env("AZURE_CLIENT_ID", "client-1")
        .env("AZURE_TENANT_ID", "tenant-1")
        .env("AZURE_AUTHORITY_HOST", &tokens_url)
        .env("AGENTHOST_IMDS_ENDPOINT", &format!("{tokens_url}/imds"))
        .start();
    assert_eq!(ask(&host, "chain").await.status(), 200);
    assert!(bearer(&model, 0).starts_with("Bearer workload-token"));
    host.wait_logged("workload-identity", 0).await;
    drop(host);
    // No workload identity here: the managed identity is next.
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = azure(dir.path(), &model, "default")
        .env("AGENTHOST_IMDS_ENDPOINT", &format!("{tokens_url}/imds"))
        .start();
    assert_eq!(ask(&host, "chain").await.status(), 200);
    assert!(bearer(&model, 0).starts_with("Bearer imds-token"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_credential_without_a_token_fails_the_start_and_then_each_request() {
    let (tokens_url, tokens) = start_tokens().await;
    *tokens.failing.lock().unwrap() = true;
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_agenthost"))
        .current_dir(dir.path())
        .args(["serve", "--port", "0", "--components", "."])
        .args(crate::support::host::store_args(dir.path(), None))
        .env("AZURE_OPENAI_ENDPOINT", model.endpoint())
        .env("AZURE_OPENAI_DEPLOYMENT_NAME", "gpt-test")
        .env("AGENTHOST_MODEL_CREDENTIAL", "managed-identity")
        .env("AGENTHOST_IMDS_ENDPOINT", format!("{tokens_url}/imds"))
        .env_remove("DURABLE_TASK_SCHEDULER_CONNECTION_STRING")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "authentication failed: verify login and access (credential tried: managed-identity)"
        ),
        "{stderr}"
    );

    // Up with a short-lived token, then the identity goes away: 502.
    *tokens.failing.lock().unwrap() = false;
    *tokens.lifetime.lock().unwrap() = 301;
    let host = azure(dir.path(), &model, "managed-identity")
        .env("AGENTHOST_IMDS_ENDPOINT", &format!("{tokens_url}/imds"))
        .start();
    *tokens.failing.lock().unwrap() = true;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let refused = ask(&host, "now?").await;
    assert_eq!(refused.status(), 502);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["code"], "authentication_failed", "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("verify login and access"),
        "{body}"
    );
    assert!(
        !host.output().contains("imds-token-"),
        "no token in the logs"
    );
}
