//! Microsoft Agent Framework's agent sessions (`@dafx-{agent}@{session}`
//! entities) of a wasm agent this host serves, run by the host itself:
//! each `run` is a run of the agent in its session here, so an Agent
//! Framework client runs a wasm agent by name and the conversation is the
//! one the HTTP API continues with that session id.

use std::time::Duration;

use super::Orchestrator;
use crate::core::dafx::{self, RunRequest};
use crate::core::sdk_entities::{BatchResult, Operation, StateAfter};
use crate::store::{NewRun, RunStatus, SessionKey, StoreError};

/// An Agent Framework session of a wasm agent: each `run` is a run of the
/// agent in its session `key` here (the conversation an HTTP caller with
/// that session id continues), stored before it executes under an id the
/// operation names, so a batch run again after a crash finds it.
pub(super) struct AgentSession<'a> {
    pub(super) agent: String,
    pub(super) key: &'a str,
}

impl AgentSession<'_> {
    /// The batch's results and the state after it; `None` when the host is
    /// stopping or the store is unavailable (the batch runs again).
    pub(super) async fn run(
        &self,
        orchestrator: &Orchestrator,
        mut state: Option<String>,
        operations: &[Operation],
    ) -> Option<BatchResult> {
        let mut results = Vec::with_capacity(operations.len());
        for operation in operations {
            let result = match operation.operation.as_str() {
                "run" => match RunRequest::parse(operation.input.as_deref()) {
                    Some(request) => {
                        let answer = self.ask(orchestrator, operation, &request).await?;
                        let at = humantime::format_rfc3339_millis(std::time::SystemTime::now())
                            .to_string();
                        state = Some(dafx::with_exchange(
                            state.as_deref(),
                            &self.agent,
                            &request,
                            &answer,
                            &at,
                        ));
                        answer.map(|text| dafx::response(&self.agent, &text))
                    }
                    None => Err("the run request has no message or correlationId".to_string()),
                },
                "reset" => {
                    state = None;
                    Ok("null".to_string())
                }
                other => Err(format!("agent '{}' has no operation '{other}'", self.agent)),
            };
            results.push(result);
        }
        Some(BatchResult {
            results,
            state: state.map_or(StateAfter::Deleted, StateAfter::Set),
            actions: Vec::new(),
        })
    }

    /// The agent's answer, or why it failed; `None` when it cannot be had
    /// now.
    async fn ask(
        &self,
        orchestrator: &Orchestrator,
        operation: &Operation,
        request: &RunRequest,
    ) -> Option<Result<String, String>> {
        let correlation_id = format!("dafx:{}:{}", self.key, operation.request_id);
        let store = &orchestrator.store;
        let unavailable = |e: StoreError| {
            tracing::warn!(error = %e, agent = %self.agent, "the store is unavailable; the agent session's batch runs again later");
        };
        match store.run(&correlation_id).await {
            Ok(Some(_)) => {}
            Ok(None) => {
                let run = NewRun {
                    correlation_id: correlation_id.clone(),
                    session: SessionKey {
                        agent: self.agent.clone(),
                        session_id: self.key.to_string(),
                    },
                    message: request.message.clone(),
                    response_format: None,
                    traceparent: None,
                    caller: None,
                };
                if let Err(e) = orchestrator.runs.submit(run).await {
                    unavailable(e);
                    return None;
                }
            }
            Err(e) => {
                unavailable(e);
                return None;
            }
        }
        loop {
            let waited = tokio::select! {
                waited = orchestrator.runs.wait_for(&correlation_id, Duration::from_secs(60)) => waited,
                () = orchestrator.stopping.cancelled() => return None,
            };
            match waited {
                Ok(Some(run)) if run.status == RunStatus::Completed => {
                    return Some(Ok(run.response.unwrap_or_default()))
                }
                Ok(Some(run)) if run.status == RunStatus::AwaitingApproval => continue,
                Ok(Some(run)) if run.status == RunStatus::Canceled => {
                    return Some(Err(format!(
                        "the run of agent '{}' was canceled",
                        self.agent
                    )))
                }
                Ok(Some(run)) => {
                    let error = run.error.unwrap_or_else(|| "the run failed".into());
                    return Some(Err(format!("agent '{}' failed: {error}", self.agent)));
                }
                Ok(None) => continue,
                Err(e) => {
                    unavailable(e);
                    return None;
                }
            }
        }
    }
}
