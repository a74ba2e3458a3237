"""A component: its agents, tools and orchestrations, and the glue that
exports them through the host's WIT (``agenthost-sdk-component``)."""

import datetime
import json

from ._bindings import Err
from ._bindings import agent_settings as _settings_wit
from ._bindings import orchestration_inputs as _inputs_wit
from ._bindings import types as _wit

from ._orchestration import Orchestration
from ._tool import Tool


class Agent:
    """An agent: a model prompted with instructions that may call tools."""

    def __init__(self, name: str):
        self.name = name
        self._description = ""
        self._instructions = ""
        self._model = None
        self._tools = []
        self._settings = {}

    def description(self, text: str) -> "Agent":
        self._description = text
        return self

    def instructions(self, text: str) -> "Agent":
        """The system message of every conversation with this agent."""
        self._instructions = text
        return self

    def model(self, model: str) -> "Agent":
        """Overrides the host's model (OpenAI) or deployment (Azure)."""
        self._model = model
        return self

    def tool(self, name: str) -> "Agent":
        """Lets the model call tool ``name`` of this component."""
        self._tools.append(name)
        return self

    def temperature(self, value: float) -> "Agent":
        """Sampling temperature, 0 to 2."""
        self._settings["temperature"] = float(value)
        return self

    def max_output_tokens(self, tokens: int) -> "Agent":
        self._settings["max_output_tokens"] = int(tokens)
        return self

    def timeout(self, seconds: float) -> "Agent":
        """Longest one model call may take."""
        self._settings["timeout_ms"] = int(_seconds(seconds) * 1000)
        return self

    def session_ttl(self, seconds) -> "Agent":
        """Idle time after which a session is forgotten (at least a second);
        ``None`` keeps sessions forever."""
        self._settings["session_ttl_seconds"] = (
            0 if seconds is None else max(1, round(_seconds(seconds)))
        )
        return self

    def history_budget_tokens(self, tokens: int) -> "Agent":
        """Tokens of the conversation sent to the model at most."""
        self._settings["history_budget_tokens"] = int(tokens)
        return self

    def _to_wit(self) -> "_wit.Agent":
        return _wit.Agent(
            name=self.name,
            description=self._description,
            instructions=self._instructions,
            model=self._model,
            tools=list(self._tools),
        )

    def _settings_wit(self):
        if not self._settings:
            return None
        return _settings_wit.Settings(
            agent=self.name,
            temperature=self._settings.get("temperature"),
            max_output_tokens=self._settings.get("max_output_tokens"),
            timeout_ms=self._settings.get("timeout_ms"),
            session_ttl_seconds=self._settings.get("session_ttl_seconds"),
            history_budget_tokens=self._settings.get("history_budget_tokens"),
        )


def _seconds(value) -> float:
    return value.total_seconds() if isinstance(value, datetime.timedelta) else float(value)


class Component:
    """Everything a component offers."""

    def __init__(self):
        self._agents = []
        self._tools = {}
        self._orchestrations = {}

    def agent(self, agent: Agent) -> "Component":
        self._agents.append(agent)
        return self

    def tool(self, tool: Tool) -> "Component":
        if tool.name in self._tools:
            raise ValueError(f"tool '{tool.name}' is declared twice")
        self._tools[tool.name] = tool
        return self

    def orchestration(self, orchestration: Orchestration) -> "Component":
        if orchestration.name in self._orchestrations:
            raise ValueError(f"orchestration '{orchestration.name}' is declared twice")
        self._orchestrations[orchestration.name] = orchestration
        return self

    def manifest(self) -> "_wit.Manifest":
        return _wit.Manifest(
            agents=[a._to_wit() for a in self._agents],
            activities=[t.to_wit() for t in self._tools.values()],
            orchestrations=[
                _wit.Orchestration(
                    name=o.name,
                    description=o._description,
                    routes=list(o._routes),
                    event_routes=[_wit.EventRoute(path=p, event=e) for p, e in o._event_routes],
                )
                for o in self._orchestrations.values()
            ],
        )

    def invoke(self, name: str, arguments: str) -> str:
        tool = self._tools.get(name)
        if tool is None:
            raise Err(_wit.ActivityError_NotFound(name))
        outcome = tool.call(arguments)
        if isinstance(outcome, str):
            return outcome
        raise Err(outcome)

    def run_orchestration(self, name: str, input_text: str) -> str:
        orchestration = self._orchestrations.get(name)
        if orchestration is None:
            raise Err(f"this component has no orchestration named '{name}'")
        return orchestration.run(input_text)

    def agent_settings(self) -> list:
        return [s for s in (a._settings_wit() for a in self._agents) if s is not None]

    def input_schemas(self) -> list:
        schemas = []
        for o in self._orchestrations.values():
            schema = o.input_schema()
            if schema is not None:
                schemas.append(
                    _inputs_wit.InputSchema(orchestration=o.name, schema=json.dumps(schema))
                )
        return schemas


def export(component: Component):
    """The classes componentize-py looks for in the app module, bound to
    ``component``: assign them as
    ``Component, AgentSettings, OrchestrationInputs = export(app)``."""

    class ComponentExport:
        def describe(self):
            return component.manifest()

        def invoke_activity(self, name: str, arguments: str) -> str:
            return component.invoke(name, arguments)

        def run_orchestration(self, name: str, input: str) -> str:
            return component.run_orchestration(name, input)

    class AgentSettingsExport:
        def agent_settings(self):
            return component.agent_settings()

    class OrchestrationInputsExport:
        def input_schemas(self):
            return component.input_schemas()

    return ComponentExport, AgentSettingsExport, OrchestrationInputsExport
