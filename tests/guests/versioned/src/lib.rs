//! Version 1 runs activity `step_a` before waiting; version 2 runs `step_b`.
//! Replaying a version-1 journal with version-2 code is non-deterministic.
//! A granted `VERSIONED_STEP` variable overrides the step, so one version can
//! be made non-deterministic across a restart too.
//!
//! Two more builds of version 1, for replay checks: `logged` changes
//! nothing the journal records (a log line, a local renamed) and answers
//! `v1-logged`; `inserted` runs `step_c` between `step_a` and the wait and
//! answers `v1-inserted`.

use agenthost_guest::{Agent, Component, Context, Orchestration, Tool};
use serde_json::Value;

const STEP: &str = if cfg!(feature = "v2") {
    "step_b"
} else {
    "step_a"
};
const VERSION: &str = if cfg!(feature = "v2") {
    "v2"
} else if cfg!(feature = "logged") {
    "v1-logged"
} else if cfg!(feature = "inserted") {
    "v1-inserted"
} else {
    "v1"
};

fn versioned(ctx: &Context, _input: Value) -> Result<String, String> {
    let step = std::env::var("VERSIONED_STEP").unwrap_or_else(|_| STEP.to_string());
    let _: Value = ctx.call_activity(&step, &Value::Null).wait()?;
    if cfg!(feature = "logged") {
        agenthost_guest::log(agenthost_guest::Level::Info, "step done; waiting for go");
    }
    if cfg!(feature = "inserted") {
        let _: Value = ctx.call_activity("step_c", &Value::Null).wait()?;
    }
    let go_signal: Value = ctx.wait_for_event("go").wait()?;
    drop(go_signal);
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
        .tool(Tool::new(
            "step_c",
            "Step inserted into version 1",
            |_: Value| Ok::<_, String>(Value::Null),
        ))
        .orchestration(Orchestration::new("versioned", versioned))
        .orchestration(Orchestration::new("eternal", eternal))
}

agenthost_guest::export!(component);
