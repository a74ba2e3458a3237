"""`approval`, in Python: human in the loop. The writer drafts; the
orchestration shows the draft in its custom status and waits for
`approval_received` racing a timer (24 hours unless the input says
otherwise). Approved: published. Rejected: one revision using the
feedback. Timer first: escalated. Approve with
`POST /api/approval/{instanceId}` and `{"approved": true}`.
The twin of sample-agents/approval (Rust)."""

from dataclasses import dataclass
from typing import Optional

import agenthost
from agenthost import Context, Orchestration

DAY = 24 * 60 * 60


@dataclass
class Request:
    topic: str
    # How long to wait for a human; 24 hours by default.
    timeout_seconds: Optional[int] = None


@dataclass
class Decision:
    approved: bool
    feedback: Optional[str] = None


def approval(ctx: Context, request: Request) -> dict:
    session = ctx.new_session("writer")
    draft = ctx.call_agent(
        "writer", f"Write a short piece about {request.topic}.", session=session
    ).wait()
    ctx.set_custom_status({"state": "awaiting_approval", "draft": draft})
    decision = ctx.wait_for_event("approval_received", result_type=Decision)
    timeout = ctx.timer(DAY if request.timeout_seconds is None else request.timeout_seconds)
    if ctx.when_any([decision, timeout]) == 1:
        ctx.set_custom_status({"state": "escalated"})
        return {"status": "escalated", "content": draft}
    decision = decision.wait()
    if decision.approved:
        ctx.set_custom_status({"state": "published"})
        return {"status": "published", "content": draft}
    feedback = decision.feedback or "Make it better."
    revised = ctx.call_agent(
        "writer", f"Revise the piece using this feedback: {feedback}", session=session
    ).wait()
    ctx.set_custom_status({"state": "revised"})
    return {"status": "revised", "content": revised}


app = agenthost.Component().orchestration(
    Orchestration("approval", approval)
        .description("Drafts content and waits for a human's approval")
        .event_route("approval/{instanceId}", "approval_received")
)

Component, AgentSettings, OrchestrationInputs = agenthost.export(app)
