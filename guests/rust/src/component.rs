//! The values a component is made of: its agents and its tools.

use crate::bindings::agenthost::host::types as wit;
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
            None => Err(wit::ActivityError::NotFound(format!(
                "this component has no activity named '{name}'"
            ))),
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
