//! Command-line interface. Every flag has an `AGENTHOST_*` environment twin.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "agenthost",
    version,
    about = "Hosts AI agents as sandboxed WebAssembly components"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Serve the agents of a components directory over HTTP.
    Serve(ServeArgs),
    /// Load one component (validate, compile, describe) and print what it
    /// offers as JSON; exits non-zero with the reason when it does not load.
    Inspect {
        /// The `.wasm` component file.
        file: PathBuf,
    },
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

    /// Where sessions and runs are stored.
    #[arg(long, env = "AGENTHOST_STORE", default_value = "sqlite://agenthost.db")]
    pub store: String,

    /// Address to listen on.
    #[arg(long, env = "AGENTHOST_HOST", default_value = "127.0.0.1")]
    pub host: IpAddr,

    /// Port to listen on (0 picks a free one).
    #[arg(long, env = "AGENTHOST_PORT", default_value_t = 7071)]
    pub port: u16,

    /// Serve `GET /api/health`.
    #[arg(long, env = "AGENTHOST_ENABLE_HEALTH_CHECK", default_value_t = true, action = ArgAction::Set)]
    pub enable_health_check: bool,

    /// A synchronous run waits `max-poll-retries × poll-interval` before answering 202.
    #[arg(long, env = "AGENTHOST_MAX_POLL_RETRIES", default_value_t = 30)]
    pub max_poll_retries: u32,

    /// See `--max-poll-retries`.
    #[arg(long, env = "AGENTHOST_POLL_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub poll_interval: Duration,

    /// Largest request body accepted, in bytes.
    #[arg(long, env = "AGENTHOST_MAX_BODY_BYTES", default_value_t = 1 << 20)]
    pub max_body_bytes: usize,

    /// Largest orchestration input, output or event payload, in bytes.
    #[arg(long, env = "AGENTHOST_MAX_PAYLOAD_BYTES", default_value_t = 1 << 20)]
    pub max_payload_bytes: usize,

    /// Forget sessions idle for this long (e.g. `30m`, `7d`). Default: never.
    #[arg(long, env = "AGENTHOST_SESSION_TTL", value_parser = humantime::parse_duration)]
    pub session_ttl: Option<Duration>,

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

    /// Memory limit of one guest instance, in MiB.
    #[arg(long, env = "AGENTHOST_GUEST_MEMORY_MB", default_value_t = 128)]
    pub guest_memory_mb: usize,

    /// CPU time limit of one call into a guest.
    #[arg(long, env = "AGENTHOST_GUEST_CPU_TIME", default_value = "10s", value_parser = humantime::parse_duration)]
    pub guest_cpu_time: Duration,

    /// Most guest instances alive at once.
    #[arg(long, env = "AGENTHOST_MAX_INSTANCES", default_value_t = 256)]
    pub max_instances: u32,
}
