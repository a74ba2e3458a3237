//! Microsoft Agent Framework's Durable Task hosting (PyPI
//! `agent-framework-durabletask`, installed into target/agent-framework-venv
//! by `make test`) against agenthost over gRPC, unchanged: its worker keeps
//! each agent session in a durable entity (`dafx-{agent}`), its client in
//! another process runs the agent by name, and its orchestrations call
//! agents and wait for a human's approval. Model calls go to the fake
//! OpenAI-compatible server.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::process::Command;

use crate::support::fake_model::echo_of;
use crate::support::host::Host;
use crate::support::{workspace, FakeModel, HostBuilder};

fn python() -> std::path::PathBuf {
    crate::support::venv_python("agent-framework-venv")
}

fn script() -> std::path::PathBuf {
    workspace().join("tests/durabletask/af_hosting.py")
}

/// A client mode of the script, in its own process: its JSON line.
async fn client(host: &Host, args: &[&str]) -> Value {
    let address = host.grpc_address();
    let mut all = vec![args[0], address.as_str()];
    all.extend_from_slice(&args[1..]);
    let stdout =
        crate::support::python_script(&python(), &script(), &all, host, Duration::from_secs(240))
            .await;
    let line = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// The model was asked `question` with `earlier` (and its answer) before it.
fn assert_asked_with_history(model: &FakeModel, question: &str, earlier: &str) {
    let asked = model
        .requests()
        .into_iter()
        .find(|r| r.last_user_message() == question)
        .unwrap_or_else(|| panic!("the model was never asked '{question}'"));
    let transcript = asked.transcript();
    assert!(
        transcript.contains(&format!("user: {earlier}"))
            && transcript.contains(&format!("assistant: {}", echo_of(earlier))),
        "{transcript:?}"
    );
}

/// The session key of an Agent Framework session id (`@Agent@KEY`).
fn session_key(ran: &Value) -> String {
    ran["session"]
        .as_str()
        .and_then(|s| s.rsplit('@').next())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_framework_clients_run_a_workers_agents_and_the_hosts_wasm_agents_by_name_and_an_approval_orchestration_completes(
) {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk-test")
        .arg("--grpc")
        .arg("--grpc-port")
        .arg("0")
        .start();
    // What the worker says, for a failure's message.
    let worker_log = dir.path().join("worker.log");
    let said = || std::fs::read_to_string(&worker_log).unwrap_or_default();
    let _worker = Command::new(python())
        .arg(script())
        .arg("worker")
        .arg(host.grpc_address())
        .arg(model.openai_base_url())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&worker_log).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    host.wait_logged("an SDK worker connected", 0).await;

    // The worker's agent, by name, twice on one session.
    let ran = client(&host, &["session", "Joker"]).await;
    let (cats, dogs) = (
        "Joker, tell me a joke about cats",
        "Joker, another one, about dogs",
    );
    assert_eq!(
        ran["first"],
        echo_of(cats),
        "{ran}\n{}\n{}",
        host.output(),
        said()
    );
    assert_eq!(ran["second"], echo_of(dogs), "{ran}");
    // The second answer carries the first exchange: the model was asked
    // with it.
    assert_asked_with_history(&model, dogs, cats);
    // The session (`@Joker@KEY` to the Agent Framework) is entity
    // `@dafx-joker@KEY` of the hub, visible to the management API.
    let key = session_key(&ran);
    let (code, entity) =
        crate::support::durable::status(&host, &format!("@dafx-joker@{key}")).await;
    assert_eq!(code, 202, "{entity}");
    let history = &entity["output"]["data"]["conversationHistory"];
    assert_eq!(history.as_array().map(Vec::len), Some(4), "{entity}");

    // A wasm agent of the host, by name, through the same client: the
    // session is the agent's session here, which the HTTP API continues.
    let ran = client(&host, &["session", "writer"]).await;
    let (cats, dogs) = (
        "writer, tell me a joke about cats",
        "writer, another one, about dogs",
    );
    assert_eq!(ran["first"], echo_of(cats), "{ran}\n{}", host.output());
    assert_eq!(ran["second"], echo_of(dogs), "{ran}");
    assert_asked_with_history(&model, dogs, cats);
    let key = session_key(&ran);
    let third = crate::support::client()
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "writer, and birds?", "sessionId": key}))
        .send()
        .await
        .unwrap();
    assert_eq!(third.status(), 200);
    assert_eq!(third.text().await.unwrap(), echo_of("writer, and birds?"));
    assert_asked_with_history(&model, "writer, and birds?", dogs);

    // An orchestration calls an agent, then waits for a human's approval,
    // racing a timer; it completes once the approval is raised.
    let approved = client(&host, &["approval"]).await;
    assert_eq!(approved["waiting"], "RUNNING", "{approved}");
    assert_eq!(approved["status"], "COMPLETED", "{approved}");
    assert_eq!(approved["output"]["status"], "published");
    assert_eq!(approved["output"]["text"], echo_of("Write about tea"));
    assert_eq!(approved["output"]["approval"], json!({"approved": true}));
}
