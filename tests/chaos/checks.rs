//! What the suite checks of each acknowledged item, from outside.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::Item;
use crate::support::client;
use crate::support::fake_model::echo_of;

/// What checking one item found besides its result.
#[derive(Default)]
pub(super) struct Checked {
    /// A run's message and when its run ended (ms).
    pub(super) ended: Option<(String, i64)>,
    pub(super) stream_failed: bool,
    pub(super) broken_session: Option<String>,
}

/// Waits for `item` to finish and checks its result; `Err` says how it was
/// lost (not finished, or finished wrong).
pub(super) async fn check(base: &str, item: &Item, limit: Duration) -> Result<Checked, String> {
    let deadline = Instant::now() + limit;
    match item {
        Item::Instance { id, output } => {
            let at = instance_done(base, id, output, deadline).await?;
            // An agent call's message: `question i` (see `submit_one`).
            let i: usize = id.trim_start_matches("chaos-").parse().unwrap_or(0);
            Ok(Checked {
                ended: (i % 8 == 3).then(|| (format!("question {i}"), at)),
                ..Checked::default()
            })
        }
        Item::Waiter { id, payload } => {
            instance_done(base, id, &json!(payload), deadline).await?;
            Ok(Checked::default())
        }
        Item::Run {
            agent,
            id,
            message,
            session,
        } => run_done(base, agent, id, message, session.as_deref(), deadline).await,
    }
}

/// When the instance completed with `output`.
pub(super) async fn instance_done(
    base: &str,
    id: &str,
    output: &Value,
    deadline: Instant,
) -> Result<i64, String> {
    let url = format!("{base}/runtime/webhooks/durabletask/instances/{id}");
    loop {
        let body: Value = match client().get(&url).send().await {
            Ok(response) => response.json().await.unwrap_or_default(),
            Err(_) => Value::Null,
        };
        match body["runtimeStatus"].as_str() {
            Some("Completed") if &body["output"] == output => {
                return Ok(body["lastUpdatedTime"]
                    .as_str()
                    .and_then(chrono_ms)
                    .unwrap_or(i64::MAX))
            }
            Some("Completed" | "Failed" | "Terminated") => {
                return Err(format!("{id} ended wrong: {body}"))
            }
            _ if Instant::now() > deadline => return Err(format!("{id} never finished: {body}")),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

pub(super) async fn run_done(
    base: &str,
    agent: &str,
    id: &str,
    message: &str,
    session: Option<&str>,
    deadline: Instant,
) -> Result<Checked, String> {
    let url = format!("{base}/api/agents/{agent}/runs/{id}");
    let run = loop {
        let run: Value = match client().get(&url).send().await {
            Ok(response) => response.json().await.unwrap_or_default(),
            Err(_) => Value::Null,
        };
        match run["status"].as_str() {
            Some("completed" | "failed") => break run,
            _ if Instant::now() > deadline => {
                return Err(format!("run {id} never finished: {run}"))
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let answer = run["response"].as_str().unwrap_or_default().to_string();
    let right = match agent {
        "writer" => answer == echo_of(message),
        _ => answer.starts_with("tool said: "),
    };
    if run["status"] != "completed" || !right {
        return Err(format!("run {id} ended wrong: {run}"));
    }
    let mut checked = Checked {
        ended: run["updated_at"]
            .as_str()
            .and_then(chrono_ms)
            .map(|at| (message.to_string(), at)),
        ..Checked::default()
    };
    let stream = client()
        .get(format!("{url}/stream"))
        .header("accept", "text/plain")
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .map_err(|e| format!("stream of {id}: {e:?}"))?;
    match stream.status().as_u16() {
        200 => {
            let text = stream.text().await.unwrap_or_default();
            if text != answer {
                return Err(format!(
                    "stream of {id} reads {text:?}, its answer is {answer:?}"
                ));
            }
        }
        502 => {
            let error: Value = stream.json().await.unwrap_or_default();
            if !error.to_string().contains("lost entries") {
                return Err(format!("stream of {id} failed: {error}"));
            }
            checked.stream_failed = true;
        }
        other => return Err(format!("stream of {id} answered {other}")),
    }
    if let Some(session) = session {
        let conversation: Value = client()
            .get(format!("{base}/api/agents/{agent}/sessions/{session}"))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .unwrap_or_default();
        let roles: Vec<&str> = conversation["messages"]
            .as_array()
            .map(|m| m.iter().filter_map(|m| m["role"].as_str()).collect())
            .unwrap_or_default();
        // One run: the question, tool rounds, then the answer, last.
        let last_answer = roles.iter().rposition(|r| *r == "assistant");
        let tool_after = last_answer.is_some_and(|at| roles[at..].contains(&"tool"));
        if roles.first() != Some(&"user") || roles.last() != Some(&"assistant") || tool_after {
            checked.broken_session = Some(format!("{session}: {roles:?}"));
        }
    }
    Ok(checked)
}

/// Milliseconds of an RFC 3339 time.
pub(super) fn chrono_ms(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}
