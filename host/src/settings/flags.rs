//! [`Settings`] as flags of `agenthost serve` and `agenthost worker`, each
//! with an `AGENTHOST_*` environment twin. They live beside the settings,
//! not in the command line, because `embed::Builder::new` reads the
//! same environment variables.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser};

use super::{defaults, Secret, Settings};
use crate::durable::OnNewVersion;
use crate::taskhub::{ConnectionString, ConnectionStringError};

#[derive(Debug, Clone, Args)]
pub(crate) struct ServeArgs {
    /// Directory of `.wasm` components to serve.
    #[arg(long, env = "AGENTHOST_COMPONENTS", default_value = defaults::COMPONENTS)]
    pub components: PathBuf,

    /// Watch the components directory: load added or replaced files, unload
    /// deleted ones, without a restart.
    #[arg(long, env = "AGENTHOST_WATCH", default_value_t = true, action = ArgAction::Set)]
    pub watch: bool,

    /// The durable store: `sqlite://PATH` (embedded, one host) or
    /// `postgres://USER@HOST:PORT/DATABASE` (shared by several hosts).
    /// Default: `sqlite://agenthost.db`, or the connection string's Endpoint.
    #[arg(long, env = "AGENTHOST_STORE")]
    pub store: Option<String>,

    /// The task hub: an isolated namespace of instances, sessions, runs and
    /// component versions inside the store. Hosts that share work use the
    /// same hub. Default: `default`, or the connection string's TaskHub.
    #[arg(long, env = "TASKHUB_NAME")]
    pub taskhub: Option<String>,

    /// Further task hubs served beside `--taskhub` (comma-separated), each
    /// isolated: a Durable Task SDK names one in its `taskhub` metadata (a
    /// connection string's TaskHub=), an HTTP caller with `?taskHub=NAME`.
    #[arg(long, env = "AGENTHOST_TASKHUBS", value_delimiter = ',')]
    pub taskhubs: Vec<String>,

    /// Serve any task hub a caller names, created on first use, as the
    /// Durable Task Scheduler emulator's dynamic task hubs (on in
    /// `agenthost dev`). Off: a hub not listed is refused.
    #[arg(long, env = "AGENTHOST_DYNAMIC_TASK_HUBS")]
    pub dynamic_task_hubs: bool,

    /// Task hubs open at once at most (the host's own and those listed
    /// included): each holds its store's connections and a scheduler, so a
    /// caller naming new hubs one after another stops here.
    #[arg(long, env = "AGENTHOST_MAX_TASK_HUBS", default_value_t = 32, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_task_hubs: u16,

    /// `Endpoint=<store URL>;TaskHub=<name>;Authentication=None`, as set for
    /// Durable Task Scheduler; `--store` and `--taskhub` win over it.
    #[arg(long, env = "DURABLE_TASK_SCHEDULER_CONNECTION_STRING", value_parser = connection_string)]
    pub connection_string: Option<String>,

    /// Serve HTTP only: starts, raises and agent runs are stored and carried
    /// out by the `agenthost worker` processes of the same PostgreSQL task hub.
    #[arg(long, env = "AGENTHOST_NO_WORKER")]
    pub no_worker: bool,

    /// On a task hub shared by several hosts (PostgreSQL): how long a host's
    /// ownership of its instances and sessions outlives its last heartbeat,
    /// so how soon a killed host's work is taken over by the others.
    #[arg(long, env = "AGENTHOST_LEASE", default_value = defaults::LEASE, value_parser = humantime::parse_duration)]
    pub lease: Duration,

    /// Keep response streams in Redis Streams (`agent:response:{correlation_id}`)
    /// instead of the store: `redis://HOST:PORT[/DB]` or `HOST:PORT`.
    #[arg(long = "redis", env = "REDIS_CONNECTION_STRING")]
    pub redis: Option<String>,

    /// Refuse to start when Redis is configured but cannot be reached
    /// (the default falls back to the store, with a warning).
    #[arg(long, env = "AGENTHOST_REQUIRE_REDIS")]
    pub require_redis: bool,

    /// How long a run's response stream is kept (its Redis key's TTL).
    #[arg(long, env = "AGENTHOST_STREAM_TTL", default_value = defaults::STREAM_TTL, value_parser = humantime::parse_duration)]
    pub stream_ttl: Duration,

    /// Readers that may follow response streams at once on this host
    /// (SSE and text/plain); past it they get 429 `too_many_followers`.
    #[arg(long, env = "AGENTHOST_MAX_STREAM_FOLLOWERS", default_value_t = defaults::MAX_STREAM_FOLLOWERS)]
    pub max_stream_followers: usize,

    /// Per-agent settings (model, temperature, max_output_tokens, timeout,
    /// session_ttl, history_budget_tokens), a TOML file with one
    /// `[agents.NAME]` table per agent; they override the agents' own.
    #[arg(long, env = "AGENTHOST_AGENT_SETTINGS")]
    pub agent_settings: Option<PathBuf>,

    /// Address to listen on.
    #[arg(long, env = "AGENTHOST_HOST", default_value = defaults::HOST)]
    pub host: IpAddr,

    /// Port to listen on (0 picks a free one). Under the Azure Functions
    /// host (a custom handler), `FUNCTIONS_CUSTOMHANDLER_PORT`, which it
    /// sets, is the port.
    #[arg(long, env = "AGENTHOST_PORT", default_value_t = defaults::PORT)]
    pub port: u16,

    /// An endpoint key, `SCOPE:KEY` with SCOPE `invoke` (agent runs, their
    /// streams and approvals, orchestration starts, component routes) or
    /// `admin` (those and everything else: the management API,
    /// conversations, components). Repeat it, or list them comma-separated
    /// in AGENTHOST_API_KEYS; several keys per scope allow rotation. With no
    /// key, every route is open. Health is always open.
    #[arg(
        long = "api-key",
        env = "AGENTHOST_API_KEYS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub api_keys: Vec<Secret>,

    /// A file of endpoint keys, one `SCOPE:KEY` a line (`#` comments).
    #[arg(long = "api-key-file", env = "AGENTHOST_API_KEY_FILE")]
    pub api_key_files: Vec<PathBuf>,

    /// Refuse to start without endpoint keys (for a host reachable from
    /// other machines).
    #[arg(long, env = "AGENTHOST_REQUIRE_KEYS")]
    pub require_keys: bool,

    /// Host names answered besides loopback ones (`localhost`,
    /// `127.0.0.1`, `[::1]`), comma-separated; `*` any. Without endpoint
    /// keys a request addressed to another name gets 403 (a web page's DNS
    /// rebinding); with keys, the list applies when set.
    #[arg(
        long = "allowed-hosts",
        env = "AGENTHOST_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,

    /// Web origins (`https://app.example.com`) whose pages may call this
    /// host, answered with CORS, comma-separated; `*` any. Without endpoint
    /// keys a request whose `Origin` is another site (not loopback, not
    /// this host) gets 403; with keys, the list applies when set.
    #[arg(
        long = "allowed-origins",
        env = "AGENTHOST_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    pub allowed_origins: Vec<String>,

    /// Serve `GET /api/health`.
    #[arg(long, env = "AGENTHOST_ENABLE_HEALTH_CHECK", default_value_t = true, action = ArgAction::Set)]
    pub enable_health_check: bool,

    /// Serve MCP (Streamable HTTP) at `/runtime/webhooks/mcp`: each agent
    /// a tool `{query, threadId?}`, each orchestration a tool that starts it.
    #[arg(long, env = "AGENTHOST_MCP")]
    pub mcp: bool,

    /// Serve the Durable Task sidecar protocol (gRPC, the Durable Task
    /// SDKs' clients) on `--grpc-port`, beside the HTTP API.
    #[arg(long, env = "AGENTHOST_GRPC")]
    pub grpc: bool,

    /// The gRPC port (`--grpc`); 0 picks a free one.
    #[arg(long, env = "AGENTHOST_GRPC_PORT", default_value_t = defaults::GRPC_PORT)]
    pub grpc_port: u16,

    /// With `--grpc`: how long an activity no component serves waits for a
    /// Durable Task SDK worker to connect before it fails.
    #[arg(long, env = "AGENTHOST_SDK_WORKER_WAIT", default_value = defaults::SDK_WORKER_WAIT, value_parser = humantime::parse_duration)]
    pub sdk_worker_wait: Duration,

    /// How long a Durable Task SDK worker has to answer an activity before
    /// it is taken back and runs again (on that worker or another).
    #[arg(long, env = "AGENTHOST_SDK_ACTIVITY_TIMEOUT", default_value = defaults::SDK_ACTIVITY_TIMEOUT, value_parser = humantime::parse_duration)]
    pub sdk_activity_timeout: Duration,

    /// A synchronous run waits `max-poll-retries × poll-interval` before answering 202.
    #[arg(long, env = "AGENTHOST_MAX_POLL_RETRIES", default_value_t = defaults::MAX_POLL_RETRIES)]
    pub max_poll_retries: u32,

    /// See `--max-poll-retries`.
    #[arg(long, env = "AGENTHOST_POLL_INTERVAL", default_value = defaults::POLL_INTERVAL, value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,

    /// A store write batch under way for longer than this turns
    /// `/api/health` and `/api/health/live` to 503; past four times it the
    /// process exits non-zero, as it does at once if the store's writer dies,
    /// so that a supervisor restarts it.
    #[arg(long, env = "AGENTHOST_WRITER_DEADLINE", default_value = defaults::WRITER_DEADLINE, value_parser = humantime::parse_duration)]
    pub writer_deadline: Duration,

    /// Largest request body accepted, in bytes.
    #[arg(long, env = "AGENTHOST_MAX_BODY_BYTES", default_value_t = defaults::MAX_BODY_BYTES)]
    pub max_body_bytes: usize,

    /// Longest a request body may take to arrive, from the request's first
    /// byte of body: a client that sends it slower (or stops midway) gets 408
    /// and its connection back, so slow senders cannot hold the host's
    /// connections and memory.
    #[arg(long, env = "AGENTHOST_BODY_TIMEOUT", default_value = defaults::BODY_TIMEOUT, value_parser = humantime::parse_duration)]
    pub body_timeout: Duration,

    /// Largest payload handed to the durable engine, in bytes: orchestration
    /// inputs and outputs, events, custom status, activity and agent inputs,
    /// task results.
    #[arg(long, env = "AGENTHOST_MAX_PAYLOAD_BYTES", default_value_t = defaults::MAX_PAYLOAD_BYTES)]
    pub max_payload_bytes: usize,

    /// Most journal rows one orchestration execution may hold; past it the
    /// instance fails (split long work with continue-as-new).
    #[arg(long, env = "AGENTHOST_MAX_HISTORY_EVENTS", default_value_t = defaults::MAX_HISTORY_EVENTS)]
    pub max_history_events: u64,

    /// Most calls (activities, timers, agent calls, sub-orchestrations…)
    /// one episode of orchestration code may make at once; past it the
    /// instance fails (schedule a large fan-out in batches). They are
    /// committed together: one commit of 15,000 held every other
    /// instance's writes for seconds.
    #[arg(long, env = "AGENTHOST_MAX_EPISODE_CALLS", default_value_t = defaults::MAX_EPISODE_CALLS, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_episode_calls: u64,

    /// Most journal bytes one orchestration execution may hold.
    #[arg(long, env = "AGENTHOST_MAX_HISTORY_BYTES", default_value_t = defaults::MAX_HISTORY_BYTES)]
    pub max_history_bytes: u64,

    /// Most events waiting in one instance's inbox; a raise past it gets 429.
    #[arg(long, env = "AGENTHOST_MAX_INBOX_EVENTS", default_value_t = defaults::MAX_INBOX_EVENTS)]
    pub max_inbox_events: u64,

    /// Most bytes waiting in one instance's inbox; a raise past it gets 429.
    #[arg(long, env = "AGENTHOST_MAX_INBOX_BYTES", default_value_t = defaults::MAX_INBOX_BYTES)]
    pub max_inbox_bytes: u64,

    /// Most attempts of one agent call or activity, whatever its retry policy asks.
    #[arg(long, env = "AGENTHOST_MAX_TASK_ATTEMPTS", default_value_t = defaults::MAX_TASK_ATTEMPTS)]
    pub max_task_attempts: u32,

    /// Shortest pause between two attempts of a task.
    #[arg(long, env = "AGENTHOST_MIN_RETRY_DELAY", default_value = defaults::MIN_RETRY_DELAY, value_parser = humantime::parse_duration)]
    pub min_retry_delay: Duration,

    /// Longest one episode of orchestration code may run (wall clock). Code
    /// that blocks past it fails its instance with the reason.
    #[arg(long, env = "AGENTHOST_EPISODE_TIMEOUT", default_value = defaults::EPISODE_TIMEOUT, value_parser = humantime::parse_duration)]
    pub episode_timeout: Duration,

    /// CPU time one episode of orchestration code may use (replaying and
    /// deciding what comes next takes milliseconds). Code that spins past it
    /// fails its instance with the reason, and frees its slot for others.
    #[arg(long, env = "AGENTHOST_EPISODE_CPU_TIME", default_value = defaults::EPISODE_CPU_TIME, value_parser = humantime::parse_duration)]
    pub episode_cpu_time: Duration,

    /// Memory for hot orchestration instances (their state and journal kept
    /// between episodes), in MiB; the least recently used are evicted past it
    /// and rebuilt from the store when they next run.
    #[arg(long, env = "AGENTHOST_HOT_INSTANCES_MIB", default_value_t = defaults::HOT_INSTANCES_MIB)]
    pub hot_instances_mib: usize,

    /// When a new version of an orchestration component is loaded, its code
    /// is replayed against the journal of every unfinished instance of the
    /// older versions (nothing runs, nothing is written). `report`: they stay
    /// on their version, the report is in /api/components; `upgrade-compatible`:
    /// those whose journal the new code replays exactly move to it.
    #[arg(
        long,
        env = "AGENTHOST_ON_NEW_VERSION",
        value_enum,
        default_value = "report"
    )]
    pub on_new_version: OnNewVersion,

    /// Time one replay check of a new version may take; instances past it
    /// stay unchecked (and pinned).
    #[arg(long, env = "AGENTHOST_REPLAY_CHECK_BUDGET", default_value = defaults::REPLAY_CHECK_BUDGET, value_parser = humantime::parse_duration)]
    pub replay_check_budget: Duration,

    /// Most instances one replay check lists (oldest ids first).
    #[arg(long, env = "AGENTHOST_REPLAY_CHECK_MAX_INSTANCES", default_value_t = defaults::REPLAY_CHECK_MAX_INSTANCES)]
    pub replay_check_max_instances: usize,

    /// Longest a component's `describe()` may run when it is loaded.
    #[arg(long, env = "AGENTHOST_DESCRIBE_TIMEOUT", default_value = defaults::DESCRIBE_TIMEOUT, value_parser = humantime::parse_duration)]
    pub describe_timeout: Duration,

    /// Forget sessions idle for this long (e.g. `30m`, `7d`); every message
    /// renews it; `none` keeps them forever.
    #[arg(long, env = "AGENTHOST_SESSION_TTL", default_value = defaults::SESSION_TTL)]
    pub session_ttl: SessionTtl,

    /// Delete finished orchestration instances (with their journals) and
    /// ended run records this long after they finished (e.g. `30d`, `12h`);
    /// `none` keeps them. A background sweep deletes them in bounded
    /// batches; unfinished work is never touched.
    #[arg(long, env = "AGENTHOST_RETAIN", default_value = defaults::RETAIN)]
    pub retain: SessionTtl,

    /// On SIGTERM/Ctrl-C, how long in-flight runs may take to finish.
    #[arg(long, env = "AGENTHOST_SHUTDOWN_GRACE", default_value = defaults::SHUTDOWN_GRACE, value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,

    /// Where compiled components are cached between starts [default: the
    /// user's cache folder, $XDG_CACHE_HOME/agenthost/compiled, else
    /// ~/.cache/agenthost/compiled, where `agenthost build` compiles to].
    /// Its code is native code: the folder is used only if it and every
    /// folder above it belong to this user or root and nobody else may
    /// write them; otherwise the host keeps compiled code in a private
    /// folder for this run only, and says so.
    #[arg(long, env = "AGENTHOST_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,

    /// Load the compiled code found beside a component (`DIR/.compiled/`,
    /// written by `agenthost build --into` or `agenthost compile`) instead of
    /// compiling it: for a host on a cache of its own (an image's first
    /// start); a host of the user who ran `build` finds it in its cache. It is native code run outside the sandbox's checks:
    /// set this only where the components folder is written by your own
    /// build (an image, a deploy pipeline), never for downloaded content.
    #[arg(long, env = "AGENTHOST_LOAD_PRECOMPILED", default_value_t = false, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub load_precompiled: bool,

    /// Timeout of one model HTTP request.
    #[arg(long, env = "AGENTHOST_MODEL_TIMEOUT", default_value = defaults::MODEL_TIMEOUT, value_parser = humantime::parse_duration)]
    pub model_timeout: Duration,

    /// Most model turns with tool calls in one run.
    #[arg(long, env = "AGENTHOST_MAX_TOOL_ROUNDS", default_value_t = defaults::MAX_TOOL_ROUNDS)]
    pub max_tool_rounds: usize,

    /// Tokens (estimated, about 4 characters each) of a conversation sent to
    /// the model at most: older whole turns are left out, the stored
    /// conversation stays whole.
    #[arg(
        long,
        env = "AGENTHOST_HISTORY_BUDGET_TOKENS",
        default_value_t = defaults::HISTORY_BUDGET_TOKENS
    )]
    pub history_budget_tokens: usize,

    /// Bytes of one tool result an agent's model may receive at most: a
    /// larger result is neither sent nor stored, the model gets a tool error
    /// saying its size instead.
    #[arg(
        long,
        env = "AGENTHOST_MAX_TOOL_RESULT_BYTES",
        default_value_t = defaults::MAX_TOOL_RESULT_BYTES
    )]
    pub max_tool_result_bytes: usize,

    /// How long a call of a tool marked `always-require` waits for a human's
    /// decision (`POST …/runs/{id}/approvals`) before it counts as denied.
    #[arg(long, env = "AGENTHOST_APPROVAL_TIMEOUT", default_value = defaults::APPROVAL_TIMEOUT, value_parser = humantime::parse_duration)]
    pub approval_timeout: Duration,

    /// Memory limit of one guest instance, in MiB.
    #[arg(long, env = "AGENTHOST_GUEST_MEMORY_MB", default_value_t = defaults::GUEST_MEMORY_MB)]
    pub guest_memory_mb: usize,

    /// CPU time limit of one call into a guest.
    #[arg(long, env = "AGENTHOST_GUEST_CPU_TIME", default_value = defaults::GUEST_CPU_TIME, value_parser = humantime::parse_duration)]
    pub guest_cpu_time: Duration,

    /// Most guest instances alive at once. Each component may hold half of
    /// them at most, unless its NAME.toml grants it its own `max_instances`.
    #[arg(long, env = "AGENTHOST_MAX_INSTANCES", default_value_t = defaults::MAX_INSTANCES)]
    pub max_instances: u32,

    /// Guest calls that may run at once, each on a worker thread of the
    /// host, shared fairly between components (each component's
    /// `cpu_weight`). Calls that compute (past one 10 ms tick) hold all but
    /// one of them, so that the host's own work (HTTP, the store, the
    /// scheduler) never queues behind their slices. Default: the worker
    /// threads (one a core).
    #[arg(long, env = "AGENTHOST_GUEST_RUNNERS", value_parser = clap::value_parser!(u16).range(1..))]
    pub guest_runners: Option<u16>,

    /// Answer a name guests' outbound requests use without DNS:
    /// `NAME=ADDRESS[,ADDRESS…]` (repeatable; `;`-separated in
    /// AGENTHOST_RESOLVE). The address is still checked: one inside the
    /// host's network is reached only through a grant naming it.
    #[arg(long = "resolve", env = "AGENTHOST_RESOLVE", value_delimiter = ';')]
    pub resolve: Vec<String>,
}

impl From<ServeArgs> for Settings {
    fn from(args: ServeArgs) -> Self {
        let ServeArgs {
            components,
            watch,
            store,
            taskhub,
            taskhubs,
            dynamic_task_hubs,
            max_task_hubs,
            connection_string,
            no_worker,
            lease,
            redis,
            require_redis,
            stream_ttl,
            max_stream_followers,
            agent_settings,
            host,
            port,
            api_keys,
            api_key_files,
            require_keys,
            allowed_hosts,
            allowed_origins,
            enable_health_check,
            mcp,
            grpc,
            grpc_port,
            sdk_worker_wait,
            sdk_activity_timeout,
            max_poll_retries,
            poll_interval,
            writer_deadline,
            max_body_bytes,
            body_timeout,
            max_payload_bytes,
            max_history_events,
            max_episode_calls,
            max_history_bytes,
            max_inbox_events,
            max_inbox_bytes,
            max_task_attempts,
            min_retry_delay,
            episode_timeout,
            episode_cpu_time,
            hot_instances_mib,
            on_new_version,
            replay_check_budget,
            replay_check_max_instances,
            describe_timeout,
            session_ttl,
            retain,
            shutdown_grace,
            cache_dir,
            load_precompiled,
            model_timeout,
            max_tool_rounds,
            history_budget_tokens,
            max_tool_result_bytes,
            approval_timeout,
            guest_memory_mb,
            guest_cpu_time,
            max_instances,
            guest_runners,
            resolve,
        } = args;
        let variable = |name: &str| std::env::var(name).ok();
        // The Functions host forwards to the port it chose for its custom
        // handler, and says which in this variable.
        let port = variable("FUNCTIONS_CUSTOMHANDLER_PORT")
            .and_then(|p| p.trim().parse::<u16>().ok())
            .unwrap_or(port);
        let (taskhub, grpc, grpc_port) = durable_task_aliases(
            &variable,
            taskhub,
            connection_string.as_deref(),
            (grpc, grpc_port),
        );
        // Every flag is named above and every setting below, so a flag or a
        // setting added to one side only fails to compile here.
        Settings {
            components,
            watch,
            store,
            taskhub,
            taskhubs,
            dynamic_task_hubs,
            max_task_hubs: usize::from(max_task_hubs),
            connection_string,
            no_worker,
            lease,
            redis,
            require_redis,
            stream_ttl,
            max_stream_followers,
            agent_settings,
            host,
            port,
            api_keys,
            api_key_files,
            require_keys,
            allowed_hosts,
            allowed_origins,
            enable_health_check,
            mcp,
            grpc,
            grpc_port,
            sdk_worker_wait,
            sdk_activity_timeout,
            max_poll_retries,
            poll_interval,
            writer_deadline,
            max_body_bytes,
            body_timeout,
            max_payload_bytes,
            max_history_events,
            max_episode_calls,
            max_history_bytes,
            max_inbox_events,
            max_inbox_bytes,
            max_task_attempts,
            min_retry_delay,
            episode_timeout,
            episode_cpu_time,
            hot_instances_mib,
            on_new_version,
            replay_check_budget,
            replay_check_max_instances,
            describe_timeout,
            session_ttl: session_ttl.0,
            retain: retain.0,
            shutdown_grace,
            // An empty AGENTHOST_CACHE_DIR is no folder: the default.
            cache_dir: cache_dir.filter(|dir| !dir.as_os_str().is_empty()),
            load_precompiled,
            model_timeout,
            max_tool_rounds,
            history_budget_tokens,
            max_tool_result_bytes,
            approval_timeout,
            guest_memory_mb,
            guest_cpu_time,
            max_instances,
            guest_runners: guest_runners.map(usize::from),
            resolve,
            worker_only: false,
        }
    }
}

/// The settings of `agenthost serve` from its environment variables alone
/// (no flags): what `embed::Builder::new` starts from.
pub(crate) fn settings_from_env() -> Result<Settings, clap::Error> {
    #[derive(Parser)]
    struct Defaults {
        #[command(flatten)]
        args: ServeArgs,
    }
    Ok(Defaults::try_parse_from(["agenthost"])?.args.into())
}

/// A connection string checked when the flags are read, kept as written.
/// The variables the Durable Task SDKs' samples set, read as our settings:
/// `TASKHUB` names the task hub (after `--taskhub`), and a scheduler
/// address (`ENDPOINT`, or the connection string's http(s) Endpoint) is
/// this host's gRPC endpoint: it turns `--grpc` on (unless
/// `AGENTHOST_GRPC=false` turns it off), on its port unless
/// `--grpc-port` says otherwise. So a sample's environment, set once,
/// serves both the sample and the host it talks to.
fn durable_task_aliases(
    variable: &dyn Fn(&str) -> Option<String>,
    taskhub: Option<String>,
    connection_string: Option<&str>,
    (grpc, grpc_port): (bool, u16),
) -> (Option<String>, bool, u16) {
    let variable = |name: &str| variable(name).filter(|v| !v.trim().is_empty());
    let taskhub = taskhub.or_else(|| variable("TASKHUB"));
    let scheduler = variable("ENDPOINT")
        .and_then(|e| crate::taskhub::scheduler_port(&e))
        .or_else(|| {
            let endpoint = connection_string?
                .parse::<ConnectionString>()
                .ok()?
                .endpoint?;
            crate::taskhub::scheduler_port(&endpoint)
        });
    // An operator who turned gRPC off in the environment keeps it off,
    // whatever address the sample's variables name (`--grpc` on the command
    // line beats the variable, as clap has it: then `grpc` is true). The
    // words are clap's falsey ones.
    let turned_off = !grpc
        && variable("AGENTHOST_GRPC").is_some_and(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "false" | "f" | "0" | "no" | "n" | "off"
            )
        });
    match scheduler {
        None => (taskhub, grpc, grpc_port),
        Some(_) if turned_off => (taskhub, false, grpc_port),
        Some(port) => {
            let port = match port {
                Some(port) if grpc_port == defaults::GRPC_PORT => port,
                _ => grpc_port,
            };
            (taskhub, true, port)
        }
    }
}

fn connection_string(text: &str) -> Result<String, ConnectionStringError> {
    text.parse::<ConnectionString>()?;
    Ok(text.to_string())
}

/// How long something is kept (an idle session, a finished instance);
/// `none` (or `null`, `off`, `never`) keeps it forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SessionTtl(pub Option<Duration>);

impl std::str::FromStr for SessionTtl {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        crate::agents::parse_ttl(text).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::{defaults, durable_task_aliases, SessionTtl};
    use std::time::Duration;

    #[test]
    fn the_sample_variables_name_the_hub_and_this_hosts_grpc_endpoint() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let off = (false, defaults::GRPC_PORT);
        // ENDPOINT turns gRPC on, on its port; TASKHUB names the hub.
        let samples = env(&[("ENDPOINT", "http://localhost:9090"), ("TASKHUB", "blue")]);
        assert_eq!(
            durable_task_aliases(&samples, None, None, off),
            (Some("blue".into()), true, 9090)
        );
        // The flags win.
        assert_eq!(
            durable_task_aliases(&samples, Some("red".into()), None, (false, 7000)),
            (Some("red".into()), true, 7000)
        );
        // A connection string's http Endpoint is a scheduler address too; a
        // store URL is not, nor an ENDPOINT that is no http URL.
        let none = env(&[("ENDPOINT", "db.example:5432")]);
        let scheduler = "Endpoint=http://localhost:8081;TaskHub=x;Authentication=None";
        assert_eq!(
            durable_task_aliases(&none, None, Some(scheduler), off),
            (None, true, 8081)
        );
        let store = "Endpoint=postgres://u@db/x;TaskHub=x;Authentication=None";
        assert_eq!(
            durable_task_aliases(&none, None, Some(store), off),
            (None, false, 8080)
        );
        // gRPC turned off in the environment stays off.
        let refused = env(&[
            ("ENDPOINT", "http://localhost:9090"),
            ("AGENTHOST_GRPC", "False"),
        ]);
        assert_eq!(
            durable_task_aliases(&refused, None, None, off),
            (None, false, 8080)
        );
        // Empty variables are unset.
        let empty = env(&[("TASKHUB", " "), ("ENDPOINT", "")]);
        assert_eq!(
            durable_task_aliases(&empty, None, None, off),
            (None, false, 8080)
        );
    }

    #[test]
    fn a_session_ttl_is_a_duration_or_none() {
        assert_eq!(
            "14d".parse(),
            Ok(SessionTtl(Some(Duration::from_secs(14 * 86_400))))
        );
        assert_eq!("none".parse(), Ok(SessionTtl(None)));
        assert_eq!("null".parse(), Ok(SessionTtl(None)));
        assert!("soon".parse::<SessionTtl>().is_err());
    }
}
