//! The Python project `agenthost new --lang python` writes: `app.py`, the
//! Python SDK vendored as `agenthost/`, the WIT it binds, and a test that
//! runs natively (`python3 -m unittest`; the SDK imports without the
//! component's bindings, only calls to the host need them).

use super::Kind;

/// The Python SDK as this binary was built with it.
const SDK_FILES: &[(&str, &str)] = &[
    (
        "agenthost/__init__.py",
        include_str!("../../../../guests/python/agenthost/__init__.py"),
    ),
    (
        "agenthost/_bindings.py",
        include_str!("../../../../guests/python/agenthost/_bindings.py"),
    ),
    (
        "agenthost/_component.py",
        include_str!("../../../../guests/python/agenthost/_component.py"),
    ),
    (
        "agenthost/_log.py",
        include_str!("../../../../guests/python/agenthost/_log.py"),
    ),
    (
        "agenthost/_orchestration.py",
        include_str!("../../../../guests/python/agenthost/_orchestration.py"),
    ),
    (
        "agenthost/_schema.py",
        include_str!("../../../../guests/python/agenthost/_schema.py"),
    ),
    (
        "agenthost/_tool.py",
        include_str!("../../../../guests/python/agenthost/_tool.py"),
    ),
];

pub(super) fn files(kind: Kind, name: &str, ident: &str) -> Vec<(String, String)> {
    let fill = |t: &str| t.replace("{name}", name).replace("{ident}", ident);
    let (app, test, readme) = match kind {
        Kind::Agent => (AGENT, AGENT_TEST, AGENT_README),
        Kind::Orchestration => (ORCHESTRATION, ORCHESTRATION_TEST, ORCHESTRATION_README),
    };
    let mut files = vec![
        ("app.py".to_string(), fill(app)),
        ("test_app.py".to_string(), fill(test)),
        ("README.md".to_string(), fill(readme)),
        ("pyproject.toml".to_string(), fill(PYPROJECT)),
        (
            ".gitignore".to_string(),
            "/build\n/target\n__pycache__/\n*.wasm\n".to_string(),
        ),
    ];
    for (path, text) in SDK_FILES {
        files.push(((*path).to_string(), (*text).to_string()));
    }
    files
}

const PYPROJECT: &str = r#"# `agenthost build` reads the component's name here; componentize-py
# (pip install componentize-py==0.25.1) makes the component.
[project]
name = "{name}"
version = "0.1.0"
requires-python = ">=3.11"
"#;

const AGENT: &str = r#""""The `{name}` agent, with one tool. `agenthost build` makes {name}.wasm;
drop it into a host's components directory and it is served at
POST /api/agents/{name}/run."""

from typing import Annotated

import agenthost
from agenthost import Agent, Tool


def word_count(text: Annotated[str, "The text whose words are counted."]) -> dict:
    """Type hints give the JSON Schema the model sees; Annotated describes
    a parameter."""
    return {"words": len(text.split())}


app = (
    agenthost.Component()
    .agent(
        Agent("{name}")
        .description("Helps with texts")
        .instructions("You help with texts. Count words with the word_count tool.")
        .tool("word_count")
    )
    # A tool that must not run on the model's word alone (each call then
    # waits for POST /api/agents/{name}/runs/{correlation_id}/approvals):
    # .tool(Tool("word_count", "Counts the words of a text", word_count).approval(agenthost.Approval.ALWAYS_REQUIRE))
    .tool(Tool("word_count", "Counts the words of a text", word_count))
)

Component, AgentSettings, OrchestrationInputs = agenthost.export(app)
"#;

const AGENT_TEST: &str = r#"import unittest

from app import word_count


class WordCountTest(unittest.TestCase):
    def test_counts_the_words(self):
        self.assertEqual(word_count("one two  three"), {"words": 3})


if __name__ == "__main__":
    unittest.main()
"#;

const ORCHESTRATION: &str = r#""""The `{name}` orchestration: two steps with an agent, then a human's
approval racing a durable timer. `agenthost build` makes {name}.wasm; drop
it into a host's components directory, then POST /api/{name}/run with
{"topic": "tea"} starts it and POST /api/{name}/approve/{instanceId} with
`true` approves it."""

from dataclasses import dataclass

import agenthost
from agenthost import Agent, Context, Orchestration


@dataclass
class Request:
    topic: str


def note_prompt(topic: str) -> str:
    return f"Write a short note about {topic}"


def run(ctx: Context, request: Request) -> dict:
    """Straight-line code; every call through ctx is journaled, so after a
    crash the host replays it to where it was (time.time() and random here
    read the journal too)."""
    draft = ctx.call_agent("{ident}_writer", note_prompt(request.topic)).wait()
    summary = ctx.call_agent("{ident}_writer", f"Summarize in one line: {draft}").wait()
    ctx.set_custom_status({"state": "awaiting_approval", "draft": draft})
    approval = ctx.wait_for_event("approval")
    timeout = ctx.timer(24 * 3600)
    approved = ctx.when_any([approval, timeout]) == 0 and approval.wait() is True
    return {"draft": draft, "summary": summary, "approved": approved}


app = (
    agenthost.Component()
    .agent(
        Agent("{ident}_writer")
        .description("Writes short notes")
        .instructions("You write short, plain notes.")
    )
    .orchestration(
        Orchestration("{name}", run)
        .route("{name}/run")
        .event_route("{name}/approve/{instanceId}", "approval")
    )
)

Component, AgentSettings, OrchestrationInputs = agenthost.export(app)
"#;

const ORCHESTRATION_TEST: &str = r#"import unittest

from app import note_prompt


class PromptTest(unittest.TestCase):
    def test_the_note_prompt_names_the_topic(self):
        self.assertEqual(note_prompt("tea"), "Write a short note about tea")


if __name__ == "__main__":
    unittest.main()
"#;

const AGENT_README: &str = r#"# {name}

An [agenthost](https://github.com/) agent in Python with one tool (`word_count`).

    agenthost build --into /path/to/components   # builds {name}.wasm and drops it in
    agenthost serve --components /path/to/components
    curl -d 'call word_count with {"text": "one two three"}' localhost:7071/api/agents/{name}/run

`agenthost build` runs componentize-py against `wit/`, from `.venv/bin` or
`PATH` (`python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1`); `agenthost/` is the Python SDK, vendored. With no model
configured the host's offline model calls the tool a message names
(`call TOOL with {json}`). `python3 -m unittest` runs the tests natively.
"#;

const ORCHESTRATION_README: &str = r#"# {name}

An [agenthost](https://github.com/) orchestration in Python: two agent
steps, then a human's approval racing a one-day durable timer.

    agenthost build --into /path/to/components   # builds {name}.wasm and drops it in
    agenthost serve --components /path/to/components
    curl -d '{"topic": "tea"}' localhost:7071/api/{name}/run            # its statusQueryGetUri follows it
    curl -d 'true' localhost:7071/api/{name}/approve/INSTANCE_ID          # approves it

`agenthost build` runs componentize-py, from `.venv/bin` or `PATH`
(`python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1`).
`python3 -m unittest` runs the tests natively.
"#;
