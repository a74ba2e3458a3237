//! Every sample orchestration end to end over HTTP against the fake model.

use serde_json::{json, Value};

use crate::support::durable::{start, wait_for};
use crate::support::fake_model::echo_of;
use crate::support::fake_model::Recorded;
use crate::support::{client, FakeModel, HostBuilder, Reply};

#[tokio::test(flavor = "multi_thread")]
async fn chaining_improves_the_sentence_on_the_same_session_and_starts_from_its_alias() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::Text("Learning lights the way.".into()));
    model.push(Reply::Text("Learning lights every step of the way.".into()));
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "chaining"])
        .openai(&model, "sk")
        .start();
    // The declared alias `writer/run` starts it, with the Durable Functions response shape.
    let response = client()
        .post(host.url("/api/writer/run"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let location = response.headers()["location"].to_str().unwrap().to_string();
    let body: Value = response.json().await.unwrap();
    let id = body["id"].as_str().unwrap().to_string();
    assert_eq!(location, body["statusQueryGetUri"]);
    assert!(
        location.starts_with("http://127.0.0.1:")
            && location.ends_with(&format!("/runtime/webhooks/durabletask/instances/{id}"))
    );
    for (key, suffix) in [
        ("sendEventPostUri", "/raiseEvent/{eventName}"),
        ("terminatePostUri", "/terminate?reason={text}"),
        ("suspendPostUri", "/suspend?reason={text}"),
        ("resumePostUri", "/resume?reason={text}"),
        ("purgeHistoryDeleteUri", ""),
    ] {
        assert_eq!(body[key], format!("{location}{suffix}"), "{key}");
    }

    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(done["output"], "Learning lights every step of the way.");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[0].last_user_message(),
        "Write a concise inspirational sentence about learning."
    );
    // The second call is on the same session: it carries the first exchange.
    assert_eq!(
        requests[1].transcript()[1..],
        [
            "user: Write a concise inspirational sentence about learning.".to_string(),
            "assistant: Learning lights the way.".to_string(),
            "user: Improve this further while keeping it under 25 words: Learning lights the way."
                .to_string(),
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn parallel_asks_every_expert_at_once_and_keeps_their_order() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["scientists", "parallel"])
        .openai(&model, "sk")
        .start();
    let response = client()
        .post(host.url("/api/orchestration/run"))
        .json(&json!({"question": "Why is ice slippery?"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let id = response.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(
        done["output"],
        json!([
            {"agent": "physicist", "answer": echo_of("Why is ice slippery?")},
            {"agent": "chemist", "answer": echo_of("Why is ice slippery?")},
        ]),
        "{done}"
    );
    let mut systems: Vec<String> = model
        .requests()
        .iter()
        .map(|r| r.messages()[0]["content"].as_str().unwrap().to_string())
        .collect();
    systems.sort();
    assert!(
        systems[0].starts_with("You are a chemist")
            && systems[1].starts_with("You are a physicist"),
        "{systems:?}"
    );
}

/// Runs the `spam` orchestration on `email` with the model answering
/// `replies` in order; returns the finished status and the model's requests.
async fn run_spam(replies: &[&str], email: Value) -> (Value, Vec<Recorded>) {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    for reply in replies {
        model.push(Reply::Text(reply.to_string()));
    }
    let host = HostBuilder::new(dir.path())
        .components(&["spam"])
        .openai(&model, "sk")
        .start();
    let id = start(&host, "spam", &email).await;
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    (done, model.requests())
}

#[tokio::test(flavor = "multi_thread")]
async fn spam_is_blocked_when_the_detector_is_confident() {
    let verdict = r#"{"is_spam": true, "confidence": 0.97, "reason": "lottery scam"}"#;
    let (done, requests) = run_spam(
        &[verdict],
        json!({"id": "mail-1", "content": "You won a lottery!"}),
    )
    .await;
    assert_eq!(done["output"]["action"], "blocked", "{done}");
    assert_eq!(
        done["output"]["result"],
        json!({"blocked": "mail-1", "reason": "lottery scam"})
    );
    assert_eq!(requests.len(), 1, "no reply is drafted for spam");
    // The detector was asked for the structured verdict's schema.
    let schema = &requests[0].body["response_format"]["json_schema"]["schema"];
    assert_eq!(schema["properties"]["is_spam"]["type"], "boolean");
    assert_eq!(schema["properties"]["confidence"]["type"], "number");
}

#[tokio::test(flavor = "multi_thread")]
async fn legitimate_mail_gets_a_drafted_reply_that_is_sent() {
    // Spam, but not confidently: a reply is drafted all the same.
    let verdict = r#"{"is_spam": true, "confidence": 0.5, "reason": "unsure"}"#;
    let email = json!({"id": "mail-2", "content": "Meeting on Monday?"});
    let (done, requests) = run_spam(&[verdict, "Thanks, see you Monday."], email).await;
    assert_eq!(done["output"]["action"], "replied", "{done}");
    assert_eq!(done["output"]["reply"], "Thanks, see you Monday.");
    assert_eq!(
        done["output"]["result"],
        json!({"sent": "mail-2", "characters": 23})
    );
    assert!(requests[1].messages()[0]["content"]
        .as_str()
        .unwrap()
        .contains("polite"));
}

// `approval` (approved, rejected, timed out) runs in tests/languages.rs,
// beside its Python and JavaScript twins.
