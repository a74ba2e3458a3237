//! A tool round: the calls of the model's last message that have no result
//! yet run in the component. A call of a tool marked `always-require` runs
//! only once a human approved it; a denied one gives the model the refusal
//! and its reason as the tool's result; an undecided one leaves the run
//! waiting (the caller stores the request and ends the episode of the run:
//! no instance or thread is held while a human decides).

use std::collections::HashMap;

use super::{AgentError, AgentRunner};
use crate::core::chat::{ChatMessage, Role, ToolCall};
use crate::registry::ServedAgent;
use crate::runtime::Approval;
use crate::store::{Decision, PendingCall};

/// What one tool round produced.
pub(super) struct ToolRound {
    /// Results, in the order of the calls.
    pub results: Vec<ChatMessage>,
    /// Calls that wait for a human's decision.
    pub pending: Vec<PendingCall>,
}

impl AgentRunner {
    /// Runs the calls of the last assistant message that have no result
    /// yet, as far as decisions allow.
    pub(super) async fn tool_round(
        &self,
        agent: &ServedAgent,
        history: &[ChatMessage],
        correlation_id: &str,
    ) -> Result<ToolRound, AgentError> {
        let mut round = ToolRound {
            results: Vec::new(),
            pending: Vec::new(),
        };
        let Some(at) = history.iter().rposition(|m| m.role == Role::Assistant) else {
            return Ok(round);
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
            let content = if needs_approval(call) {
                match decisions.get(&call.id) {
                    Some(Decision { approved: true, .. }) => self.call_tool(agent, call).await?,
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
                        round.pending.push(PendingCall {
                            call_id: call.id.clone(),
                            tool: call.function.name.clone(),
                            arguments: call.function.arguments.clone(),
                        });
                        continue;
                    }
                }
            } else {
                self.call_tool(agent, call).await?
            };
            round
                .results
                .push(ChatMessage::tool_result(call.id.clone(), content));
        }
        Ok(round)
    }

    /// A tool's failure is told to the model (it may recover); a guest that
    /// traps or runs out of time fails the run.
    async fn call_tool(&self, agent: &ServedAgent, call: &ToolCall) -> Result<String, AgentError> {
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
        match self
            .runtime
            .invoke_activity(&agent.component, name, arguments)
            .await?
        {
            Ok(result) => Ok(result),
            Err(failure) => Ok(tool_error(&failure.to_string())),
        }
    }
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

fn tool_error(message: &str) -> String {
    serde_json::json!({ "error": message }).to_string()
}
