//! What an operator sees and keeps: `/metrics` moves by exactly what a known
//! workload did (in `metrics`), finished work is deleted once past
//! `--retain`, traces and logs carry what they should.

mod metrics;

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::durable::{self, instance_url};
use crate::support::host::Host;
use crate::support::{client, FakeModel, HostBuilder, Reply};

async fn run(host: &Host, agent: &str, message: &str) {
    let response = client()
        .post(host.url(&format!("/api/agents/{agent}/run")))
        .body(message.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn finished_work_is_deleted_past_its_retention_and_unfinished_work_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    model.push(Reply::Text("kept for two seconds".into()));
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "orchestration-tests"])
        .openai(&model, "sk-test")
        .arg("--retain")
        .arg("2s")
        .start();
    let response = client()
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "hello", "waitForResponse": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let accepted: Value = response.json().await.unwrap();
    let run_url = host.url(&format!(
        "/api/agents/writer/runs/{}",
        accepted["correlation_id"].as_str().unwrap()
    ));
    let done = durable::start(&host, "sequence", &json!({"n": 1})).await;
    durable::wait_for(&host, &done, &["Completed"]).await;
    // Waits for an event that never comes: older than the retention, kept.
    let waiting = durable::start(&host, "wait_event", &json!(null)).await;
    durable::wait_for(&host, &waiting, &["Running"]).await;

    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let instance = client()
            .get(instance_url(&host, &done))
            .send()
            .await
            .unwrap();
        let run = client().get(&run_url).send().await.unwrap();
        if instance.status() == 404 && run.status() == 404 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still there after 20 s: instance {}, run {}\n{}",
            instance.status(),
            run.status(),
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (_, body) = durable::status(&host, &waiting).await;
    assert_eq!(body["runtimeStatus"], "Running", "{body}");
    assert!(host
        .output()
        .contains("deleted finished work past its retention"));
}

/// An OTLP/HTTP (JSON) collector stand-in: keeps every span it receives.
struct Collector {
    port: u16,
    spans: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
}

async fn collector() -> Collector {
    let spans = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                let export: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                let mut kept = kept.lock().unwrap();
                for resource in export["resourceSpans"].as_array().into_iter().flatten() {
                    for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                        kept.extend(scope["spans"].as_array().into_iter().flatten().cloned());
                    }
                }
                axum::Json(json!({}))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    Collector { port, spans }
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a str> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?["value"]["stringValue"]
        .as_str()
}

/// Whether `span` descends from the span `ancestor` (ids within one trace).
fn descends(spans: &[Value], span: &Value, ancestor: &str) -> bool {
    let mut current = span.clone();
    for _ in 0..32 {
        let parent = current["parentSpanId"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if parent == ancestor {
            return true;
        }
        match spans.iter().find(|s| s["spanId"] == parent.as_str()) {
            Some(next) => current = next.clone(),
            None => return false,
        }
    }
    false
}

#[tokio::test(flavor = "multi_thread")]
async fn each_run_is_one_trace_with_its_model_and_tool_spans_and_an_orchestration_carries_the_callers_trace(
) {
    let dir = tempfile::tempdir().unwrap();
    let collector = collector().await;
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "weather", "orchestration-tests"])
        .openai(&model, "sk-test")
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            &format!("http://127.0.0.1:{}", collector.port),
        )
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .start();
    let (caller_trace, caller_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    // A run whose caller sends its trace: one tool round, two model requests.
    model.push(Reply::ToolCall(
        "get_weather".into(),
        json!({"city": "Paris"}),
    ));
    model.push(Reply::Text("Mild.".into()));
    let response = client()
        .post(host.url("/api/agents/weather/run"))
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .body("Paris?")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    // A run without: a trace of its own.
    model.push(Reply::Text("Hello.".into()));
    run(&host, "writer", "hi").await;
    // An orchestration started in a caller's trace calls an agent.
    let orchestration_trace = "0af7651916cd43dd8448eb211c80319c";
    model.push(Reply::Text("From the orchestration.".into()));
    let started = client()
        .post(host.url("/api/orchestrators/ask_writer"))
        .header(
            "traceparent",
            format!("00-{orchestration_trace}-b7ad6b7169203331-01"),
        )
        .json(&json!("write something"))
        .send()
        .await
        .unwrap();
    assert_eq!(started.status(), 202);
    let id = started.json::<Value>().await.unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    durable::wait_for(&host, &id, &["Completed"]).await;

    // Spans are sent in batches: wait for the three runs' spans.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let spans = loop {
        let spans = collector.spans.lock().unwrap().clone();
        let runs = spans.iter().filter(|s| s["name"] == "run").count();
        if runs >= 3 {
            break spans;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{runs} run spans after 20 s: {spans:#?}\n{}",
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let in_trace = |trace: &str| -> Vec<Value> {
        spans
            .iter()
            .filter(|s| s["traceId"] == trace)
            .cloned()
            .collect()
    };
    let named = |spans: &[Value], name: &str| -> Vec<Value> {
        spans
            .iter()
            .filter(|s| s["name"] == name)
            .cloned()
            .collect()
    };

    // The caller's trace holds its request, its run, and the run's model
    // and tool spans as the run's descendants.
    let caller = in_trace(caller_trace);
    let request = named(&caller, "http.request");
    assert_eq!(request.len(), 1, "{caller:#?}");
    assert_eq!(request[0]["parentSpanId"], caller_span);
    let run_span = named(&caller, "run");
    assert_eq!(run_span.len(), 1, "{caller:#?}");
    assert_eq!(attribute(&run_span[0], "agent"), Some("weather"));
    let run_id = run_span[0]["spanId"].as_str().unwrap();
    let model_calls = named(&caller, "model.call");
    let tool_calls = named(&caller, "tool.call");
    assert_eq!((model_calls.len(), tool_calls.len()), (2, 1), "{caller:#?}");
    for span in model_calls.iter().chain(&tool_calls) {
        assert!(descends(&caller, span, run_id), "{span:#}");
    }
    assert_eq!(attribute(&tool_calls[0], "tool"), Some("get_weather"));

    // The run without a caller's trace is a trace of its own, rooted at its
    // request.
    let writer_run = spans
        .iter()
        .find(|s| {
            s["name"] == "run"
                && attribute(s, "agent") == Some("writer")
                && s["traceId"] != orchestration_trace
        })
        .unwrap();
    let own = in_trace(writer_run["traceId"].as_str().unwrap());
    assert_ne!(writer_run["traceId"], caller_trace);
    let root = named(&own, "http.request");
    assert_eq!(root.len(), 1, "{own:#?}");
    assert!(
        root[0]["parentSpanId"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{root:#?}"
    );
    assert_eq!(named(&own, "model.call").len(), 1);

    // The orchestration's episode and its agent call's run are in the trace
    // its caller sent.
    let orchestration = in_trace(orchestration_trace);
    assert!(
        !named(&orchestration, "episode").is_empty(),
        "{orchestration:#?}"
    );
    let agent_call = named(&orchestration, "run");
    assert_eq!(agent_call.len(), 1, "{orchestration:#?}");
    assert_eq!(attribute(&agent_call[0], "agent"), Some("writer"));
    assert_eq!(named(&orchestration, "model.call").len(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn json_logs_are_one_object_a_line_and_agenthost_log_picks_the_lines() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .arg("--log-format")
        .arg("json")
        .env("AGENTHOST_LOG", "warn,agenthost::server=info")
        .start();
    run(&host, "writer", "hello").await;
    let output = host.output();
    let logs: Vec<Value> = output
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(!logs.is_empty(), "{output}");
    for log in &logs {
        assert!(
            log["timestamp"].is_string() && log["fields"].is_object(),
            "{log}"
        );
        let level = log["level"].as_str().unwrap_or_default();
        // Info lines only from the module the filter opened.
        assert!(
            level != "INFO" || log["target"] == "agenthost::server",
            "{log}"
        );
    }
    assert!(logs
        .iter()
        .any(|l| l["target"] == "agenthost::server" && l["level"] == "INFO"));
}
