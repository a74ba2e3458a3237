//! The durable management API: every endpoint and status code, plus events,
//! suspend/resume, sub-orchestrations, continue-as-new, retries and limits.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::durable::{
    instance_url, raise, start, status, wait_for, wait_for_custom_status,
};
use crate::support::fake_model::echo_of;
use crate::support::{client, get_json, FakeModel, HostBuilder, Reply};

fn test_host(dir: &std::path::Path) -> crate::support::host::Host {
    HostBuilder::new(dir)
        .components(&["orchestration-tests"])
        .arg("--max-payload-bytes")
        .arg("4096")
        .start()
}

#[tokio::test(flavor = "multi_thread")]
async fn status_raise_event_and_their_status_codes() {
    let dir = tempfile::tempdir().unwrap();
    let host = test_host(dir.path());
    let http = client();

    // Start with a chosen id; a second start with that id while it runs is 409.
    let started = http
        .post(host.url("/api/orchestrators/wait_event/order-7"))
        .json(&json!({"n": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);
    let again = http
        .post(host.url("/api/orchestrators/wait_event/order-7"))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409);
    assert_eq!(
        again.json::<Value>().await.unwrap()["code"],
        "instance_exists"
    );

    let unknown = http
        .post(host.url("/api/orchestrators/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    let body: Value = unknown.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("wait_event"),
        "names the registered ones: {body}"
    );

    let running = wait_for_custom_status(&host, "order-7", "", &json!("waiting")).await;
    let (code, _) = status(&host, "order-7").await;
    assert_eq!(code, 202, "running instances answer 202");
    assert_eq!(running["name"], "wait_event");
    assert_eq!(running["instanceId"], "order-7");
    assert_eq!(running["input"], json!({"n": 1}));
    assert!(running["createdTime"].as_str().unwrap().ends_with('Z'));
    assert!(running["lastUpdatedTime"].is_string());
    assert!(running["componentDigest"]
        .as_str()
        .unwrap()
        .starts_with("sha256:"));
    let no_input: Value = get_json(format!(
        "{}?showInput=false",
        instance_url(&host, "order-7")
    ))
    .await;
    assert!(no_input.get("input").is_none());

    // raiseEvent: a body that is not JSON is 400; unknown instance 404; then 202.
    let bad = http
        .post(format!("{}/raiseEvent/go", instance_url(&host, "order-7")))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    assert_eq!(raise(&host, "missing", "go", &json!(1)).await, 404);
    assert_eq!(
        raise(&host, "order-7", "go", &json!({"ok": true})).await,
        202
    );
    let done = wait_for(&host, "order-7", &["Completed"]).await;
    assert_eq!(done["output"], json!({"ok": true}));
    let (code, _) = status(&host, "order-7").await;
    assert_eq!(code, 200, "finished instances answer 200");
    assert_eq!(
        raise(&host, "order-7", "go", &json!(1)).await,
        410,
        "raising on a finished instance is 410"
    );

    let history: Value = get_json(format!(
        "{}?showHistory=true",
        instance_url(&host, "order-7")
    ))
    .await;
    let events = history["historyEvents"].as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["call"] == "wait_for_event" && e["name"] == "go"),
        "{history}"
    );
    assert!(
        events.iter().any(|e| e["event"] == "event_raised"),
        "{history}"
    );
    assert_eq!(status(&host, "missing").await.0, 404);

    // Starting again with the id of a finished instance replaces it.
    let restarted = http
        .post(host.url("/api/orchestrators/wait_event/order-7"))
        .send()
        .await
        .unwrap();
    assert_eq!(restarted.status(), 202);
}

#[tokio::test(flavor = "multi_thread")]
async fn events_raised_before_the_wait_are_buffered_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let host = test_host(dir.path());
    let id = start(&host, "two_events", &json!(null)).await;
    assert_eq!(raise(&host, &id, "step", &json!("first")).await, 202);
    assert_eq!(raise(&host, &id, "step", &json!("second")).await, 202);
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], json!(["first", "second"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn suspended_instances_keep_events_until_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let host = test_host(dir.path());
    let http = client();
    let id = start(&host, "wait_event", &json!(null)).await;
    wait_for_custom_status(&host, &id, "", &json!("waiting")).await;
    let url = instance_url(&host, &id);
    assert_eq!(
        http.post(format!("{url}/suspend?reason=maintenance"))
            .send()
            .await
            .unwrap()
            .status(),
        202
    );
    assert_eq!(status(&host, &id).await.1["runtimeStatus"], "Suspended");
    assert_eq!(
        raise(&host, &id, "go", &json!("while suspended")).await,
        202
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    let (code, body) = status(&host, &id).await;
    assert_eq!(
        (code, body["runtimeStatus"].as_str()),
        (202, Some("Suspended")),
        "the event waits: {body}"
    );
    assert_eq!(
        http.post(format!("{url}/resume"))
            .send()
            .await
            .unwrap()
            .status(),
        202
    );
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], "while suspended");
    for op in ["suspend", "resume", "terminate"] {
        assert_eq!(
            http.post(format!("{url}/{op}"))
                .send()
                .await
                .unwrap()
                .status(),
            410,
            "{op} on a finished instance"
        );
        let missing = http
            .post(format!("{}/{op}", instance_url(&host, "missing")))
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status(), 404, "{op} on an unknown instance");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn terminate_ends_an_instance_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let host = test_host(dir.path());
    let id = start(&host, "wait_event", &json!(null)).await;
    wait_for_custom_status(&host, &id, "", &json!("waiting")).await;
    let response = client()
        .post(format!(
            "{}/terminate?reason=no%20longer%20needed",
            instance_url(&host, &id)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let (code, body) = status(&host, &id).await;
    assert_eq!(code, 200);
    assert_eq!(body["runtimeStatus"], "Terminated");
    assert_eq!(body["output"], "no longer needed");
    assert_eq!(raise(&host, &id, "go", &json!(1)).await, 410);
}

#[tokio::test(flavor = "multi_thread")]
async fn list_filters_pages_and_purges() {
    let dir = tempfile::tempdir().unwrap();
    let host = test_host(dir.path());
    let http = client();
    for i in 0..3 {
        let r = http
            .post(host.url(&format!("/api/orchestrators/child/batch-{i}")))
            .json(&json!(i))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
    }
    let waiting = start(&host, "wait_event", &json!(null)).await;
    for i in 0..3 {
        wait_for(&host, &format!("batch-{i}"), &["Completed"]).await;
    }
    wait_for_custom_status(&host, &waiting, "", &json!("waiting")).await;
    let base = host.url("/runtime/webhooks/durabletask/instances");

    let all = get_json::<Vec<Value>>(&base).await;
    assert_eq!(all.len(), 4);
    let completed = get_json::<Vec<Value>>(format!("{base}?runtimeStatus=Completed")).await;
    assert_eq!(completed.len(), 3);
    let both = get_json::<Vec<Value>>(format!("{base}?runtimeStatus=Completed,Running")).await;
    assert_eq!(both.len(), 4);
    let prefixed = get_json::<Vec<Value>>(format!("{base}?instanceIdPrefix=batch-")).await;
    assert_eq!(prefixed.len(), 3);
    let future =
        get_json::<Vec<Value>>(format!("{base}?createdTimeFrom=2999-01-01T00:00:00Z")).await;
    assert!(future.is_empty());
    let past = get_json::<Vec<Value>>(format!("{base}?createdTimeTo=2000-01-01T00:00:00Z")).await;
    assert!(past.is_empty());
    assert_eq!(
        http.get(format!("{base}?runtimeStatus=Sleeping"))
            .send()
            .await
            .unwrap()
            .status(),
        400
    );

    // Pages of two, following the continuation token.
    let first = http.get(format!("{base}?top=2")).send().await.unwrap();
    let token = first.headers()["x-ms-continuation-token"]
        .to_str()
        .unwrap()
        .to_string();
    let page1: Vec<Value> = first.json().await.unwrap();
    let second = http
        .get(format!("{base}?top=2"))
        .header("x-ms-continuation-token", &token)
        .send()
        .await
        .unwrap();
    assert!(
        second.headers().get("x-ms-continuation-token").is_none(),
        "the last page has no token"
    );
    let page2: Vec<Value> = second.json().await.unwrap();
    let ids: Vec<&str> = page1
        .iter()
        .chain(&page2)
        .map(|i| i["instanceId"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 4);
    assert_eq!(
        ids.iter().collect::<std::collections::BTreeSet<_>>().len(),
        4,
        "no instance on two pages"
    );

    // By orchestration name; newest first, pages going back in time (the
    // dashboard's order): the reverse of the oldest-first listing.
    let named = get_json::<Vec<Value>>(format!("{base}?name=child")).await;
    assert_eq!(named.len(), 3);
    assert!(named.iter().all(|i| i["name"] == "child"), "{named:?}");
    assert!(get_json::<Vec<Value>>(format!("{base}?name=chil"))
        .await
        .is_empty());
    let mut newest = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut request = http.get(format!("{base}?top=3&newestFirst=true"));
        if let Some(token) = &token {
            request = request.header("x-ms-continuation-token", token);
        }
        let page = request.send().await.unwrap();
        token = page
            .headers()
            .get("x-ms-continuation-token")
            .map(|t| t.to_str().unwrap().to_string());
        newest.extend(page.json::<Vec<Value>>().await.unwrap());
        if token.is_none() {
            break;
        }
    }
    let reversed: Vec<&Value> = all.iter().rev().collect();
    assert_eq!(
        newest.iter().map(|i| &i["instanceId"]).collect::<Vec<_>>(),
        reversed
            .iter()
            .map(|i| &i["instanceId"])
            .collect::<Vec<_>>()
    );

    // Purge: one finished instance, an unknown one, a running one, then by filter.
    let one = http
        .delete(instance_url(&host, "batch-0"))
        .send()
        .await
        .unwrap();
    assert_eq!(one.status(), 200);
    assert_eq!(
        one.json::<Value>().await.unwrap(),
        json!({"instancesDeleted": 1})
    );
    assert_eq!(status(&host, "batch-0").await.0, 404);
    assert_eq!(
        http.delete(instance_url(&host, "batch-0"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        http.delete(instance_url(&host, &waiting))
            .send()
            .await
            .unwrap()
            .status(),
        409
    );
    let many = http
        .delete(format!("{base}?runtimeStatus=Completed"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        many.json::<Value>().await.unwrap(),
        json!({"instancesDeleted": 2})
    );
    let left = get_json::<Vec<Value>>(&base).await;
    assert_eq!(left.len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn sub_orchestrations_continue_as_new_and_failures() {
    let dir = tempfile::tempdir().unwrap();
    let host = test_host(dir.path());
    let parent = start(&host, "parent", &json!({"x": 1})).await;
    let done = wait_for(&host, &parent, &["Completed", "Failed"]).await;
    assert_eq!(
        done["output"],
        json!({"child said": {"echo": {"x": 1}}}),
        "{done}"
    );
    // A child's id is derived from its parent's id, execution and task.
    let children = get_json::<Vec<Value>>(host.url(&format!(
        "/runtime/webhooks/durabletask/instances?instanceIdPrefix={parent}:"
    )))
    .await;
    assert_eq!(children.len(), 1, "{children:?}");
    let child = children[0]["instanceId"].as_str().unwrap_or_default();
    assert!(child.ends_with(":0"), "{child}");
    assert_eq!(
        status(&host, child).await.1["runtimeStatus"],
        "Completed",
        "the child is an instance too"
    );

    let counter = start(&host, "counter", &json!({"count": 0, "until": 3})).await;
    let done = wait_for(&host, &counter, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], 3, "{done}");
    assert_eq!(
        done["input"],
        json!({"count": 3, "until": 3}),
        "the last execution's input"
    );

    let failing = start(&host, "failing", &json!(null)).await;
    let done = wait_for(&host, &failing, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Failed");
    assert_eq!(done["output"], "the orchestration gave up");

    let activity = start(&host, "failing_activity", &json!(null)).await;
    let done = wait_for(&host, &activity, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Failed");
    assert!(
        done["output"]
            .as_str()
            .unwrap()
            .contains("this activity always fails"),
        "{done}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn payloads_over_the_limit_are_refused_with_a_hint_to_pass_a_reference() {
    let dir = tempfile::tempdir().unwrap();
    let host = test_host(dir.path());
    let big = "y".repeat(5000);
    let response = client()
        .post(host.url("/api/orchestrators/wait_event"))
        .json(&json!(big))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 413);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("reference"),
        "{body}"
    );

    let id = start(&host, "big_output", &json!(5000)).await;
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Failed");
    let error = done["output"].as_str().unwrap();
    assert!(
        error.contains("output") && error.contains("4096") && error.contains("reference"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_agent_call_is_retried_by_its_policy() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    for _ in 0..5 {
        model.push(Reply::Status(500, Some(0)));
    }
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "orchestration-tests"])
        .openai(&model, "sk")
        .start();
    let id = start(&host, "retrying_agent", &json!("try hard")).await;
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], echo_of("try hard"), "{done}");
    assert_eq!(
        model.requests().len(),
        6,
        "five failed attempts of the first run, one of the retry"
    );
}
