//! `approval`: human in the loop. The writer drafts; the orchestration shows
//! the draft in its custom status and waits for `approval_received` racing a
//! timer (24 hours unless the input says otherwise). Approved: published.
//! Rejected: one revision using the feedback. Timer first: escalated.
//! Approve with `POST /api/approval/{instanceId}` and `{"approved": true}`.

use std::time::Duration;

use agenthost_guest::{Component, Context, Orchestration};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Refused at start (400) when it does not match: its schema is exported.
#[derive(Deserialize, JsonSchema)]
struct Request {
    topic: String,
    /// How long to wait for a human; 24 hours by default.
    #[serde(default)]
    timeout_seconds: Option<u64>,
}

#[derive(Deserialize)]
struct Decision {
    approved: bool,
    #[serde(default)]
    feedback: Option<String>,
}

#[derive(Serialize)]
struct Outcome {
    status: &'static str,
    content: String,
}

const DAY: u64 = 24 * 60 * 60;

fn approval(ctx: &Context, request: Request) -> Result<Outcome, String> {
    let session = ctx.new_session("writer");
    let draft = ctx
        .call_agent(
            "writer",
            format!("Write a short piece about {}.", request.topic),
        )
        .session(&session)
        .wait()?;
    ctx.set_custom_status(&serde_json::json!({"state": "awaiting_approval", "draft": draft}));
    let decision = ctx.wait_for_event::<Decision>("approval_received");
    let timeout = ctx.timer(Duration::from_secs(request.timeout_seconds.unwrap_or(DAY)));
    if ctx.when_any(&[&decision, &timeout]) == 1 {
        ctx.set_custom_status(&serde_json::json!({"state": "escalated"}));
        return Ok(Outcome {
            status: "escalated",
            content: draft,
        });
    }
    let decision = decision.wait()?;
    if decision.approved {
        ctx.set_custom_status(&serde_json::json!({"state": "published"}));
        return Ok(Outcome {
            status: "published",
            content: draft,
        });
    }
    let feedback = decision
        .feedback
        .unwrap_or_else(|| "Make it better.".into());
    let revised = ctx
        .call_agent(
            "writer",
            format!("Revise the piece using this feedback: {feedback}"),
        )
        .session(&session)
        .wait()?;
    ctx.set_custom_status(&serde_json::json!({"state": "revised"}));
    Ok(Outcome {
        status: "revised",
        content: revised,
    })
}

fn component() -> Component {
    Component::new().orchestration(
        Orchestration::new("approval", approval)
            .description("Drafts content and waits for a human's approval")
            .event_route("approval/{instanceId}", "approval_received")
            .input_schema::<Request>(),
    )
}

agenthost_guest::export!(component);
