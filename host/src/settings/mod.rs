//! What a host is started with: one plain struct that a library user fills
//! in code or from a config file (serde), and that `agenthost serve` fills
//! from its flags. The defaults live here once, as constants the flags name
//! too, so `--help` and [`Settings::default`] cannot drift apart.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::core::limits::Limits;
use crate::core::retry::RetryLimits;
use crate::durable::OnNewVersion;
use crate::store::Role;
use crate::taskhub::{ConnectionString, ConnectionStringError};

mod flags;

pub(crate) use flags::{settings_from_env, ServeArgs};

/// The defaults of [`Settings`], as the flags show them.
pub(crate) mod defaults {
    pub const COMPONENTS: &str = "components";
    pub const LEASE: &str = "5s";
    pub const STREAM_TTL: &str = "1h";
    pub const MAX_STREAM_FOLLOWERS: usize = 4096;
    pub const HOST: &str = "127.0.0.1";
    pub const PORT: u16 = 7071;
    /// The Durable Task emulator's port, where the SDKs look by default.
    pub const GRPC_PORT: u16 = 8080;
    pub const SDK_WORKER_WAIT: &str = "60s";
    pub const SDK_ACTIVITY_TIMEOUT: &str = "10m";
    pub fn grpc_port() -> u16 {
        GRPC_PORT
    }
    pub fn sdk_worker_wait() -> std::time::Duration {
        super::duration(SDK_WORKER_WAIT)
    }
    pub fn sdk_activity_timeout() -> std::time::Duration {
        super::duration(SDK_ACTIVITY_TIMEOUT)
    }
    pub const MAX_POLL_RETRIES: u32 = 30;
    pub const POLL_INTERVAL: &str = "1s";
    pub const WRITER_DEADLINE: &str = "30s";
    pub const MAX_BODY_BYTES: usize = 1 << 20;
    pub const BODY_TIMEOUT: &str = "60s";
    pub const MAX_PAYLOAD_BYTES: usize = 1 << 20;
    pub const MAX_HISTORY_EVENTS: u64 = 50_000;
    pub const MAX_EPISODE_CALLS: u64 = 5_000;
    pub const MAX_HISTORY_BYTES: u64 = 50 << 20;
    pub const MAX_INBOX_EVENTS: u64 = 10_000;
    pub const MAX_INBOX_BYTES: u64 = 16 << 20;
    pub const MAX_TASK_ATTEMPTS: u32 = 10;
    pub const MIN_RETRY_DELAY: &str = "10ms";
    pub const EPISODE_TIMEOUT: &str = "30s";
    pub const EPISODE_CPU_TIME: &str = "1s";
    pub const HOT_INSTANCES_MIB: usize = 256;
    pub const REPLAY_CHECK_BUDGET: &str = "5m";
    pub const REPLAY_CHECK_MAX_INSTANCES: usize = 100_000;
    pub const DESCRIBE_TIMEOUT: &str = "30s";
    pub const SESSION_TTL: &str = "14d";
    pub const RETAIN: &str = "30d";
    pub const SHUTDOWN_GRACE: &str = "30s";
    pub const MODEL_TIMEOUT: &str = "120s";
    pub const MAX_TOOL_ROUNDS: usize = 8;
    pub const HISTORY_BUDGET_TOKENS: usize = 64_000;
    /// 128 KiB: about 32,000 tokens at the host's four bytes a token, half
    /// the default history budget, so that one result this large still
    /// leaves the model the other half for its conversation (a model's
    /// context is what a larger one would crowd out first).
    pub const MAX_TOOL_RESULT_BYTES: usize = 128 << 10;
    pub const APPROVAL_TIMEOUT: &str = "24h";
    pub const GUEST_MEMORY_MB: usize = 128;
    pub const GUEST_CPU_TIME: &str = "10s";
    pub const MAX_INSTANCES: u32 = 256;
}

/// Every setting of a host, with the defaults of `agenthost serve`. The
/// flag of each field is its name in kebab case (`max_body_bytes` is
/// `--max-body-bytes`); `agenthost serve --help` says what each does.
/// Durations are written as `30s`, `5m`, `14d`; keep-forever settings take
/// `none` too.
///
/// ```
/// let settings: agenthost::embed::Settings = toml::from_str(r#"
///     components = "components"
///     store = "sqlite://app.db"
///     session_ttl = "7d"
///     retain = "none"
/// "#).unwrap();
/// assert_eq!(settings.port, 7071);
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct Settings {
    /// Directory of `.wasm` components to serve.
    pub components: PathBuf,
    /// Load added or replaced components, unload deleted ones, while serving.
    pub watch: bool,
    /// `sqlite://PATH` or `postgres://USER@HOST:PORT/DATABASE`; `None`: the
    /// connection string's Endpoint, else `sqlite://agenthost.db`.
    pub store: Option<String>,
    /// The task hub; `None`: the connection string's TaskHub, else `default`.
    /// The HTTP routes serve it unless a request names another.
    pub taskhub: Option<String>,
    /// Further task hubs served beside `taskhub`, opened at start: a gRPC
    /// caller names one in its `taskhub` metadata, an HTTP caller with
    /// `?taskHub=` (or a `taskhub` header).
    pub taskhubs: Vec<String>,
    /// Serve any task hub a caller names, created on first use (as the
    /// Durable Task Scheduler emulator's dynamic task hubs).
    pub dynamic_task_hubs: bool,
    /// Hubs open at once at most, the host's own and those listed included:
    /// a caller naming new hubs dynamically stops there.
    pub max_task_hubs: usize,
    /// `Endpoint=<store URL>;TaskHub=<name>;Authentication=None`.
    pub connection_string: Option<String>,
    /// Serve HTTP only; `agenthost worker` processes of the hub do the work.
    pub no_worker: bool,
    #[serde(with = "humantime_serde")]
    pub lease: Duration,
    /// Response streams in Redis Streams instead of the store.
    pub redis: Option<String>,
    pub require_redis: bool,
    #[serde(with = "humantime_serde")]
    pub stream_ttl: Duration,
    pub max_stream_followers: usize,
    /// A TOML file of per-agent settings (`[agents.NAME]` tables).
    pub agent_settings: Option<PathBuf>,
    /// Address to listen on (`agenthost serve` only; an embedding
    /// application listens itself).
    pub host: IpAddr,
    pub port: u16,
    /// Endpoint keys, `SCOPE:KEY` with SCOPE `invoke` or `admin`.
    pub api_keys: Vec<Secret>,
    /// Files of endpoint keys, one `SCOPE:KEY` a line.
    pub api_key_files: Vec<PathBuf>,
    pub require_keys: bool,
    /// Host names answered besides loopback ones (`--allowed-hosts`).
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// Web origins whose pages may call the host (`--allowed-origins`).
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    pub enable_health_check: bool,
    /// Serve MCP at `/runtime/webhooks/mcp`.
    #[serde(default)]
    pub mcp: bool,
    /// Serve the Durable Task sidecar protocol (gRPC) on `grpc_port`
    /// (`agenthost serve` only).
    #[serde(default)]
    pub grpc: bool,
    #[serde(default = "defaults::grpc_port")]
    pub grpc_port: u16,
    /// With `grpc`: how long an activity no component serves waits for a
    /// Durable Task SDK worker to connect before it fails.
    #[serde(with = "humantime_serde", default = "defaults::sdk_worker_wait")]
    pub sdk_worker_wait: Duration,
    /// How long an SDK worker has to answer an activity before it is taken
    /// back (and runs again).
    #[serde(with = "humantime_serde", default = "defaults::sdk_activity_timeout")]
    pub sdk_activity_timeout: Duration,
    pub max_poll_retries: u32,
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    #[serde(with = "humantime_serde")]
    pub writer_deadline: Duration,
    pub max_body_bytes: usize,
    #[serde(with = "humantime_serde")]
    pub body_timeout: Duration,
    pub max_payload_bytes: usize,
    pub max_history_events: u64,
    pub max_history_bytes: u64,
    pub max_episode_calls: u64,
    pub max_inbox_events: u64,
    pub max_inbox_bytes: u64,
    pub max_task_attempts: u32,
    #[serde(with = "humantime_serde")]
    pub min_retry_delay: Duration,
    #[serde(with = "humantime_serde")]
    pub episode_timeout: Duration,
    #[serde(with = "humantime_serde")]
    pub episode_cpu_time: Duration,
    pub hot_instances_mib: usize,
    /// What a replay check of a new orchestration version does with the
    /// instances of older versions it finds compatible: `report` (they stay
    /// pinned) or `upgrade-compatible` (they move to the new version).
    pub on_new_version: OnNewVersion,
    /// Time one replay check may take; instances past it stay unchecked.
    #[serde(with = "humantime_serde")]
    pub replay_check_budget: Duration,
    /// Most instances one replay check lists.
    pub replay_check_max_instances: usize,
    #[serde(with = "humantime_serde")]
    pub describe_timeout: Duration,
    /// Forget sessions idle this long; `None` (`"none"`) keeps them.
    #[serde(deserialize_with = "keep_for")]
    pub session_ttl: Option<Duration>,
    /// Delete finished instances and ended runs this long after they
    /// finished; `None` (`"none"`) keeps them.
    #[serde(deserialize_with = "keep_for")]
    pub retain: Option<Duration>,
    #[serde(with = "humantime_serde")]
    pub shutdown_grace: Duration,
    /// Where compiled components are kept between starts; `None`: the
    /// user's cache folder (`$XDG_CACHE_HOME/agenthost/compiled`, else
    /// `~/.cache/agenthost/compiled`), the one `agenthost build` compiles
    /// into. Never the working folder: code found there is native code.
    /// Used only if no other user may write it (else a private folder of
    /// this run's, logged).
    pub cache_dir: Option<PathBuf>,
    /// Load the compiled code beside a component (`DIR/.compiled/`) instead
    /// of compiling it: only where your own build writes the folder.
    pub load_precompiled: bool,
    #[serde(with = "humantime_serde")]
    pub model_timeout: Duration,
    pub max_tool_rounds: usize,
    pub history_budget_tokens: usize,
    pub max_tool_result_bytes: usize,
    #[serde(with = "humantime_serde")]
    pub approval_timeout: Duration,
    pub guest_memory_mb: usize,
    #[serde(with = "humantime_serde")]
    pub guest_cpu_time: Duration,
    pub max_instances: u32,
    /// Guest calls that may run at once (`--guest-runners`); `None`: the
    /// worker threads less one.
    #[serde(default)]
    pub guest_runners: Option<usize>,
    /// `NAME=ADDRESS[,ADDRESS…]`: names guests' outbound requests resolve
    /// without DNS (the address is still checked).
    pub resolve: Vec<String>,
    /// Set by `agenthost worker`: work only, no HTTP.
    #[serde(skip)]
    pub(crate) worker_only: bool,
}

/// A constant duration of [`defaults`]; a malformed one is caught by the
/// unit test below, so the fallback is never reached.
fn duration(text: &str) -> Duration {
    humantime::parse_duration(text).unwrap_or_default()
}

fn keep(text: &str) -> Option<Duration> {
    crate::agents::parse_ttl(text).unwrap_or_default()
}

impl Default for Settings {
    fn default() -> Self {
        use defaults::*;
        Self {
            components: PathBuf::from(COMPONENTS),
            watch: true,
            store: None,
            taskhub: None,
            taskhubs: Vec::new(),
            dynamic_task_hubs: false,
            max_task_hubs: 32,
            connection_string: None,
            no_worker: false,
            lease: duration(LEASE),
            redis: None,
            require_redis: false,
            stream_ttl: duration(STREAM_TTL),
            max_stream_followers: MAX_STREAM_FOLLOWERS,
            agent_settings: None,
            host: HOST.parse().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)),
            port: PORT,
            api_keys: Vec::new(),
            api_key_files: Vec::new(),
            require_keys: false,
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            enable_health_check: true,
            mcp: false,
            grpc: false,
            grpc_port: GRPC_PORT,
            sdk_worker_wait: duration(SDK_WORKER_WAIT),
            sdk_activity_timeout: duration(SDK_ACTIVITY_TIMEOUT),
            max_poll_retries: MAX_POLL_RETRIES,
            poll_interval: duration(POLL_INTERVAL),
            writer_deadline: duration(WRITER_DEADLINE),
            max_body_bytes: MAX_BODY_BYTES,
            body_timeout: duration(BODY_TIMEOUT),
            max_payload_bytes: MAX_PAYLOAD_BYTES,
            max_history_events: MAX_HISTORY_EVENTS,
            max_episode_calls: MAX_EPISODE_CALLS,
            max_history_bytes: MAX_HISTORY_BYTES,
            max_inbox_events: MAX_INBOX_EVENTS,
            max_inbox_bytes: MAX_INBOX_BYTES,
            max_task_attempts: MAX_TASK_ATTEMPTS,
            min_retry_delay: duration(MIN_RETRY_DELAY),
            episode_timeout: duration(EPISODE_TIMEOUT),
            episode_cpu_time: duration(EPISODE_CPU_TIME),
            hot_instances_mib: HOT_INSTANCES_MIB,
            on_new_version: OnNewVersion::Report,
            replay_check_budget: duration(REPLAY_CHECK_BUDGET),
            replay_check_max_instances: REPLAY_CHECK_MAX_INSTANCES,
            describe_timeout: duration(DESCRIBE_TIMEOUT),
            session_ttl: keep(SESSION_TTL),
            retain: keep(RETAIN),
            shutdown_grace: duration(SHUTDOWN_GRACE),
            cache_dir: None,
            load_precompiled: false,
            model_timeout: duration(MODEL_TIMEOUT),
            max_tool_rounds: MAX_TOOL_ROUNDS,
            history_budget_tokens: HISTORY_BUDGET_TOKENS,
            max_tool_result_bytes: MAX_TOOL_RESULT_BYTES,
            approval_timeout: duration(APPROVAL_TIMEOUT),
            guest_memory_mb: GUEST_MEMORY_MB,
            guest_cpu_time: duration(GUEST_CPU_TIME),
            max_instances: MAX_INSTANCES,
            guest_runners: None,
            resolve: Vec::new(),
            worker_only: false,
        }
    }
}

impl Settings {
    /// How this process takes part in its task hub.
    pub(crate) fn role(&self) -> Role {
        match (self.worker_only, self.no_worker) {
            (true, _) => Role::Worker,
            (false, true) => Role::Front,
            (false, false) => Role::Serve,
        }
    }

    /// `(store URL, task hub name)` after the settings, the connection
    /// string and the defaults.
    pub(crate) fn store_location(&self) -> Result<(String, String), ConnectionStringError> {
        let connection = self
            .connection_string
            .as_deref()
            .map(str::parse::<ConnectionString>)
            .transpose()?;
        Ok(crate::taskhub::resolve(
            self.store.as_deref(),
            self.taskhub.as_deref(),
            connection.as_ref(),
        ))
    }

    /// The durable engine's limits.
    pub(crate) fn durable_limits(&self) -> Limits {
        let defaults = RetryLimits::default();
        Limits {
            max_history_events: self.max_history_events,
            max_episode_calls: self.max_episode_calls,
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

/// A setting that must not be printed: its `Debug` shows no part of it, so
/// logging the settings cannot leak a key.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub(crate) fn expose(&self) -> &str {
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

/// `"14d"`, or `"none"` (`null`, `off`, `never`) for "keep forever".
fn keep_for<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    let text = Option::<String>::deserialize(d)?;
    match text {
        None => Ok(None),
        Some(text) => crate::agents::parse_ttl(&text).map_err(serde::de::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_default_duration_parses() {
        for text in [
            defaults::LEASE,
            defaults::STREAM_TTL,
            defaults::POLL_INTERVAL,
            defaults::WRITER_DEADLINE,
            defaults::MIN_RETRY_DELAY,
            defaults::EPISODE_TIMEOUT,
            defaults::EPISODE_CPU_TIME,
            defaults::DESCRIBE_TIMEOUT,
            defaults::SHUTDOWN_GRACE,
            defaults::MODEL_TIMEOUT,
            defaults::APPROVAL_TIMEOUT,
            defaults::GUEST_CPU_TIME,
        ] {
            assert!(humantime::parse_duration(text).is_ok(), "{text}");
        }
        for text in [defaults::SESSION_TTL, defaults::RETAIN] {
            assert!(crate::agents::parse_ttl(text).unwrap().is_some(), "{text}");
        }
        assert!(defaults::HOST.parse::<IpAddr>().is_ok());
    }

    #[test]
    fn a_config_file_fills_what_it_names_and_leaves_the_defaults() {
        let settings: Settings = toml::from_str(
            r#"
            store = "postgres://app@db/agents"
            lease = "10s"
            session_ttl = "none"
            api_keys = ["admin:k1"]
            "#,
        )
        .unwrap();
        assert_eq!(settings.lease, Duration::from_secs(10));
        assert_eq!(settings.session_ttl, None);
        assert_eq!(settings.retain, Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(settings.port, 7071);
        assert_eq!(settings.api_keys[0].expose(), "admin:k1");
        assert!(!format!("{settings:?}").contains("k1"));
    }

    #[test]
    fn an_unknown_or_malformed_setting_is_refused_by_name() {
        let unknown = toml::from_str::<Settings>("lease_time = \"5s\"").unwrap_err();
        assert!(unknown.to_string().contains("lease_time"), "{unknown}");
        let malformed = toml::from_str::<Settings>("retain = \"soon\"").unwrap_err();
        assert!(malformed.to_string().contains("soon"), "{malformed}");
    }

    #[test]
    fn a_malformed_connection_string_is_an_error_not_a_default() {
        let settings = Settings {
            connection_string: Some("Endpoint".into()),
            ..Settings::default()
        };
        assert!(settings.store_location().is_err());
    }
}
