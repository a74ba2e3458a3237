//! Task hubs and the store's address: two hubs on one database never see
//! each other's work; a hub named by a Durable Task Scheduler connection
//! string is the same hub as named by flags; an unreachable store is a clear
//! error. On SQLite or, with `AGENTHOST_TEST_STORE`, on PostgreSQL.

use std::process::Command;

use serde_json::{json, Value};

use crate::support::durable::{start_with_id, status, wait_for, wait_for_custom_status};
use crate::support::host::Host;
use crate::support::{client, fake_model::echo_of, get_json, FakeModel, HostBuilder};

async fn run(host: &Host, session: &str, message: &str) -> String {
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": message, "thread_id": session}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn two_task_hubs_on_one_database_run_the_same_sample_without_crosstalk() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let hub = |name: &str| {
        HostBuilder::new(dir.path())
            .components(&["writer", "approval"])
            .openai(&model, "sk")
            .taskhub(name)
            .start()
    };
    let (blue, green) = (hub("blue"), hub("green"));

    // One instance id and one session id in both hubs.
    for host in [&blue, &green] {
        start_with_id(
            host,
            "approval",
            "review",
            &json!({"topic": "tea", "timeout_seconds": 3600}),
        )
        .await;
        wait_for_custom_status(host, "review", "/state", &json!("awaiting_approval")).await;
    }
    let decide = |host: &Host, decision: Value| {
        let url = host.url("/api/approval/review");
        async move {
            client()
                .post(url)
                .json(&decision)
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(decide(&blue, json!({"approved": true})).await, 202);
    let published = wait_for(&blue, "review", &["Completed", "Failed"]).await;
    assert_eq!(published["output"]["status"], "published", "{published}");
    let (_, waiting) = status(&green, "review").await;
    assert_eq!(
        waiting["runtimeStatus"], "Running",
        "blue's event never reached green: {waiting}"
    );
    assert_eq!(
        decide(&green, json!({"approved": false, "feedback": "More."})).await,
        202
    );
    let revised = wait_for(&green, "review", &["Completed", "Failed"]).await;
    assert_eq!(revised["output"]["status"], "revised", "{revised}");

    // Each hub lists only its own instance.
    for host in [&blue, &green] {
        let listed: Value = get_json(host.url("/runtime/webhooks/durabletask/instances")).await;
        let ids: Vec<&str> = listed
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|i| i["instanceId"].as_str())
            .collect();
        assert_eq!(ids, ["review"], "{listed}");
    }

    // One session id, two conversations.
    run(&blue, "s-1", "Blue one.").await;
    run(&green, "s-1", "Green one.").await;
    let before = model.requests().len();
    assert_eq!(run(&blue, "s-1", "Blue two.").await, echo_of("Blue two."));
    let transcript = model.requests()[before].transcript();
    let text = transcript.join("\n");
    assert!(text.contains("Blue one."), "{text}");
    assert!(
        !text.contains("Green"),
        "green's history leaked into blue: {text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hub_named_by_the_connection_string_is_the_hub_named_by_flags() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = |hub: &str, connection_string: bool| {
        let builder = HostBuilder::new(dir.path())
            .components(&["writer"])
            .openai(&model, "sk")
            .taskhub(hub);
        if connection_string {
            builder.via_connection_string().start()
        } else {
            builder.start()
        }
    };
    let mut first = host("shared-hub", true);
    run(&first, "s-cs", "Remember me.").await;
    first.terminate();

    let second = host("shared-hub", false);
    run(&second, "s-cs", "And now?").await;
    let continued = model.requests().last().unwrap().transcript().join("\n");
    assert!(continued.contains("Remember me."), "{continued}");

    let other = host("other-hub", false);
    run(&other, "s-cs", "And now?").await;
    let fresh = model.requests().last().unwrap().transcript().join("\n");
    assert!(!fresh.contains("Remember me."), "{fresh}");
}

#[test]
fn an_unreachable_store_exits_non_zero_naming_its_address_and_the_remedy() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_agenthost"))
        .current_dir(dir.path())
        .args(["serve", "--port", "0", "--components", "."])
        .args(["--store", "postgres://agenthost@127.0.0.1:9/nowhere"])
        .env_remove("DURABLE_TASK_SCHEDULER_CONNECTION_STRING")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot connect to the task hub store at postgres://127.0.0.1:9/nowhere"),
        "{stderr}"
    );
    assert!(stderr.contains("Start the database"), "{stderr}");

    let output = Command::new(env!("CARGO_BIN_EXE_agenthost"))
        .current_dir(dir.path())
        .args(["serve", "--port", "0", "--components", "."])
        .env(
            "DURABLE_TASK_SCHEDULER_CONNECTION_STRING",
            "Endpoint=sqlite://x.db;TaskHub=a;Authentication=ManagedIdentity",
        )
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("Authentication=ManagedIdentity is not supported"),
        "{stderr}"
    );
}
