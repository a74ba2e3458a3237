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

/// Schedules `count` activities that compute until stopped (`spin`), and
/// awaits them all (`{"count": N}`): the cores taken from everyone else,
/// unless the host shares them by component. Returns how many were stopped.
fn spin_flood(ctx: &Context, input: Value) -> Result<Value, String> {
    let count = input["count"].as_u64().unwrap_or(8);
    let spins: Vec<_> = (0..count)
        .map(|_| ctx.call_activity("spin", &json!({})).schedule::<Value>())
        .collect();
    let stopped = spins
        .into_iter()
        .map(|spin| spin.wait())
        .filter(Result::is_err)
        .count();
    Ok(json!(stopped))
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

/// Returns its input.
fn give_back(args: Value) -> Result<Value, String> {
    Ok(args)
}

#[derive(Deserialize, JsonSchema)]
struct Socket {
    /// `connect` (TCP), `bind` (a TCP listener) or `udp` (one datagram).
    op: String,
    /// `host:port`.
    address: String,
}

/// Opens a socket with the standard library, past the SDK: whatever
/// `wasi:sockets` would let a guest reach without a grant.
fn socket(args: Socket) -> Result<Value, String> {
    let denied = |e: std::io::Error| format!("{} {}: {e}", args.op, args.address);
    match args.op.as_str() {
        "connect" => std::net::TcpStream::connect(&args.address)
            .map(|s| json!({ "connected": format!("{:?}", s.peer_addr()) }))
            .map_err(denied),
        "bind" => std::net::TcpListener::bind(&args.address)
            .map(|l| json!({ "listening": format!("{:?}", l.local_addr()) }))
            .map_err(denied),
        _ => std::net::UdpSocket::bind("0.0.0.0:0")
            .and_then(|s| s.send_to(b"hello", &args.address))
            .map(|n| json!({ "sent": n }))
            .map_err(denied),
    }
}

/// Runs this component's activity `{"activity": name, "input": {...}}`
/// and fails with its failure: the attack's error is the instance's.
fn strict_activity(ctx: &Context, call: Value) -> Result<Value, String> {
    let name = call["activity"].as_str().unwrap_or_default();
    ctx.call_activity(name, &call["input"])
        .wait::<Value>()
        .map_err(|e| e.to_string())
}

/// The environment orchestration code sees.
fn env_in_code(_ctx: &Context, _input: Value) -> Result<BTreeMap<String, String>, String> {
    Ok(std::env::vars().collect())
}

/// What ordinary code would see differently on every run: the clock,
/// randomness (a fresh hasher's keys), a hash map's order.
fn ambient() -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let keyed =
        std::hash::BuildHasher::hash_one(&std::collections::hash_map::RandomState::new(), 7);
    let map: std::collections::HashMap<u32, u32> = (0..16).map(|i| (i, i)).collect();
    let order: Vec<u32> = map.keys().copied().collect();
    json!({ "now_ns": now, "random": keyed, "map_order": order })
}

/// Tries to tell a replay from the first run by the values ordinary code
/// sees, and to act on it: the values are journaled by an activity, a
/// durable timer makes the code replay, and the code compares what it
/// computes again with what it journaled. Had any value changed, it would
/// take a step on replay the first run never took (a non-deterministic
/// instance). Its output says whether anything differed.
fn leak_ambient(ctx: &Context, _input: Value) -> Result<Value, String> {
    let first = ambient();
    let journaled: Value = ctx.call_activity("give_back", &first).wait()?;
    ctx.timer(std::time::Duration::from_millis(50)).wait()?;
    let differed = first != journaled;
    if differed {
        let _: Value = ctx.call_activity("trap", &json!({})).wait()?;
    }
    ctx.timer(std::time::Duration::from_millis(50)).wait()?;
    Ok(json!({ "differed": differed, "journaled": journaled }))
}

/// Blocks its thread in orchestration code for an hour.
fn block(_ctx: &Context, _input: Value) -> Result<Value, String> {
    std::thread::sleep(std::time::Duration::from_secs(3600));
    Ok(json!("woke up"))
}

/// Spins in orchestration code.
fn spin_code(_ctx: &Context, _input: Value) -> Result<Value, String> {
    let mut x: u64 = 1;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        if x == 0 {
            return Ok(json!(x));
        }
    }
}

/// An output written as given: a JSON text, or `Nested(n)` arrays.
enum Output {
    Value(Value),
    Nested(usize),
}

impl serde::Serialize for Output {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        match self {
            Self::Value(value) => value.serialize(serializer),
            Self::Nested(0 | 1) => serializer.serialize_seq(Some(0))?.end(),
            Self::Nested(n) => {
                let mut seq = serializer.serialize_seq(Some(1))?;
                seq.serialize_element(&Self::Nested(n - 1))?;
                seq.end()
            }
        }
    }
}

/// Hands the host a value at `{"place": P}`: the orchestration's `output`,
/// its `custom_status`, an `activity_input`, an `activity_result` (of
/// `big_result` or `deep_result`) or a `continue_as_new` input. The value
/// is `{"shape": "big", "bytes": N}` (a string of N bytes) or `{"shape":
/// "deep", "depth": N}` (N nested arrays).
fn hand_over(ctx: &Context, input: Value) -> Result<Output, String> {
    use agenthost_guest::bindings::agenthost::host::durable as raw;
    let deep = input["shape"] == json!("deep");
    let size = input["depth"]
        .as_u64()
        .or(input["bytes"].as_u64())
        .unwrap_or(2 << 20) as usize;
    // The text of the value, made without recursion.
    let text = if deep {
        format!("{}{}", "[".repeat(size), "]".repeat(size))
    } else {
        format!("\"{}\"", "x".repeat(size))
    };
    match input["place"].as_str().unwrap_or("output") {
        "custom_status" => {
            raw::set_custom_status(&text);
            let _: Value = ctx.call_activity("give_back", &json!(1)).wait()?;
            Ok(Output::Value(json!("status set")))
        }
        "activity_input" => {
            raw::await_(raw::call_activity("give_back", &text, None))?;
            Ok(Output::Value(json!("the activity took it")))
        }
        "activity_result" if deep => {
            let arguments = json!({ "depth": size }).to_string();
            raw::await_(raw::call_activity("deep_result", &arguments, None))?;
            Ok(Output::Value(json!("the result came back")))
        }
        "activity_result" => {
            let arguments = json!({ "bytes": size }).to_string();
            raw::await_(raw::call_activity("big_result", &arguments, None))?;
            Ok(Output::Value(json!("the result came back")))
        }
        "continue_as_new" => {
            if input["again"] == json!(true) {
                return Ok(Output::Value(json!("continued")));
            }
            raw::continue_as_new(&text);
            Ok(Output::Value(json!("continuing")))
        }
        _ if deep => Ok(Output::Nested(size)),
        _ => Ok(Output::Value(json!("x".repeat(size)))),
    }
}

#[derive(Deserialize, JsonSchema)]
struct Depth {
    /// How many arrays, one inside the other.
    depth: usize,
}

/// A result of `depth` nested arrays.
fn deep_result(args: Depth) -> Result<Output, String> {
    Ok(Output::Nested(args.depth))
}

#[derive(Deserialize)]
struct Flood {
    count: u32,
    /// Timers: when they fire, from now.
    #[serde(default)]
    ms: u64,
    /// Activities: scheduled this many at a time, each batch awaited
    /// before the next (0: all at once).
    #[serde(default)]
    batch: u32,
}

/// Schedules `count` durable timers at once, each firing after `ms`, and
/// awaits them all.
fn timer_flood(ctx: &Context, flood: Flood) -> Result<Value, String> {
    let timers = (0..flood.count)
        .map(|_| ctx.timer(std::time::Duration::from_millis(flood.ms)))
        .collect();
    let fired = ctx.when_all(timers).map_err(|e| e.to_string())?;
    Ok(json!(fired.len()))
}

/// Schedules `count` activities at once (each `give_back`), and awaits them all.
fn activity_flood(ctx: &Context, flood: Flood) -> Result<Value, String> {
    let batch = if flood.batch == 0 {
        flood.count
    } else {
        flood.batch
    };
    let mut done = 0;
    let mut next = 0;
    while next < flood.count {
        let end = (next + batch).min(flood.count);
        let calls = (next..end)
            .map(|i| ctx.call_activity("give_back", &i).schedule::<Value>())
            .collect();
        done += ctx.when_all(calls).map_err(|e| e.to_string())?.len();
        next = end;
    }
    Ok(json!(done))
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
        .tool(Tool::new("give_back", "Returns its input", give_back))
        .tool(Tool::new("socket", "Opens a socket past the SDK", socket))
        .tool(Tool::new(
            "deep_result",
            "Returns deeply nested arrays",
            deep_result,
        ))
        .orchestration(Orchestration::new("strict_activity", strict_activity))
        .orchestration(Orchestration::new("env_in_code", env_in_code))
        .orchestration(Orchestration::new("leak_ambient", leak_ambient))
        .orchestration(Orchestration::new("block", block))
        .orchestration(Orchestration::new("spin_code", spin_code))
        .orchestration(Orchestration::new("hand_over", hand_over))
        .orchestration(Orchestration::new("timer_flood", timer_flood))
        .orchestration(Orchestration::new("activity_flood", activity_flood))
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
        .orchestration(Orchestration::new("spin_flood", spin_flood))
        .orchestration(
            Orchestration::new("evil_route", evil_route).event_route("evil/{instanceId}", "go"),
        )
}

agenthost_guest::export!(component);
