"""The official MCP Python SDK against a running agenthost (`--mcp`).

Driven by tests/mcp.rs: lists the tools, calls an agent, continues its
thread, starts an orchestration, and calls an unknown tool. Each step prints
one JSON line; any exception fails the process.
"""

import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

URL = sys.argv[1] + "/runtime/webhooks/mcp"


def out(step, **fields):
    print(json.dumps({"step": step, **fields}), flush=True)


def text(result):
    return "".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def main():
    async with streamablehttp_client(URL) as (read, write, _):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out("initialize", server=init.serverInfo.name, version=init.protocolVersion)
            tools = await session.list_tools()
            out("tools", names=[t.name for t in tools.tools],
                schema=next(t.inputSchema for t in tools.tools if t.name == "clerk"))
            first = await session.call_tool("clerk", {"query": "hello"})
            thread = first.structuredContent["threadId"]
            out("call", text=text(first), thread=thread, error=first.isError)
            again = await session.call_tool("clerk", {"query": "again", "threadId": thread})
            out("continue", text=text(again), thread=again.structuredContent["threadId"])
            started = await session.call_tool("start_sequence", {"input": {"n": 3}})
            out("start", id=started.structuredContent["id"],
                url=started.structuredContent["statusQueryGetUri"], error=started.isError)
            try:
                unknown = await session.call_tool("nobody", {"query": "hi"})
                out("unknown", error=unknown.isError, text=text(unknown))
            except Exception as e:
                out("unknown", raised=type(e).__name__, message=str(e))


asyncio.run(main())
