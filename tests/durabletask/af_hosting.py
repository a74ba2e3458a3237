"""Microsoft Agent Framework's Durable Task hosting (PyPI
`agent-framework-durabletask`, pinned in the Makefile) against agenthost over
gRPC (tests/agent_framework_durabletask.rs): a worker registers an agent
(its model calls go to the test's fake OpenAI-compatible server) and an
orchestration with a human-approval event; clients in other processes run
the agent by name on one session, run a wasm agent of the host by name, and
drive the orchestration.

usage: af_hosting.py worker ADDRESS MODEL_BASE_URL
       af_hosting.py session ADDRESS AGENT        (the worker's agent, or the host's)
       af_hosting.py approval ADDRESS

The client modes print one JSON line; the Rust test checks it.
"""

import json
import sys
import time
from datetime import timedelta

from durabletask import task
from durabletask.client import TaskHubGrpcClient
from durabletask.worker import TaskHubGrpcWorker

from agent_framework_durabletask import (
    DurableAIAgentClient,
    DurableAIAgentOrchestrationContext,
    DurableAIAgentWorker,
)

mode, address = sys.argv[1], sys.argv[2]


def notify_user_for_approval(ctx, content):
    return "notified"


def publish_content(ctx, content):
    return "published"


def content_with_approval(context, topic):
    """The human-in-the-loop sample: a draft, then an approval event racing
    a timer, then publish."""
    writer = DurableAIAgentOrchestrationContext(context).get_agent("Writer")
    session = writer.create_session()
    draft = yield writer.run(messages=f"Write about {topic}", session=session)
    yield context.call_activity(notify_user_for_approval, input={"text": draft.text})
    context.set_custom_status("Requesting human feedback")
    approval = context.wait_for_external_event("HumanApproval")
    timeout = context.create_timer(context.current_utc_datetime + timedelta(seconds=60))
    winner = yield task.when_any([approval, timeout])
    if winner != approval:
        raise TimeoutError("no approval in time")
    yield context.call_activity(publish_content, input={"text": draft.text})
    return {"status": "published", "text": draft.text, "approval": approval.get_result()}


if mode == "worker":
    from agent_framework import Agent
    from agent_framework.openai import OpenAIChatCompletionClient

    chat = OpenAIChatCompletionClient(base_url=sys.argv[3], api_key="sk-test", model="fake-model")
    worker = TaskHubGrpcWorker(host_address=address)
    agents = DurableAIAgentWorker(worker)
    agents.add_agent(Agent(client=chat, name="Joker", instructions="You tell jokes."))
    agents.add_agent(Agent(client=chat, name="Writer", instructions="You write short articles."))
    worker.add_activity(notify_user_for_approval)
    worker.add_activity(publish_content)
    worker.add_orchestrator(content_with_approval)
    agents.start()
    print("worker started", flush=True)
    while True:
        time.sleep(1)

client = TaskHubGrpcClient(host_address=address)

if mode == "session":
    # Another process: the agent by name, twice on one session.
    agent = DurableAIAgentClient(client, poll_interval_seconds=0.2, max_poll_retries=300) \
        .get_agent(sys.argv[3])
    session = agent.create_session()
    first = agent.run(f"{sys.argv[3]}, tell me a joke about cats", session=session)
    second = agent.run(f"{sys.argv[3]}, another one, about dogs", session=session)
    print(json.dumps({"first": first.text, "second": second.text,
                      "session": str(session.durable_session_id)}), flush=True)
    sys.exit(0)

if mode == "approval":
    id = client.schedule_new_orchestration(content_with_approval, input="tea")
    deadline = time.time() + 120
    state = client.get_orchestration_state(id)
    while "Requesting human feedback" not in (state.serialized_custom_status or "") \
            and time.time() < deadline:
        time.sleep(0.2)
        state = client.get_orchestration_state(id)
    waiting = state.runtime_status.name
    client.raise_orchestration_event(id, "HumanApproval", data={"approved": True})
    done = client.wait_for_orchestration_completion(id, timeout=120)
    print(json.dumps({"waiting": waiting, "status": done.runtime_status.name,
                      "output": json.loads(done.serialized_output or "null")}), flush=True)
    sys.exit(0)
