//! `chaining`: two calls to `writer` on one session. The second sees the
//! first exchange, so "improve it" refers to the sentence just written.
//! Also started by `POST /api/writer/run`.

use agenthost_guest::{Component, Context, Orchestration};
use serde_json::Value;

fn chaining(ctx: &Context, _input: Value) -> Result<String, String> {
    let session = ctx.new_session("writer");
    let first = ctx
        .call_agent(
            "writer",
            "Write a concise inspirational sentence about learning.",
        )
        .session(&session)
        .wait()?;
    let improved = ctx
        .call_agent(
            "writer",
            format!("Improve this further while keeping it under 25 words: {first}"),
        )
        .session(&session)
        .wait()?;
    Ok(improved)
}

fn component() -> Component {
    Component::new().orchestration(
        Orchestration::new("chaining", chaining)
            .description("Writes a sentence about learning, then improves it on the same session")
            .route("writer/run"),
    )
}

agenthost_guest::export!(component);
