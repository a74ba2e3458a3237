//! The Durable Task SDKs' blocks of docs/stores-and-hubs.md: the Python
//! client and worker run against a host over gRPC, and the variables the
//! SDKs' samples set serve both sides.

use super::shell::{samples_in, suite_store};
use super::*;

fn durabletask_python() -> PathBuf {
    crate::support::venv_python("durabletask-venv")
}

/// The block with the doc's gRPC address replaced by the test host's.
fn against_grpc(host: &Host, text: &str) -> String {
    text.replace("localhost:8080", &host.grpc_address())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_client_of_stores_and_hubs_md_gets_a_draft_published() {
    let block = claimed_one("the_python_client_of_stores_and_hubs_md_gets_a_draft_published");
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "approval"])
        .arg("--grpc")
        .arg("--grpc-port")
        .arg("0")
        .start();
    let mut command = std::process::Command::new(durabletask_python());
    command.arg("-c").arg(against_grpc(&host, &block.text));
    command::clean_env(&mut command);
    // Its loop has no bound of its own: a regression fails here, not hangs.
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("the doc's client finished within 2 minutes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        host.output()
    );
    // What the block's comment says it prints.
    assert_eq!(stdout.trim(), "COMPLETED published");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_python_worker_of_stores_and_hubs_md_serves_an_activity_to_a_wasm_orchestration() {
    let block = claimed_one(
        "the_python_worker_of_stores_and_hubs_md_serves_an_activity_to_a_wasm_orchestration",
    );
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .arg("--grpc")
        .arg("--grpc-port")
        .arg("0")
        .start();
    let mut command = tokio::process::Command::new(durabletask_python());
    command
        .arg("-c")
        .arg(against_grpc(&host, &block.text))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let _worker = command.spawn().unwrap();
    host.wait_logged("an SDK worker connected", 0).await;
    // A wasm orchestration calls the worker's activity by name.
    let started = client()
        .post(host.url("/api/orchestrators/call_activity_of/shouted"))
        .json(&json!({"activity": "shout", "input": "tea"}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);
    let done = wait_for(&host, "shouted", &["Completed"]).await;
    assert_eq!(done["output"], json!({"ok": "TEA!"}));
}

/// The block of `check` whose first line starts with `first`.
fn claimed_starting(check: &str, first: &str) -> Block {
    claimed(check)
        .into_iter()
        .find(|b| b.first_line().starts_with(first))
        .unwrap_or_else(|| panic!("{check} claims no block starting {first}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sample_variables_of_stores_and_hubs_md_serve_the_python_worker_and_client() {
    let check = "the_sample_variables_of_stores_and_hubs_md_serve_the_python_worker_and_client";
    let shell = claimed_starting(check, "export ENDPOINT=");
    let lines: Vec<&str> = shell
        .text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 2, "{}", shell.text);
    // The variables the doc exports, on a port free here.
    let port = crate::support::free_port();
    let env: Vec<(String, String)> = lines[0]
        .trim_start_matches("export ")
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(k, v)| {
            (
                k.to_string(),
                v.replace("localhost:8080", &format!("127.0.0.1:{port}")),
            )
        })
        .collect();
    let endpoint = env
        .iter()
        .find(|(k, _)| k == "ENDPOINT")
        .map(|(_, v)| v.clone())
        .expect("the doc exports ENDPOINT");
    let hub = env
        .iter()
        .find(|(k, _)| k == "TASKHUB")
        .map(|(_, v)| v.clone())
        .expect("the doc exports TASKHUB");
    let dir = tempfile::tempdir().unwrap();
    let subs = Substitutions {
        components: samples_in(dir.path()),
        store: suite_store(dir.path()),
        hub: hub_for(dir.path()),
    };
    // No --grpc, no --taskhub: the variables say both.
    let mut served = Spawned::start_with_env(lines[1], dir.path(), &subs, &env);
    served.base = served.wait_listening(Duration::from_secs(60));
    let output = served.output();
    assert!(
        output.contains(&format!(
            "agenthost gRPC listening on http://127.0.0.1:{port}"
        )),
        "{output}"
    );
    assert!(output.contains(&format!("taskhub={hub}")), "{output}");

    let python = |block: &Block| {
        let mut command = std::process::Command::new(durabletask_python());
        command.arg("-c").arg(&block.text);
        command::clean_env(&mut command);
        command.env("ENDPOINT", &endpoint).env("TASKHUB", &hub);
        let mut command = tokio::process::Command::from(command);
        command.kill_on_drop(true);
        command
    };
    // The worker block is the one the previous check runs against a wasm
    // orchestration; here it serves its own.
    let mut worker = python(&claimed_one(
        "the_python_worker_of_stores_and_hubs_md_serves_an_activity_to_a_wasm_orchestration",
    ));
    let _worker = worker
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let client = claimed_starting(check, "# client.py");
    let output = tokio::time::timeout(Duration::from_secs(120), python(&client).output())
        .await
        .expect("the doc's client finished within 2 minutes")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        served.output()
    );
    // What the block's comment says it prints.
    let said = client
        .text
        .lines()
        .find_map(|l| l.split_once("# ").filter(|_| l.starts_with("print(")))
        .map(|(_, said)| said.trim().to_string())
        .expect("the client's print line says what it prints");
    assert_eq!(stdout.trim(), said);
}
