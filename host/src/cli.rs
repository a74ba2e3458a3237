//! Command-line interface. Every flag has an `AGENTHOST_*` environment twin.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};

use crate::taskhub::ConnectionString;

#[derive(Debug, Parser)]
#[command(
    name = "agenthost",
    version,
    about = "Hosts AI agents as sandboxed WebAssembly components"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// How log lines are written on stderr: `text`, or `json` (one object a
    /// line, for log shippers). Which lines: AGENTHOST_LOG, a filter such
    /// as `info,agenthost::store=debug,sqlx=warn`.
    #[arg(
        long,
        global = true,
        env = "AGENTHOST_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: crate::telemetry::LogFormat,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the agents of a components directory over HTTP (and run the
    /// work, unless --no-worker).
    Serve(Box<ServeArgs>),
    /// Run agents, activities, orchestrations and timers of a task hub, with
    /// no HTTP: the console host beside `serve --no-worker` fronts. The HTTP
    /// settings of `serve` are accepted and ignored.
    Worker(Box<ServeArgs>),
    /// Talk to a running host: run agents, start and follow orchestrations.
    Client(ClientArgs),
    /// Load one component (validate, compile, describe) and print what it
    /// offers as JSON; exits non-zero with the reason when it does not load.
    Inspect {
        /// The `.wasm` component file.
        file: PathBuf,
    },
}

#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// The host's URL. Default: the connection string's Endpoint when it is
    /// an http(s) URL, else http://127.0.0.1:7071.
    #[arg(long, env = "AGENTHOST_ENDPOINT")]
    pub endpoint: Option<String>,

    /// `Endpoint=<host URL>;TaskHub=<name>;Authentication=None`.
    #[arg(long, env = "DURABLE_TASK_SCHEDULER_CONNECTION_STRING")]
    pub connection_string: Option<ConnectionString>,

    /// The host's endpoint key (the key alone, no scope), when it requires one.
    #[arg(long, env = "AGENTHOST_API_KEY", hide_env_values = true)]
    pub api_key: Option<Secret>,

    #[command(subcommand)]
    pub command: ClientCommand,
}

impl ClientArgs {
    pub fn endpoint(&self) -> String {
        self.endpoint
            .clone()
            .or_else(|| {
                self.connection_string
                    .as_ref()
                    .and_then(|c| c.endpoint.clone())
                    .filter(|e| e.starts_with("http://") || e.starts_with("https://"))
            })
            .unwrap_or_else(|| "http://127.0.0.1:7071".into())
    }
}

#[derive(Debug, Clone, Subcommand)]
pub enum ClientCommand {
    /// Agents.
    #[command(subcommand)]
    Agent(AgentCommand),
    /// Durable orchestrations.
    #[command(subcommand)]
    Orchestration(OrchestrationCommand),
}

#[derive(Debug, Clone, Subcommand)]
pub enum AgentCommand {
    /// Run agent NAME on MESSAGE and print its answer (the session id goes
    /// to stderr); the same --session continues one conversation.
    Run {
        name: String,
        message: String,
        #[arg(long)]
        session: Option<String>,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub enum OrchestrationCommand {
    /// Start orchestration NAME; prints the instance id.
    Start {
        name: String,
        /// The input, as JSON.
        #[arg(long)]
        input: Option<String>,
        /// The instance id (default: a new one).
        #[arg(long)]
        id: Option<String>,
    },
    /// Print the instance's status as JSON (runtime_status, serialized_input,
    /// serialized_output, serialized_custom_status, …).
    Status { id: String },
    /// Raise event EVENT at the instance.
    Raise {
        id: String,
        event: String,
        /// The event's payload, as JSON.
        #[arg(long)]
        data: Option<String>,
    },
    /// Terminate the instance.
    Terminate {
        id: String,
        #[arg(long, default_value = "terminated by agenthost client")]
        reason: String,
    },
    /// Wait for the instance to finish; prints its status. Exits non-zero
    /// when it is still running after --timeout.
    Wait {
        id: String,
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    /// List the hub's instances as JSON.
    List,
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Directory of `.wasm` components to serve.
    #[arg(long, env = "AGENTHOST_COMPONENTS", default_value = "components")]
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

    /// `Endpoint=<store URL>;TaskHub=<name>;Authentication=None`, as set for
    /// Durable Task Scheduler; `--store` and `--taskhub` win over it.
    #[arg(long, env = "DURABLE_TASK_SCHEDULER_CONNECTION_STRING")]
    pub connection_string: Option<ConnectionString>,

    /// Serve HTTP only: starts, raises and agent runs are stored and carried
    /// out by the `agenthost worker` processes of the same PostgreSQL task hub.
    #[arg(long, env = "AGENTHOST_NO_WORKER")]
    pub no_worker: bool,

    /// On a task hub shared by several hosts (PostgreSQL): how long a host's
    /// ownership of its instances and sessions outlives its last heartbeat,
    /// so how soon a killed host's work is taken over by the others.
    #[arg(long, env = "AGENTHOST_LEASE", default_value = "5s", value_parser = humantime::parse_duration)]
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
    #[arg(long, env = "AGENTHOST_STREAM_TTL", default_value = "1h", value_parser = humantime::parse_duration)]
    pub stream_ttl: Duration,

    /// Readers that may follow response streams at once on this host
    /// (SSE and text/plain); past it they get 429 `too_many_followers`.
    #[arg(long, env = "AGENTHOST_MAX_STREAM_FOLLOWERS", default_value_t = 4096)]
    pub max_stream_followers: usize,

    /// Per-agent settings (model, temperature, max_output_tokens, timeout,
    /// session_ttl, history_budget_tokens), a TOML file with one
    /// `[agents.NAME]` table per agent; they override the agents' own.
    #[arg(long, env = "AGENTHOST_AGENT_SETTINGS")]
    pub agent_settings: Option<PathBuf>,

    /// Set by `agenthost worker`: no HTTP.
    #[arg(skip)]
    pub worker_only: bool,

    /// Address to listen on.
    #[arg(long, env = "AGENTHOST_HOST", default_value = "127.0.0.1")]
    pub host: IpAddr,

    /// Port to listen on (0 picks a free one).
    #[arg(long, env = "AGENTHOST_PORT", default_value_t = 7071)]
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

    /// Serve `GET /api/health`.
    #[arg(long, env = "AGENTHOST_ENABLE_HEALTH_CHECK", default_value_t = true, action = ArgAction::Set)]
    pub enable_health_check: bool,

    /// A synchronous run waits `max-poll-retries × poll-interval` before answering 202.
    #[arg(long, env = "AGENTHOST_MAX_POLL_RETRIES", default_value_t = 30)]
    pub max_poll_retries: u32,

    /// See `--max-poll-retries`.
    #[arg(long, env = "AGENTHOST_POLL_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,

    /// A store write batch under way for longer than this turns
    /// `/api/health` and `/api/health/live` to 503; past four times it the
    /// process exits non-zero, as it does at once if the store's writer dies,
    /// so that a supervisor restarts it.
    #[arg(long, env = "AGENTHOST_WRITER_DEADLINE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub writer_deadline: Duration,

    /// Largest request body accepted, in bytes.
    #[arg(long, env = "AGENTHOST_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    pub max_body_bytes: usize,

    /// Largest payload handed to the durable engine, in bytes: orchestration
    /// inputs and outputs, events, custom status, activity and agent inputs,
    /// task results.
    #[arg(long, env = "AGENTHOST_MAX_PAYLOAD_BYTES", default_value_t = 1 << 20)]
    pub max_payload_bytes: usize,

    /// Most journal rows one orchestration execution may hold; past it the
    /// instance fails (split long work with continue-as-new).
    #[arg(long, env = "AGENTHOST_MAX_HISTORY_EVENTS", default_value_t = 50_000)]
    pub max_history_events: u64,

    /// Most journal bytes one orchestration execution may hold.
    #[arg(long, env = "AGENTHOST_MAX_HISTORY_BYTES", default_value_t = 50 << 20)]
    pub max_history_bytes: u64,

    /// Most events waiting in one instance's inbox; a raise past it gets 429.
    #[arg(long, env = "AGENTHOST_MAX_INBOX_EVENTS", default_value_t = 10_000)]
    pub max_inbox_events: u64,

    /// Most bytes waiting in one instance's inbox; a raise past it gets 429.
    #[arg(long, env = "AGENTHOST_MAX_INBOX_BYTES", default_value_t = 16 << 20)]
    pub max_inbox_bytes: u64,

    /// Most attempts of one agent call or activity, whatever its retry policy asks.
    #[arg(long, env = "AGENTHOST_MAX_TASK_ATTEMPTS", default_value_t = 10)]
    pub max_task_attempts: u32,

    /// Shortest pause between two attempts of a task.
    #[arg(long, env = "AGENTHOST_MIN_RETRY_DELAY", default_value = "10ms", value_parser = humantime::parse_duration)]
    pub min_retry_delay: Duration,

    /// Longest one episode of orchestration code may run (wall clock). Code
    /// that blocks past it fails its instance with the reason.
    #[arg(long, env = "AGENTHOST_EPISODE_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub episode_timeout: Duration,

    /// CPU time one episode of orchestration code may use (replaying and
    /// deciding what comes next takes milliseconds). Code that spins past it
    /// fails its instance with the reason, and frees its slot for others.
    #[arg(long, env = "AGENTHOST_EPISODE_CPU_TIME", default_value = "1s", value_parser = humantime::parse_duration)]
    pub episode_cpu_time: Duration,

    /// Memory for hot orchestration instances (their state and journal kept
    /// between episodes), in MiB; the least recently used are evicted past it
    /// and rebuilt from the store when they next run.
    #[arg(long, env = "AGENTHOST_HOT_INSTANCES_MIB", default_value_t = 256)]
    pub hot_instances_mib: usize,

    /// Longest a component's `describe()` may run when it is loaded.
    #[arg(long, env = "AGENTHOST_DESCRIBE_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    pub describe_timeout: Duration,

    /// Forget sessions idle for this long (e.g. `30m`, `7d`); every message
    /// renews it; `none` keeps them forever.
    #[arg(long, env = "AGENTHOST_SESSION_TTL", default_value = "14d")]
    pub session_ttl: SessionTtl,

    /// Delete finished orchestration instances (with their journals) and
    /// ended run records this long after they finished (e.g. `30d`, `12h`);
    /// `none` keeps them. A background sweep deletes them in bounded
    /// batches; unfinished work is never touched.
    #[arg(long, env = "AGENTHOST_RETAIN", default_value = "30d")]
    pub retain: SessionTtl,

    /// On SIGTERM/Ctrl-C, how long in-flight runs may take to finish.
    #[arg(long, env = "AGENTHOST_SHUTDOWN_GRACE", default_value = "30s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,

    /// Where compiled components are cached between starts.
    #[arg(long, env = "AGENTHOST_CACHE_DIR", default_value = ".agenthost/cache")]
    pub cache_dir: PathBuf,

    /// Timeout of one model HTTP request.
    #[arg(long, env = "AGENTHOST_MODEL_TIMEOUT", default_value = "120s", value_parser = humantime::parse_duration)]
    pub model_timeout: Duration,

    /// Most model turns with tool calls in one run.
    #[arg(long, env = "AGENTHOST_MAX_TOOL_ROUNDS", default_value_t = 8)]
    pub max_tool_rounds: usize,

    /// Tokens (estimated, about 4 characters each) of a conversation sent to
    /// the model at most: older whole turns are left out, the stored
    /// conversation stays whole.
    #[arg(
        long,
        env = "AGENTHOST_HISTORY_BUDGET_TOKENS",
        default_value_t = 64_000
    )]
    pub history_budget_tokens: usize,

    /// How long a call of a tool marked `always-require` waits for a human's
    /// decision (`POST …/runs/{id}/approvals`) before it counts as denied.
    #[arg(long, env = "AGENTHOST_APPROVAL_TIMEOUT", default_value = "24h", value_parser = humantime::parse_duration)]
    pub approval_timeout: Duration,

    /// Memory limit of one guest instance, in MiB.
    #[arg(long, env = "AGENTHOST_GUEST_MEMORY_MB", default_value_t = 128)]
    pub guest_memory_mb: usize,

    /// CPU time limit of one call into a guest.
    #[arg(long, env = "AGENTHOST_GUEST_CPU_TIME", default_value = "10s", value_parser = humantime::parse_duration)]
    pub guest_cpu_time: Duration,

    /// Most guest instances alive at once.
    #[arg(long, env = "AGENTHOST_MAX_INSTANCES", default_value_t = 256)]
    pub max_instances: u32,

    /// Answer a name guests' outbound requests use without DNS:
    /// `NAME=ADDRESS[,ADDRESS…]` (repeatable; `;`-separated in
    /// AGENTHOST_RESOLVE). The address is still checked: one inside the
    /// host's network is reached only through a grant naming it.
    #[arg(long = "resolve", env = "AGENTHOST_RESOLVE", value_delimiter = ';')]
    pub resolve: Vec<String>,
}

/// A setting that must not be printed: its `Debug` shows no part of it, so
/// logging the parsed flags cannot leak a key.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(Self(text.to_string()))
    }
}

impl ServeArgs {
    /// How this process takes part in its task hub.
    pub(crate) fn role(&self) -> crate::store::Role {
        use crate::store::Role;
        match (self.worker_only, self.no_worker) {
            (true, _) => Role::Worker,
            (false, true) => Role::Front,
            (false, false) => Role::Serve,
        }
    }

    /// `(store URL, task hub name)` after flags, connection string and defaults.
    pub fn store_location(&self) -> (String, String) {
        crate::taskhub::resolve(
            self.store.as_deref(),
            self.taskhub.as_deref(),
            self.connection_string.as_ref(),
        )
    }

    /// The durable engine's limits, from the flags.
    pub fn durable_limits(&self) -> crate::core::limits::Limits {
        use crate::core::limits::Limits;
        use crate::core::retry::RetryLimits;
        let defaults = RetryLimits::default();
        Limits {
            max_history_events: self.max_history_events,
            max_history_bytes: self.max_history_bytes,
            max_inbox_events: self.max_inbox_events,
            max_inbox_bytes: self.max_inbox_bytes,
            max_payload_bytes: self.max_payload_bytes,
            retry: RetryLimits {
                max_attempts: self.max_task_attempts.max(1),
                min_delay_ms: u64::try_from(self.min_retry_delay.as_millis()).unwrap_or(u64::MAX),
                max_delay_ms: defaults.max_delay_ms,
            },
        }
    }
}

/// How long something is kept (an idle session, a finished instance);
/// `none` (or `null`, `off`, `never`) keeps it forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionTtl(pub Option<Duration>);

impl std::str::FromStr for SessionTtl {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        crate::agents::parse_ttl(text).map(Self)
    }
}

#[cfg(test)]
mod tests {
    use super::SessionTtl;
    use std::time::Duration;

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
