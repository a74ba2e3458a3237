"""`weather`, in Python: an agent with one tool, `get_weather`, that reports
deterministic conditions for a city (no network: the point is the tool
round trip). The twin of sample-agents/weather (Rust); both give the same
answers."""

from dataclasses import dataclass
from typing import Annotated

import agenthost
from agenthost import Agent, Approval, Tool, ToolError

CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy"]


@dataclass
class Weather:
    city: str
    temperature_c: int
    conditions: str


def get_weather(city: Annotated[str, 'Name of the city, e.g. "Paris".']) -> Weather:
    """The same city always gets the same weather, so answers can be checked."""
    city = city.strip()
    if not city:
        raise ToolError("city must not be empty")
    h = 0
    for b in city.lower().encode():
        h = (h * 31 + b) & 0xFFFFFFFF
    return Weather(city=city, temperature_c=h % 35 - 5, conditions=CONDITIONS[h % 5])


app = (
    agenthost.Component()
    .agent(
        Agent("weather")
        .description("Answers questions about the current weather")
        .instructions(
            "You answer questions about the weather. Always call get_weather for the "
            "city the user asks about and report its temperature and conditions."
        )
        .tool("get_weather")
    )
    .tool(
        Tool("get_weather", "Current weather for a city", get_weather)
        .approval(Approval.NEVER_REQUIRE)
    )
)

Component, AgentSettings, OrchestrationInputs = agenthost.export(app)
