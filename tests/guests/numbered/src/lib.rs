//! `numbered`: an agent and an orchestration that calls it once, both named
//! by [`MARK`]. The cold-start bench (host/benches/cold_start.rs) copies
//! this build N times with the mark's digits rewritten in the bytes (same
//! length), so the copies are N distinct components (their own names and
//! digests: each compiles on its own), as N different components would be.

use agenthost_guest::{Agent, Component, Context, Orchestration};
use serde_json::Value;

/// Rewritten in each copy's bytes; four digits.
const MARK: &str = "numbered-agent-0000";

fn flow(ctx: &Context, _input: Value) -> Result<String, String> {
    Ok(ctx.call_agent(MARK, "Say hello.").wait()?)
}

fn component() -> Component {
    Component::new()
        .agent(
            Agent::new(MARK)
                .description("Answers one message")
                .instructions("You answer in one short sentence."),
        )
        .orchestration(
            Orchestration::new(format!("{MARK}-flow"), flow)
                .description("Calls the component's agent once"),
        )
}

agenthost_guest::export!(component);
