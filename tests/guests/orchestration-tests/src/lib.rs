//! Orchestrations that exercise the durable engine in tests and benchmarks.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use agenthost_guest::{Agent, Approval, Component, Context, Orchestration, RetryPolicy, Tool};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// Values ordinary Rust code would see differently on every run, were the
/// host not to make them deterministic.
fn ambient() -> Value {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let random: u64 = rand::random();
    let map: HashMap<String, u32> = (0..8).map(|i| (format!("key{i}"), i)).collect();
    let order: Vec<String> = map.keys().cloned().collect();
    json!({"now_ms": now, "random": random, "map_order": order})
}

/// Passes ambient values through an activity, then waits: after the event
/// the code replays, and must compute the very same values again.
fn determinism(ctx: &Context, _input: Value) -> Result<Value, String> {
    let observed = ambient();
    let echoed: Value = ctx.call_activity("echo", &observed).wait()?;
    ctx.set_custom_status(&json!({"echoed": echoed}));
    let _: Value = ctx.wait_for_event("go").wait()?;
    Ok(json!({"observed": observed, "echoed": echoed}))
}

fn wait_event(ctx: &Context, _input: Value) -> Result<Value, String> {
    ctx.set_custom_status(&"waiting");
    let payload: Value = ctx.wait_for_event("go").wait()?;
    Ok(payload)
}

/// Two events of one name, delivered in the order raised.
fn two_events(ctx: &Context, _input: Value) -> Result<Vec<Value>, String> {
    let first: Value = ctx.wait_for_event("step").wait()?;
    let second: Value = ctx.wait_for_event("step").wait()?;
    Ok(vec![first, second])
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Count {
    n: Option<u32>,
}

#[derive(Deserialize)]
struct Collect {
    n: u32,
}

/// `n` events named `item`, each followed by an activity: events arrive
/// while the episodes that take them run.
fn collect(ctx: &Context, input: Collect) -> Result<Vec<u32>, String> {
    let mut items = Vec::new();
    for _ in 0..input.n {
        let item: u32 = ctx.wait_for_event("item").wait()?;
        items.push(ctx.call_activity("instant", &item).wait::<u32>()?);
    }
    Ok(items)
}

/// `n` activities one after the other.
fn sequence(ctx: &Context, input: Option<Count>) -> Result<u32, String> {
    let n = input.and_then(|c| c.n).unwrap_or(10);
    let mut total = 0;
    for i in 0..n {
        total += ctx.call_activity("instant", &i).wait::<u32>()?;
    }
    Ok(total)
}

#[derive(Deserialize)]
struct Counted {
    n: u32,
    /// Each step GETs `{url}/{step}`: a test server counts the runs.
    url: String,
    /// Each step first waits this long (`late_hit`): a test can pause its
    /// host before the request leaves.
    #[serde(default)]
    wait_ms: Option<u64>,
}

/// Arguments of `late_hit`.
#[derive(Deserialize, JsonSchema)]
struct LateHit {
    url: String,
    wait_ms: u64,
}

/// `n` activities one after the other, each reporting that it ran: step
/// `k + 1` starts only once step `k`'s result is committed, so a test can
/// tell a repeat of finished work from a repeat of work in flight.
fn counted(ctx: &Context, input: Counted) -> Result<u32, String> {
    for step in 0..input.n {
        let url = format!("{}/{step}", input.url);
        match input.wait_ms {
            None => ctx.call_activity("hit", &url).wait::<u16>()?,
            Some(wait_ms) => ctx
                .call_activity("late_hit", &json!({"url": url, "wait_ms": wait_ms}))
                .wait::<u16>()?,
        };
    }
    Ok(input.n)
}

/// `n` activities at once.
fn fanout(ctx: &Context, input: Option<Count>) -> Result<u32, String> {
    let n = input.and_then(|c| c.n).unwrap_or(100);
    let tasks = (0..n)
        .map(|i| ctx.call_activity("instant", &i).schedule::<u32>())
        .collect();
    Ok(ctx.when_all(tasks)?.into_iter().sum())
}

fn parent(ctx: &Context, input: Value) -> Result<Value, String> {
    let child: Value = ctx.call_orchestration("child", &input).wait()?;
    Ok(json!({"child said": child}))
}

/// Calls sub-orchestration `{"name": NAME, "input": ...}` by name, served
/// by any component or a Durable Task SDK worker.
fn parent_of(ctx: &Context, call: Value) -> Result<Value, String> {
    let name = call["name"].as_str().unwrap_or_default();
    let child: Value = ctx.call_orchestration(name, &call["input"]).wait()?;
    Ok(json!({"child said": child}))
}

fn child(_ctx: &Context, input: Value) -> Result<Value, String> {
    Ok(json!({"echo": input}))
}

#[derive(Deserialize, Serialize)]
struct Counter {
    count: u32,
    until: u32,
}

fn counter(ctx: &Context, state: Counter) -> Result<u32, String> {
    if state.count < state.until {
        ctx.continue_as_new(&Counter {
            count: state.count + 1,
            until: state.until,
        });
    }
    Ok(state.count)
}

/// An agent call retried by the durable engine when its run fails.
fn retrying_agent(ctx: &Context, message: String) -> Result<String, String> {
    Ok(ctx
        .call_agent("writer", message)
        .retry(RetryPolicy::new(3, Duration::from_millis(200)))
        .wait()?)
}

fn failing_activity(ctx: &Context, _input: Value) -> Result<Value, String> {
    ctx.call_activity("fail", &json!({}))
        .retry(RetryPolicy::new(2, Duration::from_millis(50)))
        .wait()
        .map_err(|e| format!("caught: {e}"))
}

fn failing(_ctx: &Context, _input: Value) -> Result<Value, String> {
    Err("the orchestration gave up".into())
}

fn big_output(_ctx: &Context, bytes: usize) -> Result<String, String> {
    Ok("x".repeat(bytes))
}

/// Asks the writer once: a reused instance id must ask again.
fn ask_writer(ctx: &Context, message: String) -> Result<String, String> {
    Ok(ctx.call_agent("writer", message).wait()?)
}

#[derive(Deserialize, Serialize)]
struct Generations {
    generation: u32,
    until: u32,
    answers: Vec<String>,
}

/// Calls the writer once per generation of a continue-as-new loop; every
/// generation must get its own answer, never the previous one's.
fn agent_loop(ctx: &Context, mut state: Generations) -> Result<Vec<String>, String> {
    let answer = ctx
        .call_agent("writer", format!("generation {}", state.generation))
        .wait()?;
    state.answers.push(answer);
    if state.generation < state.until {
        state.generation += 1;
        ctx.continue_as_new(&state);
    }
    Ok(state.answers)
}

/// Blocks in its own code: the episode's wall-clock limit must stop it.
fn sleeper(_ctx: &Context, _input: Value) -> Result<Value, String> {
    std::thread::sleep(Duration::from_secs(3600));
    Ok(json!("woke up"))
}

/// Spins in its code: the episode's CPU budget must stop it.
fn spinner(_ctx: &Context, _input: Value) -> Result<Value, String> {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
        if n == u64::MAX {
            return Ok(json!(n));
        }
    }
}

/// Asks for endless, instant retries: the host must cap them.
fn greedy_retry(ctx: &Context, _input: Value) -> Result<Value, String> {
    let policy = RetryPolicy {
        max_attempts: u32::MAX,
        first_delay: Duration::ZERO,
        backoff_coefficient: 1.0,
        max_delay: Duration::ZERO,
    };
    ctx.call_activity("fail", &json!({}))
        .retry(policy)
        .wait()
        .map_err(|e| e.to_string())
}

/// Waits on one durable timer of `ms`.
fn timer(ctx: &Context, ms: u64) -> Result<u64, String> {
    ctx.timer(Duration::from_millis(ms)).wait()?;
    Ok(ms)
}

/// Calls an activity that always fails, 3 attempts `ms` apart; whether it
/// failed in the end.
fn retry_backoff(ctx: &Context, ms: u64) -> Result<bool, String> {
    let policy = RetryPolicy {
        max_attempts: 3,
        first_delay: Duration::from_millis(ms),
        backoff_coefficient: 1.0,
        max_delay: Duration::from_millis(ms),
    };
    Ok(ctx
        .call_activity("fail", &json!({}))
        .retry(policy)
        .wait::<Value>()
        .is_err())
}

/// Two waits for one event name awaited together: each takes its own event.
fn both_waits(ctx: &Context, _input: Value) -> Result<Vec<Value>, String> {
    let a = ctx.wait_for_event("step");
    let b = ctx.wait_for_event("step");
    ctx.set_custom_status(&"waiting");
    Ok(ctx.when_all(vec![a, b])?)
}

#[derive(Deserialize, Serialize, JsonSchema)]
struct Anything(Value);

/// Arguments of `refund`, a tool a human must approve.
#[derive(Deserialize, JsonSchema)]
struct Refund {
    /// The order to refund.
    order: String,
    /// The amount, in cents.
    amount: u32,
}

/// Calls the agent and the activity its input names, served or not: what
/// orchestration code can name must not become a metric label.
fn call_named(ctx: &Context, names: Value) -> Result<Value, String> {
    let agent = names["agent"].as_str().unwrap_or_default().to_string();
    let activity = names["activity"].as_str().unwrap_or_default();
    let asked = ctx.call_agent(&agent, "hello").wait();
    let ran = ctx.call_activity(activity, &json!({})).wait::<Value>();
    Ok(json!({"agent": asked.is_ok(), "activity": ran.is_ok()}))
}

/// Asks the `clerk` agent, whose `refund` tool needs a human's approval.
fn ask_clerk(ctx: &Context, message: String) -> Result<String, String> {
    Ok(ctx.call_agent("clerk", message).wait()?)
}

/// Asks a remote A2A agent: `{"card": URL, "message": text, "context"?: id}`.
fn remote_call(ctx: &Context, input: Value) -> Result<Value, String> {
    let card = input["card"].as_str().unwrap_or_default();
    let message = input["message"].as_str().unwrap_or("hello").to_string();
    let mut call = ctx.call_remote_agent(card, message);
    if let Some(context) = input["context"].as_str() {
        call = call.context(context);
    }
    let answer = call.wait()?;
    Ok(json!({ "answer": answer }))
}

/// Calls activity `{"activity": name, "input": {...}}` (of any component the
/// host serves) and returns `{"ok": result}` or `{"error": why}`.
fn call_activity_of(ctx: &Context, call: Value) -> Result<Value, String> {
    let name = call["activity"].as_str().unwrap_or_default();
    // `"wait": EVENT` waits for that event first (the callee may change
    // meanwhile).
    if let Some(event) = call["wait"].as_str() {
        let _: Value = ctx.wait_for_event(event).wait()?;
    }
    // `"again": true` then continues as new, which makes the call.
    if call["again"] == json!(true) {
        ctx.continue_as_new(&json!({"activity": name, "input": call["input"]}));
        return Ok(Value::Null);
    }
    let called = ctx.call_activity(name, &call["input"]).wait::<Value>();
    // `"strict": true` fails the orchestration with the activity's failure.
    if call["strict"] == json!(true) {
        return Ok(json!({ "ok": called.map_err(|e| e.to_string())? }));
    }
    Ok(match called {
        Ok(result) => json!({ "ok": result }),
        Err(e) => json!({ "error": e.to_string() }),
    })
}

fn component() -> Component {
    Component::new()
        .agent(
            // Describes its own model settings and session expiry.
            Agent::new("tuned")
                .description("An agent with settings of its own")
                .temperature(0.7)
                .max_output_tokens(55)
                .session_ttl(Some(Duration::from_secs(1)))
                .history_budget_tokens(5_000),
        )
        .agent(
            Agent::new("clerk")
                .description("Handles refunds; every refund needs a human's approval")
                .instructions("Refund orders when asked.")
                .tool("refund"),
        )
        .agent(
            // Fetches what it is asked with a tool that waits before its
            // request: a test can pause its host inside the tool.
            Agent::new("fetcher")
                .description("Fetches URLs, slowly")
                .instructions("Fetch what you are asked to.")
                .tool("late_hit"),
        )
        .tool(
            Tool::new("refund", "Refunds an order", |r: Refund| {
                Ok::<_, String>(json!({"refunded": r.order, "amount": r.amount}))
            })
            .approval(Approval::AlwaysRequire),
        )
        .tool(Tool::new("echo", "Returns its input", |v: Anything| {
            Ok::<_, String>(v.0)
        }))
        .tool(Tool::new(
            "instant",
            "Returns its input number",
            |n: u32| Ok::<_, String>(n),
        ))
        .tool(Tool::new(
            "hit",
            "GETs a URL, returns the status",
            |url: String| agenthost_guest::http::get(&url).map(|r| r.status),
        ))
        .tool(Tool::new(
            "late_hit",
            "Waits, then GETs a URL; returns the status",
            |hit: LateHit| {
                std::thread::sleep(Duration::from_millis(hit.wait_ms));
                agenthost_guest::http::get(&hit.url).map(|r| r.status)
            },
        ))
        .tool(Tool::new("fail", "Always fails", |_: Anything| {
            Err::<Value, _>("this activity always fails")
        }))
        .orchestration(Orchestration::new("determinism", determinism))
        .orchestration(
            Orchestration::new("wait_event", wait_event).event_route("go/{instanceId}", "go"),
        )
        .orchestration(Orchestration::new("two_events", two_events))
        .orchestration(Orchestration::new("sequence", sequence))
        .orchestration(Orchestration::new("fanout", fanout))
        .orchestration(Orchestration::new("counted", counted))
        .orchestration(Orchestration::new("collect", collect))
        .orchestration(Orchestration::new("parent", parent))
        .orchestration(Orchestration::new("child", child))
        .orchestration(Orchestration::new("parent_of", parent_of))
        .orchestration(Orchestration::new("counter", counter))
        .orchestration(Orchestration::new("retrying_agent", retrying_agent))
        .orchestration(Orchestration::new("failing_activity", failing_activity))
        .orchestration(Orchestration::new("failing", failing))
        .orchestration(Orchestration::new("big_output", big_output))
        .orchestration(Orchestration::new("ask_writer", ask_writer))
        .orchestration(Orchestration::new("ask_clerk", ask_clerk))
        .orchestration(Orchestration::new("call_named", call_named))
        .orchestration(Orchestration::new("agent_loop", agent_loop))
        .orchestration(Orchestration::new("sleeper", sleeper))
        .orchestration(Orchestration::new("spinner", spinner))
        .orchestration(Orchestration::new("greedy_retry", greedy_retry))
        .orchestration(Orchestration::new("both_waits", both_waits))
        .orchestration(Orchestration::new("timer", timer))
        .orchestration(Orchestration::new("retry_backoff", retry_backoff))
        .orchestration(Orchestration::new("remote_call", remote_call))
        .orchestration(Orchestration::new("call_activity_of", call_activity_of))
}

agenthost_guest::export!(component);
