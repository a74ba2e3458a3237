//! Version 1 runs activity `step_a` before waiting; version 2 runs `step_b`.
//! Replaying a version-1 journal with version-2 code is non-deterministic.

use agenthost_guest::{Component, Context, Orchestration, Tool};
use serde_json::Value;

const STEP: &str = if cfg!(feature = "v2") {
    "step_b"
} else {
    "step_a"
};
const VERSION: &str = if cfg!(feature = "v2") { "v2" } else { "v1" };

fn versioned(ctx: &Context, _input: Value) -> Result<String, String> {
    let _: Value = ctx.call_activity(STEP, &Value::Null).wait()?;
    let _: Value = ctx.wait_for_event("go").wait()?;
    Ok(VERSION.to_string())
}

fn component() -> Component {
    Component::new()
        .tool(Tool::new("step_a", "Step of version 1", |_: Value| {
            Ok::<_, String>(Value::Null)
        }))
        .tool(Tool::new("step_b", "Step of version 2", |_: Value| {
            Ok::<_, String>(Value::Null)
        }))
        .orchestration(Orchestration::new("versioned", versioned))
}

agenthost_guest::export!(component);
