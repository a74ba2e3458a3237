//! Runs an instance's tasks: activities in its component, agent calls through
//! the same run queue and session store as HTTP runs. Retries follow the
//! call's policy; the outcome goes to the instance's inbox in the same
//! transaction that removes the task, so it is delivered exactly once.

use std::time::Duration;

use super::journal::{Call, Event};
use super::Orchestrator;
use crate::agents::normalize_response_format;
use crate::store::{now_ms, NewRun, RunStatus, SessionKey, TaskRow};

enum Outcome {
    Done(Result<String, String>),
    /// The host is stopping: leave the task for the next start.
    Interrupted,
}

/// What became of a task, so the orchestrator wakes only who must act.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Its outcome is in the instance's inbox: the instance has work.
    Delivered,
    /// It failed and waits for its next attempt: the scheduler must know when.
    Retrying,
    /// Nothing was recorded (host stopping, store error): it runs again later.
    Left,
}

pub async fn run(orchestrator: &Orchestrator, row: TaskRow) -> Settled {
    let outcome = match &row.call {
        Call::CallActivity { name, input, .. } => activity(orchestrator, &row, name, input).await,
        Call::CallAgent {
            agent,
            message,
            session,
            response_schema,
            ..
        } => {
            agent_call(
                orchestrator,
                &row,
                agent,
                message,
                session.as_deref(),
                response_schema.as_deref(),
            )
            .await
        }
        other => Outcome::Done(Err(format!(
            "{} is not a task the worker runs",
            other.describe()
        ))),
    };
    let result = match outcome {
        Outcome::Interrupted => return Settled::Left,
        Outcome::Done(result) => result,
    };
    let store = &orchestrator.store;
    let (task, instance) = (row.task, row.instance_id.as_str());
    let retry = match &row.call {
        Call::CallActivity { retry, .. } | Call::CallAgent { retry, .. } => *retry,
        _ => None,
    };
    let (settled, written) = match result {
        Ok(result) => {
            let event = Event::TaskCompleted { task, result };
            (
                Settled::Delivered,
                store.complete_task(instance, task, &event).await,
            )
        }
        Err(error) => match retry.and_then(|policy| policy.delay_after(row.attempt)) {
            Some(delay) => {
                tracing::info!(instance_id = %instance, task, attempt = row.attempt + 1, delay_ms = delay, %error, "task failed; retrying");
                let due = now_ms() + i64::try_from(delay).unwrap_or(i64::MAX / 2);
                (
                    Settled::Retrying,
                    store.retry_task(instance, task, row.attempt + 1, due).await,
                )
            }
            None => {
                let event = Event::TaskFailed { task, error };
                (
                    Settled::Delivered,
                    store.complete_task(instance, task, &event).await,
                )
            }
        },
    };
    match written {
        Ok(()) => settled,
        Err(e) => {
            tracing::error!(instance_id = %instance, task, error = %e, "could not record the task's outcome; it runs again");
            Settled::Left
        }
    }
}

async fn activity(orchestrator: &Orchestrator, row: &TaskRow, name: &str, input: &str) -> Outcome {
    // Activities run in the instance's own version of the component.
    let component = match orchestrator
        .registry
        .pinned(&row.component_digest, &row.orchestration)
        .await
    {
        Ok(component) => component,
        Err(e) if e.is_transient() => {
            tracing::warn!(instance_id = %row.instance_id, error = %e, "cannot load the instance's component version now; the activity runs later");
            return Outcome::Interrupted;
        }
        Err(e) => return Outcome::Done(Err(e.to_string())),
    };
    tracing::debug!(instance_id = %row.instance_id, activity = name, "running activity");
    Outcome::Done(
        match orchestrator
            .runtime
            .invoke_activity(&component, name, input)
            .await
        {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(failure)) => Err(format!("activity '{name}' failed: {failure}")),
            Err(guest) => Err(guest.to_string()),
        },
    )
}

/// Agent calls are runs like any other: stored before they execute, resumed
/// after a crash. The correlation id is derived from the task, so a restart
/// finds the run it already started (or finished) instead of asking again.
async fn agent_call(
    orchestrator: &Orchestrator,
    row: &TaskRow,
    agent: &str,
    message: &str,
    session: Option<&str>,
    response_schema: Option<&str>,
) -> Outcome {
    let correlation_id = format!("{}:{}:{}", row.instance_id, row.task, row.attempt);
    let store = &orchestrator.store;
    match store.run(&correlation_id).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            let response_format = match response_schema.map(serde_json::from_str).transpose() {
                Ok(schema) => match schema.map(normalize_response_format).transpose() {
                    Ok(format) => format.flatten(),
                    Err(e) => return Outcome::Done(Err(format!("invalid response schema: {e}"))),
                },
                Err(e) => {
                    return Outcome::Done(Err(format!("the response schema is not JSON: {e}")))
                }
            };
            let run = NewRun {
                correlation_id: correlation_id.clone(),
                session: SessionKey {
                    agent: agent.to_string(),
                    session_id: session.map_or_else(|| correlation_id.clone(), str::to_string),
                },
                message: message.to_string(),
                response_format,
            };
            if let Err(e) = orchestrator.runs.submit(run).await {
                return Outcome::Done(Err(e.to_string()));
            }
        }
        Err(e) => return Outcome::Done(Err(e.to_string())),
    }
    loop {
        let waited = tokio::select! {
            waited = orchestrator.runs.wait_for(&correlation_id, Duration::from_secs(60)) => waited,
            () = orchestrator.stopping.cancelled() => return Outcome::Interrupted,
        };
        match waited {
            Ok(Some(run)) if run.status == RunStatus::Completed => {
                return Outcome::Done(Ok(run.response.unwrap_or_default()))
            }
            Ok(Some(run)) => {
                let error = run.error.unwrap_or_else(|| "the run failed".into());
                return Outcome::Done(Err(format!("agent '{agent}' failed: {error}")));
            }
            Ok(None) => continue,
            Err(e) => return Outcome::Done(Err(e.to_string())),
        }
    }
}
