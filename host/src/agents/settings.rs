//! Per-agent settings from the host's configuration (`--agent-settings
//! FILE`, TOML): the operator's say over each agent's model, sampling,
//! output length, call timeout, session expiry and history budget. What is
//! not set falls back to the agent's own description (its model) and then
//! to the host's flags.
//!
//! ```toml
//! [agents.writer]
//! model = "gpt-4o-mini"        # or the Azure deployment
//! temperature = 0.2
//! max_output_tokens = 800
//! timeout = "45s"
//! session_ttl = "7d"           # or "none"
//! history_budget_tokens = 16000
//! ```

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::wasm::AgentOptions;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    agents: HashMap<String, Written>,
}

/// One agent's settings as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    model: Option<String>,
    temperature: Option<f32>,
    max_output_tokens: Option<u32>,
    timeout: Option<String>,
    session_ttl: Option<String>,
    history_budget_tokens: Option<usize>,
}

/// One agent's settings, checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentSettings {
    pub model: Option<String>,
    pub temperature: Option<f32>,
    pub max_output_tokens: Option<u32>,
    pub timeout: Option<Duration>,
    /// `Some(None)`: this agent's sessions never expire.
    pub session_ttl: Option<Option<Duration>>,
    pub history_budget_tokens: Option<usize>,
}

#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// `reason`, not `source`: the message says it (a chain printed whole
    /// would say it twice).
    #[error("cannot read the agent settings file {path}: {reason}")]
    Read {
        path: String,
        reason: std::io::Error,
    },
    #[error("the agent settings file {path} is not valid: {reason}")]
    Invalid { path: String, reason: String },
}

/// A session expiry as written: a duration (`14d`, `12h`), or `none` (also
/// `null`, `off`, `never`) for sessions that never expire.
pub fn parse_ttl(text: &str) -> Result<Option<Duration>, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "none" | "null" | "off" | "never" => Ok(None),
        other => humantime::parse_duration(other)
            .map(Some)
            .map_err(|e| format!("'{text}' is not a duration (e.g. 14d, 12h) or none: {e}")),
    }
}

impl AgentSettings {
    /// These settings (the operator's) over what the agent's component
    /// describes: each one set here wins.
    pub fn over(self, described: &AgentOptions) -> Self {
        Self {
            model: self.model,
            temperature: self.temperature.or(described.temperature),
            max_output_tokens: self.max_output_tokens.or(described.max_output_tokens),
            timeout: self.timeout.or(described.timeout),
            session_ttl: self.session_ttl.or(described.session_ttl),
            history_budget_tokens: self
                .history_budget_tokens
                .or(described.history_budget_tokens),
        }
    }
}

/// Every agent's settings.
#[derive(Debug, Clone, Default)]
pub struct AgentsSettings {
    agents: HashMap<String, AgentSettings>,
}

impl AgentsSettings {
    /// Reads and checks the file; an error names the file, the agent and
    /// the setting.
    pub fn load(path: &Path) -> Result<Self, SettingsError> {
        let text = std::fs::read_to_string(path).map_err(|reason| SettingsError::Read {
            path: path.display().to_string(),
            reason,
        })?;
        Self::parse(&text).map_err(|reason| SettingsError::Invalid {
            path: path.display().to_string(),
            reason,
        })
    }

    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut agents = HashMap::new();
        for (name, written) in file.agents {
            let bad = |what: &str| format!("agent '{name}': {what}");
            if let Some(t) = written.temperature {
                if !(0.0..=2.0).contains(&t) {
                    return Err(bad("temperature must be between 0 and 2"));
                }
            }
            if written.max_output_tokens == Some(0) || written.history_budget_tokens == Some(0) {
                return Err(bad("token counts must be at least 1"));
            }
            let timeout = written
                .timeout
                .map(|t| {
                    humantime::parse_duration(&t).map_err(|e| bad(&format!("timeout '{t}': {e}")))
                })
                .transpose()?;
            let session_ttl = written
                .session_ttl
                .map(|t| parse_ttl(&t).map_err(|e| bad(&e)))
                .transpose()?;
            agents.insert(
                name,
                AgentSettings {
                    model: written.model,
                    temperature: written.temperature,
                    max_output_tokens: written.max_output_tokens,
                    timeout,
                    session_ttl,
                    history_budget_tokens: written.history_budget_tokens,
                },
            );
        }
        Ok(Self { agents })
    }

    /// The agent's settings (all unset for an agent the file does not name).
    pub fn of(&self, agent: &str) -> AgentSettings {
        self.agents.get(agent).cloned().unwrap_or_default()
    }

    /// Agents whose sessions expire on their own schedule.
    pub fn session_ttls(&self) -> Vec<(String, Option<Duration>)> {
        self.agents
            .iter()
            .filter_map(|(name, s)| s.session_ttl.map(|ttl| (name.clone(), ttl)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_read_per_agent_and_checked() -> Result<(), String> {
        let settings = AgentsSettings::parse(
            r#"
            [agents.writer]
            temperature = 0.2
            max_output_tokens = 800
            timeout = "45s"
            session_ttl = "none"
            [agents.weather]
            session_ttl = "7d"
            history_budget_tokens = 16000
            "#,
        )?;
        let writer = settings.of("writer");
        assert_eq!(writer.temperature, Some(0.2));
        assert_eq!(writer.max_output_tokens, Some(800));
        assert_eq!(writer.timeout, Some(Duration::from_secs(45)));
        assert_eq!(writer.session_ttl, Some(None));
        assert_eq!(
            settings.of("weather").session_ttl,
            Some(Some(Duration::from_secs(7 * 86_400)))
        );
        assert_eq!(settings.of("nobody"), AgentSettings::default());
        for bad in [
            "[agents.a]\ntemperature = 3.0",
            "[agents.a]\ntimeout = \"soon\"",
            "[agents.a]\nsession_ttl = \"later\"",
            "[agents.a]\nmax_output_tokens = 0",
            "[agents.a]\ncolour = \"red\"",
        ] {
            let error = AgentsSettings::parse(bad).err().ok_or(bad)?;
            assert!(!error.is_empty(), "{bad}");
        }
        Ok(())
    }
}
