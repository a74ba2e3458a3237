"""Test guest `clock` (Python): what Python's own clock, random numbers and
uuids give inside an orchestration, before and after a durable timer, and
a tool of another component (`weather/get_weather`) called as an activity;
and `sequence`, n activities in a row, for the benchmark of a durable step.
The values seen before the timer are shown as custom status in the first
episode and returned from the last one, which replays them: equal only if
they came from the journal, not the machine."""

import random
from dataclasses import dataclass
import time
import uuid

import agenthost
from agenthost import Context, Orchestration, Tool


def seen(ctx: Context) -> dict:
    return {
        "time_ms": round(time.time() * 1000),
        "now_ms": ctx.now_ms(),
        "uuid4": str(uuid.uuid4()),
        "random": random.random(),
        "guid": ctx.new_guid(),
    }


def clock(ctx: Context, input) -> dict:
    before = seen(ctx)
    ctx.set_custom_status(before)
    ctx.timer(2).wait()
    # A step's time is that of its latest journaled call: one made after
    # the timer fired moves the clock past it.
    ctx.new_guid()
    after = {"time_ms": round(time.time() * 1000), "now_ms": ctx.now_ms()}
    weather = ctx.when_all([
        ctx.call_activity("weather/get_weather", {"city": city}) for city in ("Paris", "Rome")
    ])
    return {"before": before, "after": after, "weather": weather}


def instant(n: int) -> int:
    return n


@dataclass
class Positive:
    n: int

    def __post_init__(self):
        if self.n < 0:
            raise ValueError("n must not be negative")


def checked(q: Positive) -> dict:
    """Its argument checks itself: a bad one is the model's mistake to hear
    about, never a trap of the component."""
    return {"n": q.n, "city": "Zürich"}


def sequence(ctx: Context, input: dict) -> int:
    """`n` activities one after the other: the benchmark's durable steps."""
    return sum(ctx.call_activity("instant", {"n": i}).wait() for i in range(input.get("n", 10)))


def unknown(ctx: Context, input) -> dict:
    return ctx.call_activity("no_such_tool", {}).wait()


app = (
    agenthost.Component()
    .orchestration(Orchestration("clock", clock))
    .orchestration(Orchestration("unknown_activity", unknown))
    .orchestration(Orchestration("sequence", sequence))
    .tool(Tool("instant", "Returns n at once", instant))
    .tool(Tool("checked", "Returns n when it is not negative", checked))
)

Component, AgentSettings, OrchestrationInputs = agenthost.export(app)
