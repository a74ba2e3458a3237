//! The samples' Python and JavaScript twins pass the same HTTP tests as
//! the Rust ones: the `weather` agent's tool round trip through the
//! offline model (the same answer in all three languages), the `approval`
//! orchestration approved, rejected with feedback and timed out, and a
//! kill -9 while it awaits the human, replayed on restart to the same
//! result. The `clock` test guests show that inside an orchestration a
//! language's own clock and randomness (`time.time()`, `uuid.uuid4()`,
//! `Date.now()`, `Math.random()`) read the journal, not the machine, and
//! that an orchestration calls another component's tool.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::durable::{start, status, wait_for, wait_for_custom_status};
use crate::support::fake_model::echo_of;
use crate::support::host::Host;
use crate::support::{client, FakeModel, HostBuilder};

/// The component `sample` in language `lang` ("" for Rust).
fn sample(lang: &str, sample: &str) -> String {
    format!("{lang}{sample}")
}

/// The weather agent's answer through the offline model to a message that
/// calls its tool.
async fn tool_round_trip(lang: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&[&sample(lang, "weather")])
        .start();
    let response = client()
        .post(host.url("/api/agents/weather/run"))
        .body(r#"call get_weather with {"city": "Paris"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", host.output());
    let answer = response.text().await.unwrap();
    let refused = client()
        .post(host.url("/api/agents/weather/run"))
        .body(r#"call get_weather with {"town": "Paris"}"#)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        refused.contains(r#"The tool returned: {"error":"invalid arguments: "#)
            && refused.contains("city"),
        "arguments that do not fit the schema are refused, naming what is wrong: {refused}"
    );
    answer
}

async fn approval_host(dir: &std::path::Path, lang: &str, model: &FakeModel) -> Host {
    HostBuilder::new(dir)
        .components(&["writer", &sample(lang, "approval")])
        .openai(model, "sk")
        .start()
}

async fn awaiting_approval(host: &Host, timeout_seconds: u64) -> String {
    let id = start(
        host,
        "approval",
        &json!({"topic": "tea", "timeout_seconds": timeout_seconds}),
    )
    .await;
    let status = wait_for_custom_status(host, &id, "/state", &json!("awaiting_approval")).await;
    assert_eq!(
        status["customStatus"]["draft"],
        echo_of("Write a short piece about tea.")
    );
    id
}

async fn decide(host: &Host, id: &str, decision: Value) -> u16 {
    client()
        .post(host.url(&format!("/api/approval/{id}")))
        .json(&decision)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn approval_approved(lang: &str) {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = approval_host(dir.path(), lang, &model).await;
    let id = awaiting_approval(&host, 3600).await;
    assert_eq!(decide(&host, &id, json!({"approved": true})).await, 202);
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(
        done["output"],
        json!({"status": "published", "content": echo_of("Write a short piece about tea.")}),
        "{done}"
    );
    assert_eq!(model.requests().len(), 1);
}

async fn approval_rejected(lang: &str) {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = approval_host(dir.path(), lang, &model).await;
    let id = awaiting_approval(&host, 3600).await;
    let feedback = json!({"approved": false, "feedback": "Mention green tea."});
    assert_eq!(decide(&host, &id, feedback).await, 202);
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    let revision = "Revise the piece using this feedback: Mention green tea.";
    assert_eq!(
        done["output"],
        json!({"status": "revised", "content": echo_of(revision)}),
        "{done}"
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].transcript().len(),
        4,
        "the revision sees the draft exchange"
    );
}

async fn approval_timed_out(lang: &str) {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = approval_host(dir.path(), lang, &model).await;
    let id = awaiting_approval(&host, 1).await;
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(
        done["output"],
        json!({"status": "escalated", "content": echo_of("Write a short piece about tea.")}),
        "{done}"
    );
    assert_eq!(decide(&host, &id, json!({"approved": true})).await, 410);
}

/// A start whose input does not match the exported schema is refused with
/// 400 naming the problem, and nothing starts; the schema is shown by
/// `/api/components`.
async fn bad_input_refused_at_start(lang: &str) {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = approval_host(dir.path(), lang, &model).await;
    let components: Value = client()
        .get(host.url("/api/components"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let approval = components["components"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["orchestrations"].as_array().cloned().unwrap_or_default())
        .find(|o| o["name"] == "approval")
        .unwrap();
    assert!(
        approval["input_schema"]["properties"]["topic"].is_object(),
        "{approval}"
    );
    for bad in [
        json!({"topic": 5}),
        json!({"timeout_seconds": 3}),
        json!(null),
    ] {
        let response = client()
            .post(host.url("/api/orchestrators/approval"))
            .json(&bad)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{bad}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], "invalid_input", "{body}");
        assert!(!body["problems"].as_array().unwrap().is_empty(), "{body}");
        let message = body["error"].as_str().unwrap();
        assert!(message.contains("approval"), "{body}");
        if bad != json!(null) {
            assert!(message.contains("topic"), "names the field: {body}");
        }
    }
    assert_eq!(model.requests().len(), 0, "nothing started");
}

async fn kill_9_then_replay(lang: &str) {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let builder = HostBuilder::new(dir.path())
        .components(&["writer", &sample(lang, "approval")])
        .openai(&model, "sk");
    let mut host = builder.start();
    let id = awaiting_approval(&host, 3600).await;
    host.kill();
    let host = builder.start();
    assert_eq!(decide(&host, &id, json!({"approved": true})).await, 202);
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(
        done["output"],
        json!({"status": "published", "content": echo_of("Write a short piece about tea.")}),
        "{done}"
    );
    assert_eq!(model.requests().len(), 1, "the draft was written once");
}

/// Runs the `clock` guest of `lang` beside the Rust `weather` (whose tool
/// it calls); its output.
async fn clock(lang: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["weather", &sample(lang, "clock")])
        .start();
    let id = start(&host, "clock", &json!(null)).await;
    // What the first episode saw, shown while the timer runs.
    let first = loop {
        let (_, body) = status(&host, &id).await;
        if body["customStatus"].is_object() && body["runtimeStatus"] == "Running" {
            break body["customStatus"].clone();
        }
        assert_ne!(
            body["runtimeStatus"], "Completed",
            "the timer was missed: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    let output = done["output"].clone();
    let before = &output["before"];
    assert_eq!(
        first, *before,
        "the last episode replayed what the first saw, it did not read the machine again"
    );
    assert_eq!(
        before["time_ms"], before["now_ms"],
        "the language's clock is the journal's"
    );
    let after = &output["after"];
    assert_eq!(after["time_ms"], after["now_ms"]);
    assert!(
        after["now_ms"].as_u64().unwrap() >= before["now_ms"].as_u64().unwrap() + 2000,
        "the step after the timer has the timer's time: {output}"
    );
    assert_eq!(
        output["weather"][0]["city"], "Paris",
        "another component's tool: {output}"
    );
    assert_eq!(
        output["weather"][1]["city"], "Rome",
        "in the order asked: {output}"
    );

    // An activity no component serves fails the instance with one message.
    let id = start(&host, "unknown_activity", &json!(null)).await;
    let failed = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(failed["runtimeStatus"], "Failed", "{failed}");
    let message = failed["output"].to_string();
    assert!(message.contains("no_such_tool"), "{failed}");
    assert_eq!(
        message.matches("no_such_tool").count(),
        1,
        "said once: {failed}"
    );
    output
}

macro_rules! twins {
    ($lang:ident, $prefix:expr) => {
        mod $lang {
            #[tokio::test(flavor = "multi_thread")]
            async fn weather_tool_round_trip_through_the_offline_model() {
                let answer = super::tool_round_trip($prefix).await;
                assert!(
                    answer.contains(r#"The tool returned: {"city":"Paris","temperature_c":3,"conditions":"windy"}"#),
                    "{answer}"
                );
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn approval_approved_publishes_the_draft() {
                super::approval_approved($prefix).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn approval_rejected_revises_once_on_the_same_session() {
                super::approval_rejected($prefix).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn approval_escalates_when_the_timer_fires_first() {
                super::approval_timed_out($prefix).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn approval_refuses_input_that_does_not_match_its_schema_at_start() {
                super::bad_input_refused_at_start($prefix).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn kill_9_while_awaiting_the_human_then_restart_replays_to_the_same_result() {
                super::kill_9_then_replay($prefix).await;
            }
        }
    };
}

twins!(rust, "");
twins!(python, "python/");
twins!(js, "js/");

#[tokio::test(flavor = "multi_thread")]
async fn python_time_uuid_and_random_in_an_orchestration_come_from_the_journal() {
    let output = clock("python/").await;
    assert_ne!(output["before"]["uuid4"], Value::Null);
}

#[tokio::test(flavor = "multi_thread")]
async fn js_date_now_and_math_random_in_an_orchestration_come_from_the_journal() {
    clock("js/").await;
}

/// An activity name is one component's, like an agent's: a second
/// component declaring it is refused that name (listed among the
/// failures), while its own orchestrations still run their own activity.
#[tokio::test(flavor = "multi_thread")]
async fn a_second_component_declaring_an_activity_name_is_refused_it() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests", "python/clock"])
        .start();
    let body: Value = client()
        .get(host.url("/api/components"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let failures = body["failures"].to_string();
    assert!(
        failures.contains("activity 'instant' is already served by"),
        "{body:#}"
    );
    // `sequence` goes to one of them (name order); it runs its own `instant`.
    let id = start(&host, "sequence", &json!({"n": 3})).await;
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], json!(3), "{done}");
}

/// `agenthost tool call FILE TOOL ARGS`: its stdout, stderr and success.
fn tool_call(file: &str, tool: &str, args: &str) -> (String, String, bool) {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_agenthost"))
        .args(["tool", "call"])
        .arg(crate::support::component(file))
        .args([tool, args])
        .env("AGENTHOST_LOG", "warn")
        .env(
            "AGENTHOST_CACHE_DIR",
            crate::support::host::test_artifact_cache(),
        )
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        output.status.success(),
    )
}

/// What would trap a component (an exception while converting arguments,
/// an async function) is a tool error the model is shown instead. One call
/// per language keeps the machine free for the timing-sensitive tests
/// beside it (the first `tool call` of a component compiles it).
#[test]
fn tool_errors_in_python_and_javascript_are_reported_not_trapped() {
    let (_, err, ok) = tool_call("python/clock", "checked", r#"{"q": {"n": -1}}"#);
    assert!(
        !ok && err.contains("invalid arguments") && err.contains("n must not be negative"),
        "{err}"
    );
    let (_, err, ok) = tool_call("js/clock", "promised", "{}");
    assert!(!ok && err.contains("not a Promise"), "{err}");
}

/// A Python component instantiates 14 core modules (Rust 3, JavaScript 4);
/// the engine's pool held 4 a slot, so with `--max-instances 4` a second
/// Python instance alive at once failed its call ("maximum concurrent limit
/// … for core instances reached", 502) while the host's slots said there
/// was room. One instance now takes as many slots as its modules need (one,
/// here): concurrent episodes and activities wait for a slot, never fail.
#[tokio::test(flavor = "multi_thread")]
async fn python_instances_alive_at_once_never_run_the_engines_pool_out() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["python/clock"])
        .arg("--max-instances")
        .arg("4")
        .start();
    let body: Value = client()
        .get(host.url("/api/components"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["components"][0]["slots_per_instance"],
        json!(1),
        "{body:#}"
    );
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.push(start(&host, "sequence", &json!({"n": 3})).await);
    }
    for id in &ids {
        let done = wait_for(&host, id, &["Completed", "Failed"]).await;
        assert_eq!(done["output"], json!(3), "{done}\n{}", host.output());
    }
    assert!(
        !host.output().contains("concurrent limit"),
        "{}",
        host.output()
    );
}
