"""Write agenthost agents, their tools and durable orchestrations in Python.

The same verbs as the Rust SDK (``agenthost_guest``): a :class:`Component`
holds :class:`Agent`\\ s, :class:`Tool`\\ s (plain functions whose JSON Schema
comes from their type hints) and :class:`Orchestration`\\ s (straight-line
code over a :class:`Context`); :func:`export` hands it to the host::

    from typing import Annotated
    import agenthost
    from agenthost import Agent, Component, Tool

    def get_weather(city: Annotated[str, "The city to report on"]) -> dict:
        return {"city": city, "temperature_c": 21}

    app = (
        Component()
        .agent(Agent("weather").instructions("Use get_weather.").tool("get_weather"))
        .tool(Tool("get_weather", "Current weather for a city", get_weather))
    )
    Component, AgentSettings, OrchestrationInputs = agenthost.export(app)

Build it with ``agenthost build`` (componentize-py against the host's WIT).
"""

from ._component import Agent, Component, export
from ._orchestration import (
    Context,
    Orchestration,
    RetryPolicy,
    Session,
    Task,
    TaskError,
)
from ._tool import Approval, Tool, ToolError
from ._log import log

__all__ = [
    "Agent",
    "Approval",
    "Component",
    "Context",
    "Orchestration",
    "RetryPolicy",
    "Session",
    "Task",
    "TaskError",
    "Tool",
    "ToolError",
    "export",
    "log",
]
