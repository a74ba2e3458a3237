//! Agent cards (A2A 1.0): one per served agent at
//! `/a2a/{agent}/.well-known/agent-card.json`, and the host's at
//! `/.well-known/agent-card.json` (the single agent's card when one is
//! served; else every agent as a skill, each with its own interface).

use axum::http::HeaderMap;
use serde_json::{json, Value};

use crate::http::AppState;
use crate::registry::ServedAgent;

/// The base URL callers reached this host by: its `Host` (or the proxy's
/// `X-Forwarded-Host` and `X-Forwarded-Proto`).
pub(super) fn base_url(headers: &HeaderMap) -> String {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(',').next().unwrap_or(v).trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let host = header("x-forwarded-host")
        .or_else(|| header("host"))
        .unwrap_or_else(|| "localhost".into());
    let scheme = header("x-forwarded-proto").unwrap_or_else(|| "http".into());
    format!("{scheme}://{host}")
}

/// The agent's interfaces: JSON-RPC first (the SDKs take the first they
/// speak), then HTTP+JSON, at the same URL.
fn interfaces(base: &str, agent: &str) -> [Value; 2] {
    let url = format!("{base}/a2a/{agent}");
    [
        json!({"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}),
        json!({"url": url, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}),
    ]
}

/// One skill for the agent, one for each of its tools.
fn skills(agent: &ServedAgent) -> Vec<Value> {
    let name = &agent.spec.name;
    let mut skills = vec![json!({
        "id": name,
        "name": name,
        "description": description(agent),
        "tags": ["agent"],
    })];
    for tool in &agent.spec.tools {
        if let Some(activity) = agent.component.manifest.activity(tool) {
            skills.push(json!({
                "id": format!("{name}.{tool}"),
                "name": tool,
                "description": if activity.description.is_empty() { format!("tool '{tool}' of agent '{name}'") } else { activity.description.clone() },
                "tags": ["tool"],
            }));
        }
    }
    skills
}

fn description(agent: &ServedAgent) -> String {
    match agent.spec.description.trim() {
        "" => format!("agent '{}'", agent.spec.name),
        text => text.to_string(),
    }
}

/// The schemes the endpoint keys are presented by, when the host has keys.
fn security(state: &AppState, card: &mut Value) {
    if state.config.keys.is_empty() {
        return;
    }
    card["securitySchemes"] = json!({
        "bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer", "description": "an endpoint key of scope invoke"}},
        "apiKey": {"apiKeySecurityScheme": {"location": "header", "name": "x-api-key", "description": "an endpoint key of scope invoke"}},
    });
    card["securityRequirements"] = json!([
        {"schemes": {"bearer": {"list": []}}},
        {"schemes": {"apiKey": {"list": []}}},
    ]);
}

fn common(state: &AppState, mut card: Value) -> Value {
    card["capabilities"] =
        json!({"streaming": true, "pushNotifications": false, "extendedAgentCard": false});
    card["defaultInputModes"] = json!(["text/plain", "application/json"]);
    card["defaultOutputModes"] = json!(["text/plain", "application/json"]);
    security(state, &mut card);
    card
}

pub(super) fn of_agent(state: &AppState, base: &str, agent: &ServedAgent) -> Value {
    common(
        state,
        json!({
            "name": agent.spec.name,
            "description": description(agent),
            "version": agent.component.digest,
            "supportedInterfaces": interfaces(base, &agent.spec.name),
            "skills": skills(agent),
        }),
    )
}

pub(super) fn of_host(state: &AppState, base: &str) -> Value {
    let agents: Vec<ServedAgent> = state
        .registry
        .agent_names()
        .iter()
        .filter_map(|name| state.registry.agent(name))
        .collect();
    if let [only] = agents.as_slice() {
        return of_agent(state, base, only);
    }
    let names: Vec<&str> = agents.iter().map(|a| a.spec.name.as_str()).collect();
    common(
        state,
        json!({
            "name": "agenthost",
            "description": format!("agents served by this host: {}; each also has its own card at /a2a/{{agent}}/.well-known/agent-card.json", names.join(", ")),
            "version": env!("CARGO_PKG_VERSION"),
            "supportedInterfaces": names.iter().flat_map(|n| interfaces(base, n)).collect::<Vec<_>>(),
            "skills": agents.iter().flat_map(skills).collect::<Vec<_>>(),
        }),
    )
}
