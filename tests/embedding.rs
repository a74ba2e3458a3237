//! The example axum application of `examples/embedded.rs`, which embeds
//! agenthost as a library: it serves its own route and the agents' routes
//! from one listener.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

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
    let built = Command::new(env!("CARGO"))
        .args(["build", "-p", "agenthost", "--example", "embedded"])
        .status()
        .unwrap();
    assert!(built.success(), "the example builds");
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/examples/embedded");

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
