//! The example axum application of `examples/embedded.rs`, which embeds
//! agenthost as a library: it serves its own route and the agents' routes
//! from one listener.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use std::future::IntoFuture;

use serde_json::json;

use crate::support::host::store_location;
use crate::support::{client, component, fake_model::echo_of, FakeModel};

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_example_app_serves_its_own_route_beside_the_agents() {
    // `cargo test` (and nextest) build the examples with the tests: no
    // cargo inside a test (it would wait on the build lock of whatever
    // else builds, and build the tree as it is now, not as tested).
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/examples/embedded");
    assert!(
        example.is_file(),
        "{} is built by `cargo test` / `cargo nextest run` with the tests",
        example.display()
    );

    let dir = tempfile::tempdir().unwrap();
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::copy(component("writer"), components.join("writer.wasm")).unwrap();
    let model = FakeModel::start().await;
    let (store, hub) = store_location(dir.path(), None);
    let mut child = Command::new(example)
        .current_dir(dir.path())
        .args(["--components", components.to_str().unwrap()])
        .args(["--store", &store, "--taskhub", &hub, "--port", "0"])
        .env("OPENAI_BASE_URL", model.openai_base_url())
        .env("OPENAI_API_KEY", "sk")
        .env("OPENAI_MODEL", "gpt-test")
        .env("AGENTHOST_CACHE_DIR", dir.path().join("cache"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let app = KillOnDrop(child);
    let base = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|line| {
            line.strip_prefix("example listening on ")
                .map(str::to_string)
        })
        .expect("the example app starts");

    let hello = client().get(format!("{base}/hello")).send().await.unwrap();
    assert_eq!(hello.status(), 200);
    assert_eq!(hello.text().await.unwrap(), "hello from the embedding app");

    let run = client()
        .post(format!("{base}/api/agents/writer/run"))
        .json(&json!({"message": "Embedded tea.", "thread_id": "e-1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(run.status(), 200);
    assert_eq!(run.text().await.unwrap(), echo_of("Embedded tea."));
    drop(app);
}

/// A host embedded from a config file: `Settings` read with serde (here TOML,
/// with an endpoint key), started in this process by `Builder::with_settings`,
/// its router served by the test's own listener; the key it was given guards
/// its routes.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_embedded_from_a_config_file_serves_with_the_keys_it_names() {
    use agenthost::embed::{Builder, Settings};

    let dir = tempfile::tempdir().unwrap();
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::copy(component("writer"), components.join("writer.wasm")).unwrap();
    let (store, hub) = store_location(dir.path(), None);
    let config = format!(
        r#"
        components = "{}"
        store = "{store}"
        taskhub = "{hub}"
        cache_dir = "{}"
        watch = false
        api_keys = ["invoke:an-invoke-key-for-the-embedding-test"]
        session_ttl = "none"
        "#,
        components.display(),
        dir.path().join("cache").display()
    );
    let settings: Settings = toml::from_str(&config).expect("the config parses");
    let host = Builder::with_settings(settings)
        .start()
        .await
        .expect("the embedded host starts");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(axum::serve(listener, host.router()).into_future());

    let url = format!("{base}/api/agents/writer/run");
    let refused = client().post(&url).body("Tea?").send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let answered = client()
        .post(&url)
        .header("x-api-key", "an-invoke-key-for-the-embedding-test")
        .body("Tea?")
        .send()
        .await
        .unwrap();
    assert_eq!(answered.status(), 200);
    assert!(!answered.text().await.unwrap().is_empty());

    server.abort();
    host.shutdown(std::time::Duration::from_secs(5)).await;
}

/// A start that cannot succeed says which step failed, as a typed error the
/// application can match on, with the remedy in its message.
#[tokio::test(flavor = "multi_thread")]
async fn an_embedded_start_that_fails_says_which_step_in_a_typed_error() {
    use agenthost::embed::{Builder, Settings, StartError};

    let dir = tempfile::tempdir().unwrap();
    let keys: Settings = toml::from_str("require_keys = true").unwrap();
    let missing = Builder::with_settings(keys)
        .components(dir.path())
        .store(&format!("sqlite://{}", dir.path().join("a.db").display()))
        .start()
        .await
        .err()
        .expect("no key: no start");
    assert!(matches!(missing, StartError::KeysRequired), "{missing}");

    let unreachable = Builder::with_settings(Settings::default())
        .components(dir.path())
        .store("postgres://nobody@127.0.0.1:1/none")
        .start()
        .await
        .err()
        .expect("no database: no start");
    assert!(
        matches!(unreachable, StartError::StoreUnreachable(_)),
        "{unreachable}"
    );
    assert!(
        unreachable.to_string().contains("Start the database"),
        "{unreachable}"
    );

    let malformed = toml::from_str::<Settings>("lease = \"soon\"").unwrap_err();
    assert!(malformed.to_string().contains("lease"), "{malformed}");
}
