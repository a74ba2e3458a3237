//! Version 1 runs activity `step_a` before waiting; version 2 runs `step_b`.
//! Replaying a version-1 journal with version-2 code is non-deterministic.
//! A granted `VERSIONED_STEP` variable overrides the step, so one version can
//! be made non-deterministic across a restart too.

use agenthost_guest::{Agent, Component, Context, Orchestration, Tool};
use serde_json::Value;

const STEP: &str = if cfg!(feature = "v2") {
    "step_b"
} else {
    "step_a"
};
const VERSION: &str = if cfg!(feature = "v2") { "v2" } else { "v1" };

fn versioned(ctx: &Context, _input: Value) -> Result<String, String> {
    let step = std::env::var("VERSIONED_STEP").unwrap_or_else(|_| STEP.to_string());
    let _: Value = ctx.call_activity(&step, &Value::Null).wait()?;
    let _: Value = ctx.wait_for_event("go").wait()?;
    Ok(VERSION.to_string())
}

/// Waits for `next`; the first round continues as new, the second returns
/// the version that ran it.
fn eternal(ctx: &Context, input: Value) -> Result<String, String> {
    let _: Value = ctx.wait_for_event("next").wait()?;
    if input.as_u64().unwrap_or(0) == 0 {
        ctx.continue_as_new(&1);
        return Ok(String::new());
    }
    Ok(VERSION.to_string())
}

fn component() -> Component {
    Component::new()
        .agent(
            Agent::new("versioned")
                .description("Says which version of the component answers")
                .instructions("Call the version tool and report what it returns.")
                .tool("version"),
        )
        .tool(Tool::new(
            "version",
            "The component's version",
            |_: Value| Ok::<_, String>(VERSION),
        ))
        .tool(Tool::new("step_a", "Step of version 1", |_: Value| {
            Ok::<_, String>(Value::Null)
        }))
        .tool(Tool::new("step_b", "Step of version 2", |_: Value| {
            Ok::<_, String>(Value::Null)
        }))
        .orchestration(Orchestration::new("versioned", versioned))
        .orchestration(Orchestration::new("eternal", eternal))
}

agenthost_guest::export!(component);
