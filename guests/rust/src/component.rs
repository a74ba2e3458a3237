//! The values a component is made of: its agents and its tools.

use std::time::Duration;

use crate::bindings::agenthost::host::types as wit;
use crate::bindings::exports::agenthost::host::agent_settings as settings_wit;
use crate::bindings::exports::agenthost::host::orchestration_inputs as inputs_wit;
use crate::orchestration::Orchestration;
use crate::tool::Tool;

/// Everything one wasm component offers the host: one or more agents and the
/// tools they may call.
#[derive(Default)]
pub struct Component {
    agents: Vec<Agent>,
    tools: Vec<Tool>,
    orchestrations: Vec<Orchestration>,
}

impl Component {
    /// An empty component; add agents and tools with [`Component::agent`] and
    /// [`Component::tool`].
    ///
    /// ```
    /// use agenthost_guest::{Agent, Component};
    /// let component = Component::new().agent(Agent::new("writer").instructions("Write well."));
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an agent. Its name must be unique across every component the host serves.
    pub fn agent(mut self, agent: Agent) -> Self {
        self.agents.push(agent);
        self
    }

    /// Adds a tool that this component's agents may list by name.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds a durable orchestration.
    pub fn orchestration(mut self, orchestration: Orchestration) -> Self {
        self.orchestrations.push(orchestration);
        self
    }

    pub(crate) fn manifest(&self) -> wit::Manifest {
        wit::Manifest {
            agents: self.agents.iter().map(Agent::to_wit).collect(),
            activities: self.tools.iter().map(Tool::to_wit).collect(),
            orchestrations: self
                .orchestrations
                .iter()
                .map(Orchestration::to_wit)
                .collect(),
        }
    }

    pub(crate) fn agent_settings(&self) -> Vec<settings_wit::Settings> {
        self.agents
            .iter()
            .filter_map(Agent::settings_to_wit)
            .collect()
    }

    pub(crate) fn input_schemas(&self) -> Vec<inputs_wit::InputSchema> {
        self.orchestrations
            .iter()
            .filter_map(|o| {
                o.input_schema_text().map(|schema| inputs_wit::InputSchema {
                    orchestration: o.name().to_string(),
                    schema,
                })
            })
            .collect()
    }

    pub(crate) fn run_orchestration(&self, name: &str, input: &str) -> Result<String, String> {
        match self.orchestrations.iter().find(|o| o.name() == name) {
            Some(orchestration) => orchestration.run(input),
            None => Err(format!(
                "this component has no orchestration named '{name}'"
            )),
        }
    }

    pub(crate) fn invoke(&self, name: &str, arguments: &str) -> Result<String, wit::ActivityError> {
        match self.tools.iter().find(|t| t.name() == name) {
            Some(tool) => tool.call(arguments),
            // The host words the error; the name is all it needs.
            None => Err(wit::ActivityError::NotFound(name.to_string())),
        }
    }
}

/// An agent: a model prompted with instructions, optionally with tools.
///
/// ```
/// use agenthost_guest::Agent;
/// let agent = Agent::new("writer")
///     .description("Refines short texts")
///     .instructions("You refine short pieces of text.")
///     .model("gpt-4o-mini");
/// ```
#[derive(Debug, Clone)]
pub struct Agent {
    name: String,
    description: String,
    instructions: String,
    model: Option<String>,
    tools: Vec<String>,
    settings: Settings,
}

/// How an agent calls the model and how long its sessions live; unset
/// values are the host's.
#[derive(Debug, Clone, Default, PartialEq)]
struct Settings {
    temperature: Option<f32>,
    max_output_tokens: Option<u32>,
    timeout: Option<Duration>,
    /// `Some(None)`: sessions never expire.
    session_ttl: Option<Option<Duration>>,
    history_budget_tokens: Option<u32>,
}

impl Agent {
    /// A new agent; `name` is its URL segment in `/api/agents/{name}/run`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            description: String::new(),
            instructions: String::new(),
            model: None,
            tools: Vec::new(),
            settings: Settings::default(),
        }
    }

    /// What the agent is for, shown in listings and agent cards.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// The system message of every conversation with this agent.
    pub fn instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = instructions.into();
        self
    }

    /// Uses this model (OpenAI) or deployment (Azure) instead of the host's default.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Lets the model call the component's tool of that name.
    pub fn tool(mut self, name: impl Into<String>) -> Self {
        self.tools.push(name.into());
        self
    }

    /// Sampling temperature (0 to 2) of this agent's model calls.
    ///
    /// ```
    /// use std::time::Duration;
    /// use agenthost_guest::Agent;
    /// let agent = Agent::new("writer")
    ///     .temperature(0.2)
    ///     .max_output_tokens(800)
    ///     .timeout(Duration::from_secs(45))
    ///     .session_ttl(Some(Duration::from_secs(7 * 86_400)))
    ///     .history_budget_tokens(16_000);
    /// ```
    pub fn temperature(mut self, temperature: f32) -> Self {
        self.settings.temperature = Some(temperature);
        self
    }

    /// The longest answer, in tokens.
    pub fn max_output_tokens(mut self, tokens: u32) -> Self {
        self.settings.max_output_tokens = Some(tokens);
        self
    }

    /// The longest one model call of this agent may take.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.settings.timeout = Some(timeout);
        self
    }

    /// How long an idle session of this agent is kept; `None` keeps it forever.
    pub fn session_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.settings.session_ttl = Some(ttl);
        self
    }

    /// Tokens of the conversation sent to the model at most (older whole
    /// turns are left out; the stored conversation stays whole).
    pub fn history_budget_tokens(mut self, tokens: u32) -> Self {
        self.settings.history_budget_tokens = Some(tokens);
        self
    }

    fn settings_to_wit(&self) -> Option<settings_wit::Settings> {
        let s = &self.settings;
        (*s != Settings::default()).then(|| settings_wit::Settings {
            agent: self.name.clone(),
            temperature: s.temperature,
            max_output_tokens: s.max_output_tokens,
            timeout_ms: s
                .timeout
                .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            session_ttl_seconds: s
                .session_ttl
                .map(|ttl| ttl.map_or(0, |t| t.as_secs().max(1))),
            history_budget_tokens: s.history_budget_tokens,
        })
    }

    fn to_wit(&self) -> wit::Agent {
        wit::Agent {
            name: self.name.clone(),
            description: self.description.clone(),
            instructions: self.instructions.clone(),
            model: self.model.clone(),
            tools: self.tools.clone(),
        }
    }
}
