//! The session contract callers of Microsoft Agent Framework hosting rely
//! on: every name of the session and the wait flag, conflicts refused with
//! 400, both session headers, camelCase bodies with their snake_case twins,
//! migration headers for the old names, the conversation read back (paged)
//! and deleted, the 14-day default expiry, and the background sweep. Also
//! structured output checked against its schema, with one repair round.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::durable::{start, wait_for};
use crate::support::fake_model::echo_of;
use crate::support::host::Host;
use crate::support::{client, FakeModel, HostBuilder, Reply};

async fn post(host: &Host, query: &str, body: Value) -> reqwest::Response {
    client()
        .post(host.url(&format!("/api/agents/writer/run{query}")))
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_session_name_continues_one_session_and_old_names_get_migration_headers() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let cases: [(&str, Value, bool); 8] = [
        ("", json!({"message": "m0", "sessionId": "s"}), false),
        ("", json!({"message": "m1", "threadId": "s"}), true),
        ("", json!({"message": "m2", "session_id": "s"}), true),
        ("", json!({"message": "m3", "thread_id": "s"}), true),
        ("?sessionId=s", json!({"message": "m4"}), false),
        ("?thread_id=s", json!({"message": "m5"}), true),
        (
            "?sessionId=s",
            json!({"message": "m6", "sessionId": "s"}),
            false,
        ),
        (
            "?session_id=s",
            json!({"message": "m7", "threadId": "s"}),
            true,
        ),
    ];
    for (i, (query, body, deprecated)) in cases.into_iter().enumerate() {
        let response = post(&host, query, body.clone()).await;
        assert_eq!(response.status(), 200, "{query} {body}");
        assert_eq!(header(&response, "x-ms-session-id"), Some("s"));
        assert_eq!(header(&response, "x-ms-thread-id"), Some("s"));
        assert_eq!(
            header(&response, "deprecation").is_some(),
            deprecated,
            "{query} {body}"
        );
        if deprecated {
            assert_eq!(header(&response, "deprecation"), Some("@1767225600"));
            assert!(header(&response, "link")
                .unwrap()
                .contains("rel=\"deprecation\""));
            assert_eq!(
                header(&response, "warning"),
                Some("299 - \"Deprecated agent HTTP field names are supported temporarily; use sessionId and waitForResponse.\"")
            );
        }
        assert_eq!(response.text().await.unwrap(), echo_of(&format!("m{i}")));
    }
    // One conversation: the last request carried all eight exchanges.
    let last = model.requests().last().unwrap().transcript();
    assert_eq!(
        last.len(),
        1 + 8 * 2 - 1,
        "the system message and 15 more: {last:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn conflicting_values_are_refused_with_400_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path()).start();
    let conflicts = [
        (
            "",
            json!({"message": "x", "sessionId": "a", "thread_id": "b"}),
            "conflicting_session_id",
        ),
        (
            "?sessionId=a",
            json!({"message": "x", "sessionId": "b"}),
            "conflicting_session_id",
        ),
        (
            "",
            json!({"message": "x", "waitForResponse": true, "wait_for_response": false}),
            "conflicting_wait_flag",
        ),
        (
            "?waitForResponse=maybe",
            json!({"message": "x"}),
            "invalid_wait_flag",
        ),
    ];
    for (query, body, code) in conflicts {
        let response = post(&host, query, body.clone()).await;
        assert_eq!(response.status(), 400, "{query} {body}");
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["code"], code, "{error}");
        assert_eq!(error["errorCode"], code, "{error}");
        assert!(error["error"].as_str().unwrap().len() > 10, "{error}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_wait_flag_from_header_query_or_body_makes_the_run_asynchronous() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path()).start();
    let asynchronous = [
        ("", json!({"message": "a", "waitForResponse": false}), None),
        ("?waitForResponse=false", json!({"message": "b"}), None),
        (
            "",
            json!({"message": "c", "wait_for_response": false}),
            None,
        ),
        (
            "",
            json!({"message": "d", "waitForCompletion": false}),
            None,
        ),
        // The header wins over the body.
        (
            "",
            json!({"message": "e", "waitForResponse": true}),
            Some("false"),
        ),
    ];
    for (query, body, header_value) in asynchronous {
        let mut request = client()
            .post(host.url(&format!("/api/agents/writer/run{query}")))
            .json(&body);
        if let Some(value) = header_value {
            request = request.header("x-ms-wait-for-response", value);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 202, "{query} {body}");
        let accepted: Value = response.json().await.unwrap();
        assert_eq!(accepted["status"], "accepted");
        assert_eq!(accepted["sessionId"], accepted["thread_id"]);
        assert_eq!(accepted["correlationId"], accepted["correlation_id"]);
        assert_eq!(accepted["streamUrl"], accepted["stream_url"]);
    }
    // The query wins over the body.
    let sync = post(
        &host,
        "?waitForResponse=true",
        json!({"message": "f", "waitForResponse": false}),
    )
    .await;
    assert_eq!(sync.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn json_answers_carry_camel_case_fields_and_their_old_twins() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let answer: Value = client()
        .post(host.url("/api/agents/writer/run"))
        .header("accept", "application/json")
        .json(&json!({"message": "hello", "sessionId": "j"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["status"], "success");
    assert_eq!(answer["response"], echo_of("hello"));
    assert_eq!(answer["agentResponse"], echo_of("hello"));
    assert_eq!(answer["sessionId"], "j");
    assert_eq!(answer["thread_id"], "j");
    assert_eq!(answer["correlationId"], answer["correlation_id"]);
    assert_eq!(answer["messageCount"], 2);
    assert_eq!(answer["message_count"], 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_conversation_is_read_back_in_pages_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    for i in 0..3 {
        let response = post(
            &host,
            "",
            json!({"message": format!("q{i}"), "sessionId": "talk"}),
        )
        .await;
        assert_eq!(response.status(), 200);
    }
    let url = host.url("/api/agents/writer/sessions/talk");
    let first: Value = client()
        .get(format!("{url}?limit=4"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(first["sessionId"], "talk");
    assert_eq!(first["messages"].as_array().unwrap().len(), 4);
    assert_eq!(first["messages"][0]["role"], "user");
    assert_eq!(first["messages"][0]["content"], "q0");
    assert_eq!(first["messages"][1]["content"], echo_of("q0"));
    let next = first["next"].as_i64().unwrap();
    let rest: Value = client()
        .get(format!("{url}?limit=4&after={next}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(rest["messages"].as_array().unwrap().len(), 2);
    assert_eq!(rest["messages"][1]["content"], echo_of("q2"));
    assert!(rest.get("next").is_none(), "{rest}");
    // The route Agent Framework samples read.
    let whole: Value = client()
        .get(host.url("/api/agents/writer/talk"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(whole["messages"].as_array().unwrap().len(), 6);

    let deleted = client().delete(&url).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    assert_eq!(client().get(&url).send().await.unwrap().status(), 404);
    assert_eq!(client().delete(&url).send().await.unwrap().status(), 404);
    // A new message starts over.
    assert_eq!(
        post(&host, "", json!({"message": "again", "sessionId": "talk"}))
            .await
            .status(),
        200
    );
    assert_eq!(
        model.requests().last().unwrap().transcript()[1..],
        ["user: again".to_string()]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_expire_after_14_days_by_default_and_idle_ones_are_swept_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let default = HostBuilder::new(dir.path()).start();
    assert!(
        default.output().contains("session_ttl=Some(1209600s)"),
        "{}",
        default.output()
    );
    drop(default);
    let never = tempfile::tempdir().unwrap();
    let never = HostBuilder::new(never.path())
        .arg("--session-ttl")
        .arg("none")
        .start();
    assert!(
        never.output().contains("session_ttl=None"),
        "{}",
        never.output()
    );

    let swept = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(swept.path())
        .arg("--session-ttl")
        .arg("1s")
        .start();
    assert_eq!(
        post(&host, "", json!({"message": "hi", "sessionId": "brief"}))
            .await
            .status(),
        200
    );
    let url = host.url("/api/agents/writer/sessions/brief");
    assert_eq!(client().get(&url).send().await.unwrap().status(), 200);
    // No request touches it: the sweep alone removes it.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while client().get(&url).send().await.unwrap().status() != 404 {
        assert!(std::time::Instant::now() < deadline, "never swept");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    host.wait_logged("expired idle sessions", 0).await;
}

fn verdict_format() -> Value {
    json!({
        "type": "object",
        "properties": {"is_spam": {"type": "boolean"}, "confidence": {"type": "number"}},
        "required": ["is_spam", "confidence"],
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_structured_answer_that_violates_its_schema_is_repaired_once_then_refused() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let ask = || {
        client()
            .post(host.url("/api/agents/writer/run"))
            .header("accept", "application/json")
            .json(&json!({"message": "judge", "response_format": verdict_format()}))
            .send()
    };
    // Violated once: the repair round shows the model the error.
    model.push(Reply::Text(r#"{"is_spam": "yes"}"#.into()));
    model.push(Reply::Text(
        r#"{"is_spam": true, "confidence": 0.9}"#.into(),
    ));
    let repaired = ask().await.unwrap();
    assert_eq!(repaired.status(), 200);
    let body: Value = repaired.json().await.unwrap();
    assert_eq!(
        body["response"],
        json!({"is_spam": true, "confidence": 0.9})
    );
    let repair = model.requests()[1].last_user_message();
    assert!(
        repair.contains("does not match the required JSON Schema"),
        "{repair}"
    );
    assert!(repair.contains("/is_spam"), "{repair}");

    // Violated twice: 502 naming the first error.
    model.push(Reply::Text(r#"{"confidence": 2}"#.into()));
    model.push(Reply::Text(r#"{"confidence": "high"}"#.into()));
    let refused = ask().await.unwrap();
    assert_eq!(refused.status(), 502);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(error["code"], "invalid_structured_output", "{error}");
    let text = error["error"].as_str().unwrap();
    assert!(
        text.contains("/confidence") && text.contains("repair"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_spam_sample_branches_on_the_repaired_validated_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    // The first verdict lacks its confidence; the repaired one is confident.
    model.push(Reply::Text(
        r#"{"is_spam": true, "reason": "lottery"}"#.into(),
    ));
    model.push(Reply::Text(
        r#"{"is_spam": true, "confidence": 0.99, "reason": "lottery"}"#.into(),
    ));
    let host = HostBuilder::new(dir.path())
        .components(&["spam"])
        .openai(&model, "sk")
        .start();
    let id = start(&host, "spam", &json!({"id": "m", "content": "You won!"})).await;
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["output"]["action"], "blocked", "{done}");
    assert_eq!(
        model.requests().len(),
        2,
        "one repair round, no reply drafted"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn per_agent_settings_reach_the_model_and_the_session_sums_its_usage() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let settings = dir.path().join("agents.toml");
    std::fs::write(
        &settings,
        "[agents.writer]\nmodel = \"gpt-writer\"\ntemperature = 0.2\nmax_output_tokens = 77\n\
         timeout = \"20s\"\nsession_ttl = \"1s\"\n\n[agents.weather]\nsession_ttl = \"none\"\n",
    )
    .unwrap();
    let host = HostBuilder::new(dir.path())
        .openai(&model, "sk")
        .arg("--agent-settings")
        .arg(settings.to_str().unwrap())
        .start();
    for message in ["one", "two"] {
        let response = post(&host, "", json!({"message": message, "sessionId": "tuned"})).await;
        assert_eq!(response.status(), 200);
    }
    let body = &model.requests()[0].body;
    assert_eq!(body["model"], "gpt-writer");
    assert_eq!(
        body["temperature"].as_f64().map(|t| (t * 10.0).round()),
        Some(2.0)
    );
    assert_eq!(body["max_tokens"], 77);
    let session: Value = client()
        .get(host.url("/api/agents/writer/sessions/tuned"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(session["usage"]["total_tokens"], 30, "{session}");
    // The writer's sessions expire after a second; the weather's never (the
    // host's 14 days would keep both).
    let weather = client()
        .post(host.url("/api/agents/weather/run"))
        .json(&json!({"message": "sun?", "sessionId": "kept"}))
        .send()
        .await
        .unwrap();
    assert_eq!(weather.status(), 200);
    let url = host.url("/api/agents/writer/sessions/tuned");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while client().get(&url).send().await.unwrap().status() != 404 {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer's session never expired"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let kept = client()
        .get(host.url("/api/agents/weather/sessions/kept"))
        .send()
        .await
        .unwrap();
    assert_eq!(kept.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agents_own_settings_apply_and_the_operators_win_over_them() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let settings = dir.path().join("agents.toml");
    std::fs::write(&settings, "[agents.tuned]\ntemperature = 0.1\n").unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .openai(&model, "sk")
        .arg("--agent-settings")
        .arg(settings.to_str().unwrap())
        .start();
    let components: Value = client()
        .get(host.url("/api/components"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tuned = components["components"][0]["agents"]
        .as_array()
        .and_then(|a| a.iter().find(|x| x["name"] == "tuned").cloned())
        .unwrap_or_default();
    assert_eq!(tuned["options"]["max_output_tokens"], 55, "{components}");
    let response = client()
        .post(host.url("/api/agents/tuned/run"))
        .json(&json!({"message": "hi", "sessionId": "own"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body = &model.requests()[0].body;
    assert_eq!(body["max_tokens"], 55, "the component's own");
    assert_eq!(
        body["temperature"].as_f64().map(|t| (t * 10.0).round()),
        Some(1.0),
        "the operator's wins"
    );
    // The component's one-second session expiry, swept in the background.
    let url = host.url("/api/agents/tuned/sessions/own");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while client().get(&url).send().await.unwrap().status() != 404 {
        assert!(std::time::Instant::now() < deadline, "never expired");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
