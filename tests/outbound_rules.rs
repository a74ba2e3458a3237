//! A guest granted a host name reaches that host on the web's ports, and
//! nothing inside the host's own network through it: not the host's own
//! management API by a name that resolves to 127.0.0.1, not a database port
//! by a grant that names no port, not an ungranted host by a redirect.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::support::free_port;
use crate::support::host::Host;
use crate::support::{client, FakeModel, HostBuilder, Reply};

/// A local server: `/away` redirects to `elsewhere` (another local server,
/// never granted), `/near` redirects within itself to `/here`.
struct Redirector {
    port: u16,
    /// Requests the ungranted server received.
    elsewhere_hits: Arc<AtomicUsize>,
}

async fn serve_redirector() -> Redirector {
    let elsewhere_hits = Arc::new(AtomicUsize::new(0));
    let counter = elsewhere_hits.clone();
    let elsewhere = axum::Router::new().fallback(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        async { "the ungranted server answered" }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let elsewhere_port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, elsewhere).await });

    let away = format!("http://127.0.0.1:{elsewhere_port}/");
    let app = axum::Router::new()
        .route(
            "/away",
            axum::routing::get(move || {
                let away = away.clone();
                async move { axum::response::Redirect::temporary(&away) }
            }),
        )
        .route(
            "/near",
            axum::routing::get(|| async { axum::response::Redirect::to("/here") }),
        )
        .route(
            "/here",
            axum::routing::get(|| async { "reached by a redirect" }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Redirector {
        port,
        elsewhere_hits,
    }
}

/// What the `fetch` tool of the `hostile` guest reported for `url`.
async fn fetch(host: &Host, model: &FakeModel, url: &str) -> String {
    model.push(Reply::ToolCall("fetch".into(), json!({ "url": url })));
    model.push(Reply::ToolResult);
    let response = client()
        .post(host.url("/api/agents/hostile/run"))
        .body(format!("fetch {url}"))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = response.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    model
        .requests()
        .last()
        .and_then(|r| r.last_tool_result())
        .expect("the model saw the tool's result")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_granted_name_never_leads_a_guest_into_the_hosts_own_network() {
    let dir = tempfile::tempdir().unwrap();
    let own_port = free_port();
    let redirector = serve_redirector().await;
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::write(
        components.join("hostile.toml"),
        format!(
            "allowed_hosts = [\"agents-cdn.test\", \"agents-cdn.test:{own_port}\", \
             \"public.test\", \"127.0.0.1:{}\"]\n",
            redirector.port
        ),
    )
    .unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["hostile"])
        .openai(&model, "sk-test")
        .port(own_port)
        // The test's resolver: one name inside, one outside (TEST-NET-3).
        .arg("--resolve")
        .arg("agents-cdn.test=127.0.0.1")
        .env("AGENTHOST_RESOLVE", "public.test=203.0.113.7")
        .start();
    // The management API is there, for anyone on the machine.
    let listing = client()
        .get(host.url("/runtime/webhooks/durabletask/instances"))
        .send()
        .await
        .unwrap();
    assert_eq!(listing.status(), 200);

    // Granted by name, with the host's own port: the name resolves to
    // 127.0.0.1, so the connection is refused before it is made.
    let own = format!("http://agents-cdn.test:{own_port}/runtime/webhooks/durabletask/instances");
    let seen = fetch(&host, &model, &own).await;
    assert!(seen.contains("DestinationIpProhibited"), "{seen}");
    assert!(!seen.contains("\"status\""), "{seen}");
    let seen = fetch(&host, &model, "http://agents-cdn.test/").await;
    assert!(seen.contains("DestinationIpProhibited"), "{seen}");

    // A grant with no port opens 80 and 443 only: not PostgreSQL's port,
    // whatever the name resolves to.
    for url in ["http://public.test:5432/", "http://agents-cdn.test:5432/"] {
        let seen = fetch(&host, &model, url).await;
        assert!(seen.contains("HttpRequestDenied"), "{url}: {seen}");
    }

    // A redirect is a request of its own: to an ungranted host, refused.
    let away = format!("http://127.0.0.1:{}/away", redirector.port);
    let seen = fetch(&host, &model, &away).await;
    assert!(seen.contains("HttpRequestDenied"), "{seen}");
    assert_eq!(redirector.elsewhere_hits.load(Ordering::SeqCst), 0);
    // Within the grant, redirects are followed; a grant naming the address
    // itself reaches inside.
    let near = format!("http://127.0.0.1:{}/near", redirector.port);
    let seen: Value = serde_json::from_str(&fetch(&host, &model, &near).await).unwrap();
    assert_eq!(
        seen,
        json!({"status": 200, "body": "reached by a redirect"})
    );

    let log = host.output();
    assert!(
        log.contains("resolves only to addresses inside the host's network (127.0.0.1)"),
        "the refusal is logged with its reason: {log}"
    );
}
