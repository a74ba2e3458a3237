"""The a2a-sdk (A2A 1.0) Python client against a running agenthost.

Driven by tests/a2a.rs, which starts the host with a fake model whose
replies it scripted in the order of the steps below. Each step prints one
JSON line; the Rust test checks them (and the model's requests). Any
exception fails the process.
"""

import asyncio
import json
import sys

import httpx
from a2a.client import A2ACardResolver, ClientCallContext, ClientConfig, create_client
from a2a.helpers import new_text_message
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from google.protobuf.json_format import MessageToDict, ParseDict

BASE = sys.argv[1]
AGENT = BASE + "/a2a/clerk"


def out(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def state(task):
    return TaskState.Name(task.status.state)


def texts(parts):
    return "".join(p.text for p in parts)


def streamed_text(items):
    return "".join(
        texts(i.artifact_update.artifact.parts) for i in items if i.HasField("artifact_update")
    )


async def send(client, text, context=None, config=None):
    message = new_text_message(text, context_id=context, role=Role.ROLE_USER)
    request = SendMessageRequest(message=message, configuration=config)
    return [item async for item in client.send_message(request)]


async def main():
    http = httpx.AsyncClient(timeout=60.0)
    card = await A2ACardResolver(http, AGENT).get_agent_card()
    assert card.capabilities.streaming
    out("card", name=card.name, url=card.supported_interfaces[0].url,
        binding=card.supported_interfaces[0].protocol_binding,
        skills=[s.id for s in card.skills])

    blocking = await create_client(AGENT, client_config=ClientConfig(httpx_client=http, streaming=False))
    streaming = await create_client(AGENT, client_config=ClientConfig(httpx_client=http))

    [first] = await send(blocking, "hello")
    task = first.task
    context = task.context_id
    out("send", task=task.id, context=context, state=state(task),
        answer=texts(task.artifacts[0].parts))

    [again] = await send(blocking, "again", context=context)
    out("continue", context=again.task.context_id, state=state(again.task),
        answer=texts(again.task.artifacts[0].parts))

    items = await send(streaming, "stream me", context=context)
    out("stream", kinds=[i.WhichOneof("payload") for i in items], text=streamed_text(items),
        first=state(items[0].task), last=state(items[-1].status_update))

    got = await blocking.get_task(GetTaskRequest(id=task.id, history_length=1))
    out("get", state=state(got), history=len(got.history),
        last=texts(got.history[-1].parts) if got.history else None)

    page = await blocking.list_tasks(ListTasksRequest(context_id=context, page_size=2))
    rest = await blocking.list_tasks(
        ListTasksRequest(context_id=context, page_size=2, page_token=page.next_page_token))
    out("list", first=[t.id for t in page.tasks], second=[t.id for t in rest.tasks],
        more=page.next_page_token != "", end=rest.next_page_token)

    polling = await create_client(
        AGENT, client_config=ClientConfig(httpx_client=http, streaming=False, polling=True))
    [slow] = await send(polling, "slow")
    # The test cancels once the model was asked (so that the reply scripted
    # for this task is the one it took): it says so on stdin.
    out("slow", task=slow.task.id)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    canceled = await blocking.cancel_task(CancelTaskRequest(id=slow.task.id))
    out("cancel", submitted=state(slow.task), state=state(canceled))
    try:
        await blocking.cancel_task(CancelTaskRequest(id=slow.task.id))
        out("cancel-again", error=None)
    except Exception as e:
        out("cancel-again", error=type(e).__name__)

    try:
        await blocking.get_task(GetTaskRequest(id="no-such-task"))
        out("unknown", error=None)
    except Exception as e:
        out("unknown", error=type(e).__name__, data=getattr(e, "data", None))

    [asked] = await send(blocking, "Refund order A1.")
    waiting = asked.task
    pending = [MessageToDict(p.data) for p in waiting.status.message.parts if p.HasField("data")]
    decision = ParseDict({
        "messageId": "decision-1",
        "role": "ROLE_USER",
        "taskId": waiting.id,
        "contextId": waiting.context_id,
        "parts": [{"data": {"approvals": [{"callId": "call_refund", "approved": True}]}}],
    }, Message())
    [decided] = [i async for i in blocking.send_message(SendMessageRequest(message=decision))]
    out("approval", waiting=state(waiting), pending=pending, same=decided.task.id == waiting.id,
        state=state(decided.task), answer=texts(decided.task.artifacts[0].parts))

    # A stream dropped after two pieces of the answer, then resubscribed.
    before = []
    stream = streaming.send_message(
        SendMessageRequest(message=new_text_message("long", role=Role.ROLE_USER)))
    async for item in stream:
        before.append(item)
        if sum(1 for i in before if i.HasField("artifact_update")) >= 2:
            break
    await stream.aclose()
    long_id = before[0].task.id
    after = [item async for item in streaming.subscribe(
        SubscribeToTaskRequest(id=long_id), context=ClientCallContext(timeout=60))]
    snapshot = "".join(texts(a.parts) for a in after[0].task.artifacts)
    out("resubscribe", before=streamed_text(before), snapshot=snapshot,
        rest=streamed_text(after[1:]), first=after[0].WhichOneof("payload"),
        last=state(after[-1].status_update))

    # The HTTP+JSON binding: the same calls, bare bodies.
    rest = await create_client(AGENT, client_config=ClientConfig(
        httpx_client=http, streaming=False, supported_protocol_bindings=["HTTP+JSON"]))
    rest_streaming = await create_client(AGENT, client_config=ClientConfig(
        httpx_client=http, supported_protocol_bindings=["HTTP+JSON"]))
    [sent_rest] = [i async for i in rest.send_message(SendMessageRequest(
        message=new_text_message("rest hello", context_id="rest-ctx", role=Role.ROLE_USER),
        configuration=SendMessageConfiguration(return_immediately=False)))]
    got_rest = await rest.get_task(GetTaskRequest(id=sent_rest.task.id))
    listed_rest = await rest.list_tasks(ListTasksRequest(context_id="rest-ctx"))
    try:
        await rest.cancel_task(CancelTaskRequest(id="no-such-task"))
        missing = None
    except Exception as e:
        missing = type(e).__name__
    try:
        await rest.cancel_task(CancelTaskRequest(id=sent_rest.task.id))
        ended = None
    except Exception as e:
        ended = type(e).__name__
    streamed_rest = [i async for i in rest_streaming.send_message(SendMessageRequest(
        message=new_text_message("rest stream", context_id="rest-ctx", role=Role.ROLE_USER)))]
    out("rest", state=state(sent_rest.task), answer=texts(sent_rest.task.artifacts[0].parts),
        got=state(got_rest), listed=[t.id for t in listed_rest.tasks], missing=missing, ended=ended,
        streamed=streamed_text(streamed_rest), last=state(streamed_rest[-1].status_update))

    raw = httpx.AsyncClient(timeout=10.0)
    answer = (await raw.post(AGENT, json={
        "jsonrpc": "2.0", "id": "v", "method": "GetTask", "params": {"id": task.id}})).json()
    out("no-version", code=answer["error"]["code"],
        reason=answer["error"]["data"][0]["reason"])
    await raw.aclose()
    await http.aclose()


asyncio.run(main())
