//! What a component declared, validated once at load time and held in host
//! types, so the rest of the host never sees generated bindings.

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

#[derive(Debug, Clone, Serialize)]
pub struct AgentSpec {
    pub name: String,
    pub description: String,
    pub instructions: String,
    pub model: Option<String>,
    pub tools: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ActivitySpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    pub approval: Approval,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Manifest {
    pub agents: Vec<AgentSpec>,
    pub activities: Vec<ActivitySpec>,
}

impl Manifest {
    pub fn activity(&self, name: &str) -> Option<&ActivitySpec> {
        self.activities.iter().find(|a| a.name == name)
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
            });
        }
        Ok(Self { agents, activities })
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
    use super::check_name;

    #[test]
    fn names_must_be_url_and_tool_safe() {
        assert!(check_name("agent", "writer-2_b").is_ok());
        assert!(check_name("agent", "").is_err());
        assert!(check_name("agent", "a/b").is_err());
        assert!(check_name("agent", "über").is_err());
    }
}
