//! `/metrics` moves by exactly what a known workload did: every metric the
//! workload touches must be exposed (a renamed or dropped one fails here, it
//! does not read as 0), and counts the workload determines are asserted
//! exactly.

use std::time::{Duration, Instant};

use serde_json::json;

use super::run;
use crate::support::durable;
use crate::support::host::Host;
use crate::support::{client, FakeModel, HostBuilder, Reply};

type Exposition = openmetrics_parser::MetricsExposition<
    openmetrics_parser::PrometheusType,
    openmetrics_parser::PrometheusValue,
>;

/// The scraped metrics, parsed by a Prometheus text-format parser.
async fn scrape(host: &Host) -> Exposition {
    let response = client().get(host.url("/metrics")).send().await.unwrap();
    let text = crate::support::prometheus_text(response).await;
    openmetrics_parser::prometheus::parse_prometheus(&text)
        .unwrap_or_else(|e| panic!("/metrics does not parse: {e:?}\n{text}"))
}

/// The value of a counter or gauge, or the count of a histogram, summed over
/// the samples whose labels include `labels`. The metric must be exposed (a
/// missing one fails the test); a label set it has no sample for is 0, as
/// Prometheus reads it (no run failed: no `outcome="failed"` sample).
fn value(scrape: &Exposition, name: &str, labels: &[(&str, &str)]) -> f64 {
    assert!(
        scrape.families.contains_key(name),
        "{name} is not exposed; exposed: {:?}",
        scrape.families.keys().collect::<Vec<_>>()
    );
    value_if_any(scrape, name, labels)
}

/// [`value`], or 0 for a metric not (yet) exposed: for the scrape taken
/// before the workload, when nothing may have recorded it.
fn value_if_any(scrape: &Exposition, name: &str, labels: &[(&str, &str)]) -> f64 {
    use openmetrics_parser::PrometheusValue;
    let Some(family) = scrape.families.get(name) else {
        return 0.0;
    };
    family
        .iter_samples()
        .filter(|s| {
            let set = s.get_labelset().unwrap();
            labels
                .iter()
                .all(|(k, v)| set.get_label_value(k) == Some(*v))
        })
        .map(|s| match &s.value {
            PrometheusValue::Counter(c) => c.value.as_f64(),
            PrometheusValue::Gauge(n) | PrometheusValue::Unknown(n) => n.as_f64(),
            PrometheusValue::Histogram(h) => h.count.unwrap_or(0) as f64,
            PrometheusValue::Summary(_) => 0.0,
        })
        .sum()
}

/// Every label value of every sample.
fn label_values(scrape: &Exposition) -> Vec<String> {
    scrape
        .families
        .values()
        .flat_map(|f| f.iter_samples())
        .flat_map(|s| {
            s.get_labelset()
                .unwrap()
                .iter_values()
                .cloned()
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Scrapes until gauge `name` reads `expected` (the engine gets there a
/// moment after the request that caused it answered).
async fn gauge_reaches(host: &Host, name: &str, expected: f64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = value(&scrape(host).await, name, &[]);
        if now == expected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} is {now}, not {expected}, after 20 s\n{}",
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Series that used to appear only at their first sample are exported at
/// zero, with their HELP, by a host that has done nothing yet: the take-over
/// and lease counters, the stream followers, and the activity times of each
/// activity a loaded component declares.
#[tokio::test(flavor = "multi_thread")]
async fn quiet_series_are_exported_at_zero_with_their_help_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .start();
    let response = client().get(host.url("/metrics")).send().await.unwrap();
    let text = crate::support::prometheus_text(response).await;
    for name in [
        "agenthost_lease_renewals_total",
        "agenthost_take_overs_total",
        "agenthost_stream_followers",
        "agenthost_activity_seconds",
    ] {
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "no HELP for {name}:\n{text}"
        );
    }
    let scraped = openmetrics_parser::prometheus::parse_prometheus(&text).unwrap();
    for name in ["agenthost_take_overs_total", "agenthost_stream_followers"] {
        assert_eq!(value(&scraped, name, &[]), 0.0, "{name}");
    }
    // A host on a shared hub renews its lease from its start: counted from 0.
    let renewals = value(&scraped, "agenthost_lease_renewals_total", &[]);
    if crate::support::host::test_store().is_none() {
        assert_eq!(renewals, 0.0, "a SQLite host holds no lease");
    }
    // An activity of the component, at zero calls, ok and failed.
    for outcome in ["ok", "failed"] {
        let line = format!(
            "agenthost_activity_seconds_count{{activity=\"instant\",outcome=\"{outcome}\"}} 0"
        );
        assert!(text.contains(&line), "no `{line}`:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_move_by_what_a_known_workload_did() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "weather", "orchestration-tests"])
        .openai(&model, "sk-test")
        .start();
    let before = scrape(&host).await;
    assert_eq!(
        value(
            &before,
            "agenthost_component_loads_total",
            &[("outcome", "loaded")]
        ),
        3.0
    );

    // N = 3 runs of the writer, one model request each.
    for i in 0..3 {
        model.push(Reply::Text(format!("answer {i}")));
        run(&host, "writer", &format!("question {i}")).await;
    }
    // K = 2 tool calls: two weather runs, each one tool round (two requests).
    for city in ["Paris", "Oslo"] {
        model.push(Reply::ToolCall(
            "get_weather".into(),
            json!({ "city": city }),
        ));
        model.push(Reply::Text(format!("Weather in {city}.")));
        run(&host, "weather", city).await;
    }
    // M = 2 orchestrations of three activities each, and one that fails.
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(durable::start(&host, "sequence", &json!({"n": 3})).await);
    }
    let failing = durable::start(&host, "failing", &json!(null)).await;
    for id in &ids {
        durable::wait_for(&host, id, &["Completed"]).await;
    }
    durable::wait_for(&host, &failing, &["Failed"]).await;

    let after = scrape(&host).await;
    let moved = |name: &str, labels: &[(&str, &str)]| {
        value(&after, name, labels) - value_if_any(&before, name, labels)
    };
    let runs = "agenthost_runs_total";
    assert_eq!(
        moved(runs, &[("agent", "writer"), ("outcome", "completed")]),
        3.0
    );
    assert_eq!(
        moved(runs, &[("agent", "weather"), ("outcome", "completed")]),
        2.0
    );
    assert_eq!(moved(runs, &[("outcome", "failed")]), 0.0);
    assert_eq!(moved(runs, &[]), 5.0);
    let tokens = "agenthost_model_tokens_total";
    assert_eq!(
        moved(tokens, &[("agent", "writer"), ("kind", "prompt")]),
        30.0
    );
    assert_eq!(
        moved(tokens, &[("agent", "weather"), ("kind", "completion")]),
        20.0
    );
    assert_eq!(
        moved("agenthost_model_call_seconds", &[("agent", "weather")]),
        4.0
    );
    assert_eq!(
        moved("agenthost_model_call_seconds", &[("agent", "writer")]),
        3.0
    );
    assert_eq!(
        moved(
            "agenthost_tool_call_seconds",
            &[("tool", "get_weather"), ("outcome", "ok")]
        ),
        2.0
    );
    assert_eq!(
        moved(
            "agenthost_activity_seconds",
            &[("activity", "instant"), ("outcome", "ok")]
        ),
        6.0
    );
    let orchestrations = "agenthost_orchestrations_total";
    assert_eq!(
        moved(
            orchestrations,
            &[("orchestration", "sequence"), ("event", "started")]
        ),
        2.0
    );
    assert_eq!(
        moved(
            orchestrations,
            &[("orchestration", "sequence"), ("event", "completed")]
        ),
        2.0
    );
    assert_eq!(
        moved(
            orchestrations,
            &[("orchestration", "failing"), ("event", "failed")]
        ),
        1.0
    );
    // One episode to start each sequence, one for each activity's result.
    assert_eq!(
        moved("agenthost_episodes_total", &[("orchestration", "sequence")]),
        8.0
    );
    // Group commit: batches vary with timing, but there were some.
    assert!(moved("agenthost_journal_commit_batch_size", &[]) >= 1.0);
    assert!(moved("agenthost_journal_commit_seconds", &[]) >= 1.0);
    let requests = "agenthost_http_requests_total";
    assert_eq!(
        moved(
            requests,
            &[
                ("route", "/api/agents/{name}/run"),
                ("method", "POST"),
                ("status", "200")
            ]
        ),
        5.0
    );
    assert_eq!(
        moved(
            requests,
            &[("route", "/api/orchestrators/{name}"), ("status", "202")]
        ),
        3.0
    );
    assert_eq!(value(&after, "agenthost_approvals_pending", &[]), 0.0);
    // Nothing waits: every instance is over, no caller is waiting.
    assert_eq!(value(&after, "agenthost_waiting_instances", &[]), 0.0);
    assert_eq!(value(&after, "agenthost_inbox_events", &[]), 0.0);
    assert_eq!(value(&after, "agenthost_waiting_callers", &[]), 0.0);

    // Ids never become labels: paths of unknown routes count as one.
    for i in 0..5 {
        client()
            .get(host.url(&format!("/no/such/{i}")))
            .send()
            .await
            .unwrap();
    }
    let last = scrape(&host).await;
    let labelled_by_path = label_values(&last)
        .iter()
        .any(|v| v.starts_with("/no/") || ids.iter().any(|id| v.contains(id.as_str())));
    assert!(!labelled_by_path, "a label holds a path or an id");
    assert_eq!(
        value(
            &last,
            requests,
            &[("route", "unmatched"), ("status", "404")]
        ),
        5.0
    );

    // Orchestration code names agents and activities freely: one nobody
    // serves or declares is counted under `unknown`, never as a label of its
    // own.
    let named = durable::start(
        &host,
        "call_named",
        &json!({"agent": "nobody-123", "activity": "nothing-456"}),
    )
    .await;
    let done = durable::wait_for(&host, &named, &["Completed"]).await;
    assert_eq!(
        done["output"],
        json!({"agent": false, "activity": false}),
        "{done}"
    );
    let named_after = scrape(&host).await;
    let values = label_values(&named_after);
    assert!(
        !values
            .iter()
            .any(|v| v.contains("nobody-123") || v.contains("nothing-456")),
        "{values:?}"
    );
    assert_eq!(
        value(
            &named_after,
            "agenthost_activity_seconds",
            &[("activity", "unknown")]
        ),
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_instance_waiting_and_the_events_in_its_inbox_are_gauged() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .start();
    gauge_reaches(&host, "agenthost_waiting_instances", 0.0).await;
    gauge_reaches(&host, "agenthost_inbox_events", 0.0).await;

    // It waits for `go`; two events it does not wait for stay in its inbox.
    let id = durable::start(&host, "wait_event", &json!(null)).await;
    durable::wait_for(&host, &id, &["Running"]).await;
    gauge_reaches(&host, "agenthost_waiting_instances", 1.0).await;
    for n in 0..2 {
        assert_eq!(durable::raise(&host, &id, "other", &json!(n)).await, 202);
    }
    gauge_reaches(&host, "agenthost_inbox_events", 2.0).await;
    assert_eq!(
        value(&scrape(&host).await, "agenthost_waiting_instances", &[]),
        1.0
    );

    // Given `go`, it completes: nothing waits, nothing is left in an inbox.
    assert_eq!(durable::raise(&host, &id, "go", &json!("done")).await, 202);
    durable::wait_for(&host, &id, &["Completed"]).await;
    gauge_reaches(&host, "agenthost_waiting_instances", 0.0).await;
    gauge_reaches(&host, "agenthost_inbox_events", 0.0).await;
}
