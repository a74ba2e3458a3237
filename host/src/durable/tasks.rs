//! Runs an instance's tasks: activities in its component, agent calls through
//! the same run queue and session store as HTTP runs. The result goes to the
//! committer, where the core decides: deliver, retry, or drop as stale.

use super::given_back;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use super::Orchestrator;
use crate::agents::normalize_response_format;
use crate::core::ids;
use crate::core::journal::Call;
use crate::core::sdk_history;
use crate::registry::ActivityLookup;
use crate::sdk_workers::Answer;
use crate::store::{NewRun, RunStatus, SessionKey, StoreError, TaskRow};
use crate::wasm::{ActivityFailure, GuestError, LoadedComponent, SendGate};

pub use super::task_outcome::Outcome;

pub async fn run(orchestrator: &Orchestrator, row: &TaskRow) -> Outcome {
    // In the trace of the request that started the instance (read only
    // when traces are exported: one more read per task otherwise wasted).
    let span = crate::telemetry::traced(|| {
        tracing::info_span!(
            "task",
            instance_id = %row.instance_id,
            task = row.task,
            call = %row.call.describe()
        )
    });
    if crate::telemetry::exporting() {
        match orchestrator
            .store
            .instance_traceparent(&row.instance_id)
            .await
        {
            Ok(traceparent) => crate::telemetry::continue_trace(&span, traceparent.as_deref()),
            Err(e) => tracing::debug!(error = %e, "the instance's trace could not be read"),
        }
    }
    run_task(orchestrator, row).instrument(span).await
}

async fn run_task(orchestrator: &Orchestrator, row: &TaskRow) -> Outcome {
    match &row.call {
        Call::CallActivity { name, input, .. } => activity(orchestrator, row, name, input).await,
        Call::CallAgent {
            agent,
            message,
            session,
            response_schema,
            ..
        } => {
            agent_call(
                orchestrator,
                row,
                agent,
                message,
                session.as_deref(),
                response_schema.as_deref(),
            )
            .await
        }
        Call::CallRemoteAgent {
            card_url,
            message,
            context_id,
            ..
        } => {
            let call = super::remote_call::RemoteCall {
                card_url,
                message,
                context_id: context_id.as_deref(),
            };
            super::remote_call::run(orchestrator, row, call).await
        }
        other => Outcome::Done(Err(format!(
            "{} is not a task the worker runs",
            other.describe()
        ))),
    }
}

async fn activity(orchestrator: &Orchestrator, row: &TaskRow, name: &str, input: &str) -> Outcome {
    // Activities run in the instance's own version of the component; an
    // SDK worker's orchestration has none, and calls activities by name.
    let own = if sdk_history::is_sdk(&row.component_digest) {
        None
    } else {
        match super::task_outcome::instance_component(orchestrator, row, "the activity").await {
            Ok(component) => Some(component),
            Err(outcome) => return outcome,
        }
    };
    // Its own component's activity, else one another component serves (by
    // its name, or `component/activity`), in the version the instance
    // pinned when it started.
    let (component, name) = match own.filter(|c| c.manifest.activity(name).is_some()) {
        Some(component) => (component, name.to_string()),
        None => match other_component_activity(orchestrator, row, name).await {
            Ok(found) => found,
            Err(ActivityLookup::Later(why)) => {
                tracing::warn!(instance_id = %row.instance_id, activity = name, %why, "cannot reach the pinned activity version now; the activity runs later");
                return Outcome::Interrupted;
            }
            Err(ActivityLookup::Refused(why)) => {
                // Only a bare name no component has goes to SDK workers: a
                // gated activity, or a version no longer kept, is refused
                // as it was.
                let unknown = !name.contains('/') && !orchestrator.registry.has_activity(name);
                if unknown {
                    if let Some(outcome) = sdk_activity(orchestrator, row, name, input).await {
                        return outcome;
                    }
                }
                // Counted as a failed call, under `unknown`: names orchestration
                // code makes up are never labels.
                crate::metrics::activity("unknown", std::time::Duration::ZERO, false);
                let waited = orchestrator.config.sdk_patience.for_a_worker;
                return Outcome::Done(Err(if waited.is_zero() || !unknown {
                    why
                } else {
                    format!(
                        "{why}, and no Durable Task SDK worker connected within {}s",
                        waited.as_secs()
                    )
                }));
            }
        },
    };
    let name = name.as_str();
    tracing::debug!(instance_id = %row.instance_id, activity = name, "running activity");
    let started = std::time::Instant::now();
    let ran = orchestrator
        .runtime
        .invoke_activity(&component, name, input, send_gate(orchestrator, row))
        .instrument(crate::telemetry::traced(|| {
            tracing::info_span!("activity", activity = name)
        }))
        .await;
    // Orchestration code may call any name: only declared ones are labels.
    let label = match component.manifest.activity(name) {
        Some(_) => name,
        None => "unknown",
    };
    crate::metrics::activity(label, started.elapsed(), matches!(ran, Ok(Ok(_))));
    if let Err(GuestError::HeldBack { .. }) = ran {
        // Not the activity's failure: the task is another host's now, or
        // this one's again once its lease holds.
        tracing::warn!(instance_id = %row.instance_id, task = row.task, activity = name, "the activity's request was held back: the task may have been taken over; its result is not kept");
        return Outcome::Interrupted;
    }
    Outcome::Done(match ran {
        Ok(Ok(output)) => Ok(output),
        Ok(Err(ActivityFailure::NotFound(_))) => Err(format!(
            "component '{}' has no activity named '{name}'",
            component.name
        )),
        Ok(Err(failure)) => Err(format!("activity '{name}' failed: {failure}")),
        Err(guest) => Err(guest.to_string()),
    })
}

/// On a shared hub, what an activity's outbound requests ask first: whether
/// the task is still this host's, and until when its lease lets a request
/// leave ([`crate::store::Store::task_send_by`]). A host paused past its
/// lease mid-activity may have lost the task to another host, which ran it
/// and the steps after it: a request sent on waking would repeat a
/// completed step. `None` on a store no other host shares.
fn send_gate(orchestrator: &Orchestrator, row: &TaskRow) -> Option<SendGate> {
    orchestrator.store.owner_id()?;
    let (store, row) = (orchestrator.store.clone(), row.clone());
    Some(Arc::new(move || {
        let (store, row) = (store.clone(), row.clone());
        Box::pin(async move {
            store.task_send_by(&row).await.unwrap_or_else(|e| {
                tracing::warn!(instance_id = %row.instance_id, task = row.task, error = %e, "whether the task is still this host's could not be read; its request is held back");
                None
            })
        })
    }))
}

/// An activity no component serves, run by a connected Durable Task SDK
/// worker; `None` when no worker is (or connects in time).
async fn sdk_activity(
    orchestrator: &Orchestrator,
    row: &TaskRow,
    name: &str,
    input: &str,
) -> Option<Outcome> {
    let task_id = i32::try_from(row.task).unwrap_or(i32::MAX);
    let started = std::time::Instant::now();
    let answer = orchestrator
        .sdk_workers
        .run_activity(name, input, &row.instance_id, row.execution, task_id)
        .await?;
    let key = format!(
        "task:{}:{}:{}:{}",
        row.instance_id, row.execution, row.task, row.attempt
    );
    Some(match answer {
        Answer::Abandoned if orchestrator.given_back.again(&key) => {
            tracing::warn!(instance_id = %row.instance_id, activity = name, "SDK workers gave the activity back {} times in a row; it fails", given_back::LIMIT);
            Outcome::Done(Err(format!(
                "SDK workers gave activity '{name}' back {} times in a row (each gave it back, went away with it, or did not answer within --sdk-activity-timeout; an answer past 32 MiB never reaches the host)",
                given_back::LIMIT
            )))
        }
        Answer::Done(result) => {
            orchestrator.given_back.answered(&key);
            // Names are the worker's, not declared by a component: no label.
            crate::metrics::activity("unknown", started.elapsed(), result.is_ok());
            match result {
                Ok(result) => Outcome::Done(Ok(result)),
                Err(error) => Outcome::Reported(error),
            }
        }
        Answer::Abandoned => {
            tracing::info!(instance_id = %row.instance_id, activity = name, "an SDK worker gave the activity back (or went away); it runs again");
            Outcome::Interrupted
        }
    })
}

/// The version of another component that runs activity `name` for the
/// task's instance: the one of the activity set it started with.
async fn other_component_activity(
    orchestrator: &Orchestrator,
    row: &TaskRow,
    name: &str,
) -> Result<(Arc<LoadedComponent>, String), ActivityLookup> {
    let set = orchestrator
        .store
        .instance_activity_set(&row.instance_id)
        .await
        .map_err(|e| ActivityLookup::Later(e.to_string()))?;
    orchestrator
        .registry
        .pinned_activity_provider(set.as_deref(), name)
        .await
}

/// Agent calls are runs like any other: stored before they execute, resumed
/// after a crash. The correlation id is derived from the execution, task and
/// attempt, so a restart finds the run it already started (or finished)
/// instead of asking again, and a new execution never finds an old one's.
async fn agent_call(
    orchestrator: &Orchestrator,
    row: &TaskRow,
    agent: &str,
    message: &str,
    session: Option<&str>,
    response_schema: Option<&str>,
) -> Outcome {
    let correlation_id =
        ids::agent_call_correlation(&row.instance_id, row.execution, row.task, row.attempt);
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
            let caller = match store.instance(&row.instance_id).await {
                Ok(instance) => {
                    agent_call_caller(&row.instance_id, instance.and_then(|i| i.caller))
                }
                Err(e) => return store_unavailable(row, &e),
            };
            let run = NewRun {
                correlation_id: correlation_id.clone(),
                session: SessionKey {
                    agent: agent.to_string(),
                    session_id: session.map_or_else(|| correlation_id.clone(), str::to_string),
                },
                message: message.to_string(),
                response_format,
                traceparent: crate::telemetry::current_traceparent(),
                caller: Some(caller),
            };
            match orchestrator.runs.submit(run).await {
                Ok(_) => {}
                // The conversation is someone else's: the code's own error,
                // not the store's (asking again would meet the same refusal).
                Err(refused @ StoreError::SessionOfAnother { .. }) => {
                    return Outcome::Done(Err(format!(
                        "{refused} (an orchestration continues only conversations it started, or its starter's)"
                    )))
                }
                Err(e) => return store_unavailable(row, &e),
            }
        }
        Err(e) => return store_unavailable(row, &e),
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
            // A human decides on a tool call: the run goes on afterwards.
            Ok(Some(run)) if run.status == RunStatus::AwaitingApproval => continue,
            Ok(Some(run)) if run.status == RunStatus::Canceled => {
                return Outcome::Done(Err(format!(
                    "the call of agent '{agent}' was canceled (its run '{correlation_id}' was stopped at a caller's request)"
                )));
            }
            Ok(Some(run)) => {
                let error = run.error.unwrap_or_else(|| "the run failed".into());
                return Outcome::Done(Err(format!("agent '{agent}' failed: {error}")));
            }
            Ok(None) => continue,
            Err(e) => return store_unavailable(row, &e),
        }
    }
}

/// Whom an orchestration's agent call acts for, as its run records it: the
/// invoke key that started the instance, else the instance itself. So a
/// conversation the call names is one the instance started, or (with keys)
/// one of its starter's (the store's rule, `store::run_tx::continues`, applied where
/// the run is stored): a component cannot join a conversation of another
/// caller's, whatever session id its code names, and a key cannot read
/// another key's through an orchestration it starts.
fn agent_call_caller(instance_id: &str, owner: Option<String>) -> String {
    owner.unwrap_or_else(|| format!("instance:{instance_id}"))
}

/// The store could not be read or written (a connection gone, a deadline
/// passed): that is not the agent's failure, and must not become the
/// orchestration's. The task stays due and runs again; its run, already
/// stored under the same correlation id, is not started twice.
fn store_unavailable(row: &TaskRow, error: &StoreError) -> Outcome {
    tracing::warn!(instance_id = %row.instance_id, task = row.task, %error, "the store is unavailable; the agent call is looked at again later");
    Outcome::Interrupted
}
