//! A tool round: the calls of the model's last message that have no result
//! yet run in the component. A call of a tool marked `always-require` runs
//! only once a human approved it; a denied one gives the model the refusal
//! and its reason as the tool's result; an undecided one leaves the run
//! waiting (the caller stores the request and ends the episode of the run:
//! no instance or thread is held while a human decides).
//!
//! Each result is stored as soon as its tool returns: a crash between two
//! tools of a round re-runs only those without a stored result. A result
//! over `--max-tool-result-bytes` is replaced by a tool error saying its
//! size before it is stored or sent.

use std::collections::HashMap;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{AgentError, AgentRunner, Turn};
use crate::core::chat::{ChatMessage, Role, ToolCall};
use crate::core::fence::SessionFence;
use crate::registry::ServedAgent;
use crate::store::{Decision, PendingCall, SessionKey, StoreError, StoredMessage};
use crate::wasm::{Approval, GuestError, HeldBack};

impl AgentRunner {
    /// Runs the calls of the last assistant message that have no result
    /// yet, as far as decisions allow.
    /// Each result goes into `turn` and is stored at once (with `fence`);
    /// returns the calls that wait for a human's decision.
    pub(super) async fn tool_round(
        &self,
        agent: &ServedAgent,
        turn: &mut Turn<'_>,
        session: &SessionKey,
        fence: Option<&SessionFence>,
        stop: &CancellationToken,
    ) -> Result<Vec<PendingCall>, AgentError> {
        let correlation_id = turn.correlation_id;
        let history = turn.messages();
        let mut pending = Vec::new();
        let Some(at) = history.iter().rposition(|m| m.role == Role::Assistant) else {
            return Ok(pending);
        };
        let answered: Vec<&str> = history[at + 1..]
            .iter()
            .filter_map(|m| m.tool_call_id.as_deref())
            .collect();
        let calls: Vec<&ToolCall> = history[at]
            .tool_calls
            .iter()
            .filter(|c| !answered.contains(&c.id.as_str()))
            .collect();
        let needs_approval = |call: &ToolCall| {
            approval_of(agent, &call.function.name) == Some(Approval::AlwaysRequire)
        };
        let decisions: HashMap<String, Decision> = if calls.iter().any(|c| needs_approval(c)) {
            self.store
                .decisions(correlation_id)
                .await?
                .into_iter()
                .collect()
        } else {
            HashMap::new()
        };
        for call in calls {
            // Stopped between two calls: the ones left get no result here
            // (the run's end closes them).
            if stop.is_cancelled() {
                return Err(super::canceled(turn));
            }
            // A tool acts outside the store: a host that lost the session
            // (paused past its lease) must not run it after the new owner.
            if let Some(held) = fence {
                if !self.store.still_holds(session, held).await? {
                    return Err(StoreError::Fenced {
                        session: session.session_id.clone(),
                    }
                    .into());
                }
            }
            let content = if needs_approval(call) {
                match decisions.get(&call.id) {
                    Some(Decision { approved: true, .. }) => {
                        self.call_tool(agent, call, session, fence).await?
                    }
                    Some(Decision {
                        approved: false,
                        reason,
                    }) => {
                        tracing::info!(tool = %call.function.name, call_id = %call.id, "a human denied the tool call");
                        tool_error(&match reason {
                            Some(reason) => format!(
                                "a human denied this call of '{}': {reason}",
                                call.function.name
                            ),
                            None => format!("a human denied this call of '{}'", call.function.name),
                        })
                    }
                    None => {
                        pending.push(PendingCall {
                            call_id: call.id.clone(),
                            tool: call.function.name.clone(),
                            arguments: call.function.arguments.clone(),
                        });
                        continue;
                    }
                }
            } else {
                self.call_tool(agent, call, session, fence).await?
            };
            turn.push(ChatMessage::tool_result(call.id.clone(), content));
            turn.save(&self.store, session, fence).await?;
        }
        Ok(pending)
    }

    /// A tool's failure is told to the model (it may recover); a guest that
    /// traps or runs out of time fails the run. On a shared hub the tool's
    /// outbound requests carry the session's send-by check, as the run's
    /// model requests do: a host paused inside the tool past its lease does
    /// not send on waking what the session's new owner may have sent.
    async fn call_tool(
        &self,
        agent: &ServedAgent,
        call: &ToolCall,
        session: &SessionKey,
        fence: Option<&SessionFence>,
    ) -> Result<String, AgentError> {
        let name = &call.function.name;
        let Some(_) = approval_of(agent, name) else {
            return Ok(tool_error(&format!("there is no tool named '{name}'")));
        };
        tracing::info!(agent = %agent.spec.name, tool = %name, "calling tool");
        let arguments = if call.function.arguments.trim().is_empty() {
            "{}"
        } else {
            &call.function.arguments
        };
        let started = std::time::Instant::now();
        let sending = self.send_check(session, fence);
        let called = self
            .runtime
            .invoke_activity(&agent.component, name, arguments, sending.check.clone())
            .instrument(crate::telemetry::traced(
                || tracing::info_span!("tool.call", tool = %name),
            ))
            .await;
        crate::metrics::tool_call(name, started.elapsed(), matches!(called, Ok(Ok(_))));
        // As a model request held back: the session is another host's (the
        // run stops, fenced), or this host's lease ran out (the run waits
        // for it and runs again).
        if let Err(GuestError::HeldBack { why, .. }) = called {
            return Err(match why {
                HeldBack::Lost => sending.refusal(session),
                HeldBack::Late => StoreError::LeaseLapsed {
                    session: session.session_id.clone(),
                },
            }
            .into());
        }
        let content = match called? {
            Ok(result) => result,
            Err(failure) => tool_error(&failure.to_string()),
        };
        Ok(bounded(name, content, self.window.max_tool_result_bytes))
    }
}

/// `content`, or a tool error saying its size when it is over `max` bytes:
/// a result that large is neither sent to the model nor stored (it was
/// sent whole, megabytes at a time, and kept in the session for every
/// later request).
fn bounded(tool: &str, content: String, max: usize) -> String {
    if content.len() <= max {
        return content;
    }
    tracing::warn!(
        tool = %tool,
        bytes = content.len(),
        max,
        "a tool result over --max-tool-result-bytes was refused to the model"
    );
    tool_error(&format!(
        "the result of '{tool}' was {} bytes, over the host's limit of {max} bytes \
         (--max-tool-result-bytes): it was not sent; ask for less",
        content.len()
    ))
}

/// The approval mode of one of the agent's tools; `None` when the agent has
/// no such tool.
fn approval_of(agent: &ServedAgent, name: &str) -> Option<Approval> {
    agent
        .spec
        .tools
        .iter()
        .any(|t| t == name)
        .then(|| agent.component.manifest.activity(name))
        .flatten()
        .map(|activity| activity.approval)
}

/// The calls of the last assistant message that have no result.
pub(super) fn unanswered_calls(history: &[StoredMessage]) -> Vec<&ToolCall> {
    let Some(at) = history
        .iter()
        .rposition(|m| m.message.role == Role::Assistant)
    else {
        return Vec::new();
    };
    let answered: Vec<&str> = history[at + 1..]
        .iter()
        .filter_map(|m| m.message.tool_call_id.as_deref())
        .collect();
    history[at]
        .message
        .tool_calls
        .iter()
        .filter(|c| !answered.contains(&c.id.as_str()))
        .collect()
}

pub(super) fn has_unanswered_calls(history: &[ChatMessage]) -> bool {
    let Some(at) = history.iter().rposition(|m| m.role == Role::Assistant) else {
        return false;
    };
    let answered = history[at + 1..]
        .iter()
        .filter(|m| m.role == Role::Tool)
        .count();
    answered < history[at].tool_calls.len()
}

pub(super) fn tool_error(message: &str) -> String {
    serde_json::json!({ "error": message }).to_string()
}

#[cfg(test)]
mod tests {
    use super::bounded;

    #[test]
    fn a_result_over_the_limit_becomes_an_error_saying_its_size() {
        assert_eq!(bounded("t", "x".repeat(10), 10), "x".repeat(10));
        let refused = bounded("big_result", "x".repeat(11), 10);
        assert!(
            refused.contains("'big_result' was 11 bytes") && refused.contains("limit of 10 bytes"),
            "{refused}"
        );
    }
}
