//! `spam`: a detector agent returns a structured verdict; a confident "spam"
//! blocks the email, anything else gets a reply drafted by an assistant agent
//! and "sent" by an activity. Shows structured output driving control flow.

use agenthost_guest::{Agent, Component, Context, Orchestration, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The detector's structured answer.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
struct SpamVerdict {
    is_spam: bool,
    /// From 0 (unsure) to 1 (certain).
    confidence: f64,
    reason: String,
}

#[derive(Deserialize)]
struct Email {
    #[serde(default)]
    id: Option<String>,
    content: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Block {
    email_id: String,
    reason: String,
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Send {
    email_id: String,
    body: String,
}

#[derive(Serialize)]
struct Outcome {
    action: &'static str,
    email_id: String,
    verdict: SpamVerdict,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply: Option<String>,
    result: serde_json::Value,
}

fn spam(ctx: &Context, email: Email) -> Result<Outcome, String> {
    let email_id = email.id.unwrap_or_else(|| ctx.new_guid());
    let verdict: SpamVerdict = ctx
        .call_agent(
            "spam_detector",
            format!("Is this email spam?\n\n{}", email.content),
        )
        .wait_as()?;
    if verdict.is_spam && verdict.confidence > 0.8 {
        let result = ctx
            .call_activity(
                "block_email",
                &Block {
                    email_id: email_id.clone(),
                    reason: verdict.reason.clone(),
                },
            )
            .wait()?;
        return Ok(Outcome {
            action: "blocked",
            email_id,
            verdict,
            reply: None,
            result,
        });
    }
    let reply = ctx
        .call_agent(
            "email_assistant",
            format!(
                "Draft a short, polite reply to this email:\n\n{}",
                email.content
            ),
        )
        .wait()?;
    let result = ctx
        .call_activity(
            "send_email",
            &Send {
                email_id: email_id.clone(),
                body: reply.clone(),
            },
        )
        .wait()?;
    Ok(Outcome {
        action: "replied",
        email_id,
        verdict,
        reply: Some(reply),
        result,
    })
}

fn block_email(block: Block) -> Result<serde_json::Value, String> {
    Ok(serde_json::json!({"blocked": block.email_id, "reason": block.reason}))
}

fn send_email(send: Send) -> Result<serde_json::Value, String> {
    if send.body.trim().is_empty() {
        return Err("refusing to send an empty reply".into());
    }
    Ok(serde_json::json!({"sent": send.email_id, "characters": send.body.chars().count()}))
}

fn component() -> Component {
    Component::new()
        .agent(
            Agent::new("spam_detector")
                .description("Classifies emails as spam or not")
                .instructions("You detect spam. Judge the email and answer with is_spam, your confidence (0-1) and a short reason."),
        )
        .agent(
            Agent::new("email_assistant")
                .description("Drafts replies to legitimate emails")
                .instructions("You draft short, polite, helpful email replies."),
        )
        .tool(Tool::new("block_email", "Moves an email to the spam folder", block_email))
        .tool(Tool::new("send_email", "Sends a reply to an email", send_email))
        .orchestration(Orchestration::new("spam", spam).description("Detects spam, then blocks it or replies"))
}

agenthost_guest::export!(component);
