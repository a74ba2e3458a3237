//! `hostile`: an agent whose tools misbehave on purpose, one way each, so the
//! tests can show what the sandbox does about it. Never deploy this.

use std::collections::BTreeMap;

use agenthost_guest::{Agent, Component, Context, Orchestration, RetryPolicy, Tool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Deserialize, JsonSchema)]
struct Nothing {}

#[derive(Deserialize, JsonSchema)]
struct FilePath {
    /// Absolute path of the file to read.
    path: String,
}

#[derive(Deserialize, JsonSchema)]
struct Url {
    /// `http://host:port/path` to GET.
    url: String,
}

/// Burns CPU until the host interrupts it.
fn spin(_: Nothing) -> Result<Value, String> {
    let mut x: u64 = 0;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

/// Allocates 1 MiB at a time, touching every page, until memory runs out.
fn hog(_: Nothing) -> Result<Value, String> {
    let mut kept: Vec<Vec<u8>> = Vec::new();
    loop {
        kept.push(vec![7u8; 1 << 20]);
        std::hint::black_box(&kept);
    }
}

fn trap(_: Nothing) -> Result<Value, String> {
    panic!("the hostile component trapped on purpose")
}

/// Everything the guest can see of its environment.
fn env(_: Nothing) -> Result<BTreeMap<String, String>, String> {
    Ok(std::env::vars().collect())
}

fn read_file(args: FilePath) -> Result<String, String> {
    std::fs::read_to_string(&args.path).map_err(|e| format!("cannot open {}: {e}", args.path))
}

/// A GET through the SDK's `wasi:http` client: status and body, or the
/// error code the host answered with.
fn fetch(args: Url) -> Result<Value, String> {
    let response = agenthost_guest::http::get(&args.url)?;
    Ok(json!({"status": response.status, "body": response.body}))
}

/// Another component's orchestration reaching for a tool it does not own:
/// `{"activity": "component/name", "input": {...}}`, `{"ok"}` or `{"error"}`.
fn call_other_activity(ctx: &Context, call: Value) -> Result<Value, String> {
    let name = call["activity"].as_str().unwrap_or_default();
    Ok(
        match ctx.call_activity(name, &call["input"]).wait::<Value>() {
            Ok(result) => json!({ "ok": result }),
            Err(e) => json!({ "error": e.to_string() }),
        },
    )
}

/// Writes a line that would forge a host log line (a newline, a fake
/// host record, `\r`, a terminal escape), then floods the log.
fn log_forge(_: Nothing) -> Result<Value, String> {
    use agenthost_guest::{log, Level};
    log(
        Level::Info,
        "harmless\n2026-12-06T00:00:00.000000Z  INFO agenthost::server: FORGED host line\r\u{1b}[31mred",
    );
    for n in 0..5_000 {
        log(Level::Info, &format!("flood line {n}"));
    }
    Ok(json!("logged"))
}

/// Schedules an activity with a retry policy whose coefficient is not a
/// number (`{"coefficient": "nan" | "inf" | "-inf"}`).
fn poisoned_retry(ctx: &Context, input: Value) -> Result<Value, String> {
    let coefficient = match input["coefficient"].as_str() {
        Some("inf") => f64::INFINITY,
        Some("-inf") => f64::NEG_INFINITY,
        _ => f64::NAN,
    };
    let mut policy = RetryPolicy::new(3, std::time::Duration::from_millis(50));
    policy.backoff_coefficient = coefficient;
    ctx.call_activity("trap", &json!({}))
        .retry(policy)
        .wait::<Value>()
        .map_err(|e| e.to_string())
}

#[derive(Deserialize, JsonSchema)]
struct Size {
    /// How many bytes.
    bytes: usize,
}

/// A result of `bytes` bytes.
fn big_result(args: Size) -> Result<Value, String> {
    Ok(json!("x".repeat(args.bytes)))
}

/// Schedules one activity with a large result and awaits it `times` times
/// in one await-all (`{"times": N, "bytes": M}`).
fn await_repeated(ctx: &Context, input: Value) -> Result<Value, String> {
    let times = input["times"].as_u64().unwrap_or(2) as usize;
    let bytes = input["bytes"].as_u64().unwrap_or(1024);
    let task = ctx
        .call_activity("big_result", &json!({ "bytes": bytes }))
        .schedule::<Value>();
    let id = agenthost_guest::Pending::task_id(&task);
    // The SDK's own when_all names each task once; the raw import does not.
    let results = agenthost_guest::bindings::agenthost::host::durable::await_all(&vec![id; times]);
    Ok(json!(results.len()))
}

/// Schedules an activity that fails, retried once after `delay_ms`
/// (`{"delay_ms": N}`): the instance waits on a delayed retry meanwhile.
fn slow_retry(ctx: &Context, input: Value) -> Result<Value, String> {
    let delay = input["delay_ms"].as_u64().unwrap_or(2_000);
    ctx.call_activity("trap", &json!({}))
        .retry(RetryPolicy::new(2, std::time::Duration::from_millis(delay)))
        .wait::<Value>()
        .map_err(|e| e.to_string())
}

/// Continues as new at once, forever: its input is its generation.
fn forever_new(ctx: &Context, generation: u64) -> Result<Value, String> {
    ctx.continue_as_new(&(generation + 1));
    Ok(json!(generation))
}

#[derive(Deserialize, JsonSchema)]
struct Millis {
    /// How long, in milliseconds.
    ms: u64,
}

/// Blocks its thread for `ms` (no CPU: a host slot held while it sleeps).
fn nap(args: Millis) -> Result<Value, String> {
    std::thread::sleep(std::time::Duration::from_millis(args.ms));
    Ok(json!("rested"))
}

/// Schedules `count` activities that each sleep `ms`, and awaits them all
/// (`{"count": N, "ms": M}`): they hold that many host slots meanwhile.
fn nap_flood(ctx: &Context, input: Value) -> Result<Value, String> {
    let count = input["count"].as_u64().unwrap_or(8);
    let ms = input["ms"].as_u64().unwrap_or(1_000);
    let naps = (0..count)
        .map(|_| {
            ctx.call_activity("nap", &json!({ "ms": ms }))
                .schedule::<Value>()
        })
        .collect();
    let done = ctx.when_all(naps).map_err(|e| e.to_string())?;
    Ok(json!(done.len()))
}

/// Waits for `go`, the event `orchestration-tests`' `wait_event` waits for,
/// and declares the route `evil/{instanceId}` that raises it: the route
/// must reach this component's own instances, never another's.
fn evil_route(ctx: &Context, _input: Value) -> Result<Value, String> {
    let payload: Value = ctx.wait_for_event("go").wait()?;
    Ok(payload)
}

/// Asks `writer` in the conversation `{"session": ID}` names: one another
/// caller started, if the attack works.
fn join_session(_ctx: &Context, input: Value) -> Result<Value, String> {
    use agenthost_guest::bindings::agenthost::host::durable as raw;
    let session = input["session"].as_str().unwrap_or_default().to_string();
    let task = raw::call_agent("writer", "what did I tell you?", Some(&session), None, None);
    raw::await_(task).map(Value::String)
}

fn component() -> Component {
    // Granted this variable, it blocks while being described: the host's
    // describe() limit must stop it and keep loading the others.
    if std::env::var("HOSTILE_BLOCK_DESCRIBE").is_ok() {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
    Component::new()
        .agent(
            Agent::new("hostile")
                .description("Misbehaves on purpose, to test the sandbox")
                .instructions("Call the tool the user names.")
                .tool("spin")
                .tool("hog")
                .tool("trap")
                .tool("env")
                .tool("read_file")
                .tool("fetch")
                .tool("log_forge")
                .tool("big_result"),
        )
        .tool(Tool::new("spin", "Loops forever", spin))
        .tool(Tool::new("hog", "Allocates memory without bound", hog))
        .tool(Tool::new("trap", "Traps", trap))
        .tool(Tool::new("env", "Returns the whole environment", env))
        .tool(Tool::new("read_file", "Reads a file", read_file))
        .tool(Tool::new("fetch", "GETs a URL", fetch))
        .tool(Tool::new(
            "big_result",
            "Returns a large result",
            big_result,
        ))
        .tool(Tool::new(
            "log_forge",
            "Forges a host log line, then floods the log",
            log_forge,
        ))
        .orchestration(Orchestration::new(
            "call_other_activity",
            call_other_activity,
        ))
        .orchestration(Orchestration::new("poisoned_retry", poisoned_retry))
        .orchestration(Orchestration::new("await_repeated", await_repeated))
        .orchestration(Orchestration::new("join_session", join_session))
        .orchestration(Orchestration::new("slow_retry", slow_retry))
        .orchestration(Orchestration::new("forever_new", forever_new))
        .tool(Tool::new("nap", "Sleeps, blocking its thread", nap))
        .orchestration(Orchestration::new("nap_flood", nap_flood))
        .orchestration(
            Orchestration::new("evil_route", evil_route).event_route("evil/{instanceId}", "go"),
        )
}

agenthost_guest::export!(component);
