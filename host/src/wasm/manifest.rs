//! What a component declared, validated once at load time and held in host
//! types, so the rest of the host never sees generated bindings.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;

use super::bindings;
use super::LoadError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Approval {
    NeverRequire,
    AlwaysRequire,
}

/// How an agent calls the model and how long its sessions live, as its
/// component describes them (the optional `agent-settings` export).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AgentOptions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", with = "humantime_option")]
    pub timeout: Option<std::time::Duration>,
    /// `Some(None)`: sessions never expire.
    #[serde(skip)]
    pub session_ttl: Option<Option<std::time::Duration>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_budget_tokens: Option<usize>,
}

mod humantime_option {
    pub fn serialize<S: serde::Serializer>(
        value: &Option<std::time::Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }
}

impl AgentOptions {
    /// Reads one agent's settings from the component; an out-of-range value
    /// fails the load with its name.
    pub(super) fn from_wit(s: &super::settings_bindings::Settings) -> Result<Self, String> {
        if let Some(t) = s.temperature {
            if !(0.0..=2.0).contains(&t) {
                return Err(format!(
                    "agent '{}': temperature {t} is not between 0 and 2",
                    s.agent
                ));
            }
        }
        if s.max_output_tokens == Some(0) || s.history_budget_tokens == Some(0) {
            return Err(format!(
                "agent '{}': token counts must be at least 1",
                s.agent
            ));
        }
        Ok(Self {
            temperature: s.temperature,
            max_output_tokens: s.max_output_tokens,
            timeout: s.timeout_ms.map(std::time::Duration::from_millis),
            session_ttl: s
                .session_ttl_seconds
                .map(|secs| (secs > 0).then(|| std::time::Duration::from_secs(secs))),
            history_budget_tokens: s
                .history_budget_tokens
                .map(|t| usize::try_from(t).unwrap_or(usize::MAX)),
        })
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct AgentSpec {
    pub name: String,
    pub description: String,
    pub instructions: String,
    pub model: Option<String>,
    pub tools: Vec<String>,
    /// What the component says of this agent's model calls and sessions.
    pub options: AgentOptions,
}

#[derive(Debug, Clone, Serialize)]
pub struct ActivitySpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    pub approval: Approval,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventRouteSpec {
    /// Segments under `/api/`, e.g. `approval/{instanceId}`.
    pub path: String,
    pub event: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct OrchestrationSpec {
    pub name: String,
    pub description: String,
    /// Extra start routes under `/api/`, e.g. `writer/run`.
    pub routes: Vec<String>,
    pub event_routes: Vec<EventRouteSpec>,
    /// The JSON Schema its input must match, when the component declares one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_schema: Option<InputSchema>,
}

/// An orchestration's input schema, compiled once at load.
#[derive(Clone)]
pub struct InputSchema {
    schema: Value,
    validator: Arc<jsonschema::Validator>,
}

/// Problems shown for one refused input at most.
const MAX_INPUT_ERRORS: usize = 5;

impl InputSchema {
    fn compile(schema: Value) -> Result<Self, String> {
        let validator = jsonschema::validator_for(&schema).map_err(|e| e.to_string())?;
        Ok(Self {
            schema,
            validator: Arc::new(validator),
        })
    }

    /// What is wrong with `input` (JSON text), each with where (a JSON
    /// pointer into it); empty when it matches.
    pub fn problems(&self, input: &str) -> Vec<String> {
        let value: Value = match serde_json::from_str(input) {
            Ok(value) => value,
            Err(e) => return vec![format!("the input is not JSON: {e}")],
        };
        self.validator
            .iter_errors(&value)
            .take(MAX_INPUT_ERRORS)
            .map(|e| {
                let at = e.instance_path().to_string();
                let at = if at.is_empty() { "/".to_string() } else { at };
                format!("at {at}: {e}")
            })
            .collect()
    }
}

impl std::fmt::Debug for InputSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.schema.fmt(f)
    }
}

impl Serialize for InputSchema {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.schema.serialize(serializer)
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Manifest {
    pub agents: Vec<AgentSpec>,
    pub activities: Vec<ActivitySpec>,
    pub orchestrations: Vec<OrchestrationSpec>,
}

impl Manifest {
    /// Takes in the agents' settings the component exports; settings of an
    /// agent it does not declare fail the load.
    pub(super) fn with_settings(
        mut self,
        settings: &[super::settings_bindings::Settings],
    ) -> Result<Self, LoadError> {
        for s in settings {
            let options = AgentOptions::from_wit(s).map_err(LoadError::Manifest)?;
            match self.agents.iter_mut().find(|a| a.name == s.agent) {
                Some(agent) => agent.options = options,
                None => {
                    return Err(LoadError::Manifest(format!(
                        "agent-settings names agent '{}', which the component does not declare",
                        s.agent
                    )))
                }
            }
        }
        Ok(self)
    }

    /// Takes in the orchestrations' input schemas the component exports; a
    /// schema of an orchestration it does not declare, or one that is not
    /// a JSON Schema, fails the load.
    pub(super) fn with_input_schemas(
        mut self,
        schemas: &[super::inputs_bindings::InputSchema],
    ) -> Result<Self, LoadError> {
        for s in schemas {
            let Some(orchestration) = self
                .orchestrations
                .iter_mut()
                .find(|o| o.name == s.orchestration)
            else {
                return Err(LoadError::Manifest(format!(
                    "orchestration-inputs names orchestration '{}', which the component does not declare",
                    s.orchestration
                )));
            };
            let schema: Value = serde_json::from_str(&s.schema).map_err(|e| {
                LoadError::Manifest(format!(
                    "the input schema of orchestration '{}' is not JSON: {e}",
                    s.orchestration
                ))
            })?;
            orchestration.input_schema = Some(InputSchema::compile(schema).map_err(|e| {
                LoadError::Manifest(format!(
                    "the input schema of orchestration '{}' is not a JSON Schema: {e}",
                    s.orchestration
                ))
            })?);
        }
        Ok(self)
    }

    pub fn activity(&self, name: &str) -> Option<&ActivitySpec> {
        self.activities.iter().find(|a| a.name == name)
    }

    pub fn orchestration(&self, name: &str) -> Option<&OrchestrationSpec> {
        self.orchestrations.iter().find(|o| o.name == name)
    }

    pub(super) fn from_wit(wit: bindings::Manifest) -> Result<Self, LoadError> {
        let invalid = |m: String| LoadError::Manifest(m);
        let mut activities = Vec::with_capacity(wit.activities.len());
        for a in wit.activities {
            check_name("activity", &a.name).map_err(invalid)?;
            let parameters: Value = serde_json::from_str(&a.parameters_schema).map_err(|e| {
                invalid(format!(
                    "activity '{}' has a parameters schema that is not JSON: {e}",
                    a.name
                ))
            })?;
            if activities.iter().any(|x: &ActivitySpec| x.name == a.name) {
                return Err(invalid(format!("activity '{}' is declared twice", a.name)));
            }
            activities.push(ActivitySpec {
                name: a.name,
                description: a.description,
                parameters,
                approval: match a.approval {
                    bindings::agenthost::host::types::ApprovalMode::NeverRequire => {
                        Approval::NeverRequire
                    }
                    bindings::agenthost::host::types::ApprovalMode::AlwaysRequire => {
                        Approval::AlwaysRequire
                    }
                },
            });
        }
        let mut agents: Vec<AgentSpec> = Vec::with_capacity(wit.agents.len());
        for a in wit.agents {
            check_name("agent", &a.name).map_err(invalid)?;
            if agents.iter().any(|x| x.name == a.name) {
                return Err(invalid(format!("agent '{}' is declared twice", a.name)));
            }
            if let Some(missing) = a
                .tools
                .iter()
                .find(|t| !activities.iter().any(|x| &x.name == *t))
            {
                return Err(invalid(format!(
                    "agent '{}' lists tool '{missing}', which the component does not declare",
                    a.name
                )));
            }
            agents.push(AgentSpec {
                name: a.name,
                description: a.description,
                instructions: a.instructions,
                model: a.model.filter(|m| !m.trim().is_empty()),
                tools: a.tools,
                options: AgentOptions::default(),
            });
        }
        let mut orchestrations: Vec<OrchestrationSpec> =
            Vec::with_capacity(wit.orchestrations.len());
        for o in wit.orchestrations {
            check_name("orchestration", &o.name).map_err(invalid)?;
            if orchestrations.iter().any(|x| x.name == o.name) {
                return Err(invalid(format!(
                    "orchestration '{}' is declared twice",
                    o.name
                )));
            }
            let routes = o
                .routes
                .iter()
                .map(|r| normalize_route(r))
                .collect::<Result<Vec<_>, _>>()
                .map_err(invalid)?;
            let mut event_routes = Vec::with_capacity(o.event_routes.len());
            for r in o.event_routes {
                let path = normalize_route(&r.path).map_err(invalid)?;
                if !path.split('/').any(|s| s == "{instanceId}") {
                    return Err(invalid(format!(
                        "event route '{path}' must contain the segment {{instanceId}}"
                    )));
                }
                check_name("event", &r.event).map_err(invalid)?;
                event_routes.push(EventRouteSpec {
                    path,
                    event: r.event,
                });
            }
            orchestrations.push(OrchestrationSpec {
                name: o.name,
                description: o.description,
                routes,
                event_routes,
                input_schema: None,
            });
        }
        Ok(Self {
            agents,
            activities,
            orchestrations,
        })
    }
}

/// Routes are served under `/api/`; they may not shadow the host's own.
fn normalize_route(route: &str) -> Result<String, String> {
    let route = route.trim().trim_matches('/');
    let first = route.split('/').next().unwrap_or_default();
    if route.is_empty() || ["agents", "orchestrators", "health", "components"].contains(&first) {
        return Err(format!(
            "route '{route}' is empty or shadows a built-in /api/{first} route"
        ));
    }
    let ok = route.split('/').all(|segment| {
        segment == "{instanceId}"
            || (!segment.is_empty()
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
    });
    if ok {
        Ok(route.to_string())
    } else {
        Err(format!("route '{route}' may only hold letters, digits, '_', '-' and the segment {{instanceId}}"))
    }
}

/// Names become URL segments and model tool names: keep them to the
/// characters both accept.
fn check_name(kind: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{kind} name '{name}' must be 1-64 characters of letters, digits, '_' or '-'"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::{check_name, normalize_route};

    #[test]
    fn routes_are_trimmed_and_may_not_shadow_built_in_ones() {
        assert_eq!(normalize_route("/writer/run/").unwrap(), "writer/run");
        assert_eq!(
            normalize_route("approval/{instanceId}").unwrap(),
            "approval/{instanceId}"
        );
        assert!(normalize_route("agents/x").is_err());
        assert!(normalize_route("a//b").is_err());
        assert!(normalize_route("a/{other}").is_err());
    }

    #[test]
    fn names_must_be_url_and_tool_safe() {
        assert!(check_name("agent", "writer-2_b").is_ok());
        assert!(check_name("agent", "").is_err());
        assert!(check_name("agent", "a/b").is_err());
        assert!(check_name("agent", "über").is_err());
    }
}
