//! agenthost as a library: a web application embeds the agents, the durable
//! engine and their HTTP API. [`AgentHost::start`] opens the store, loads the
//! components and starts the worker; [`AgentHost::router`] is an axum
//! `Router` to merge into the application's own; [`AgentHost::shutdown`]
//! drains the worker. `agenthost serve` is built on exactly this.
//!
//! ```no_run
//! use std::time::Duration;
//! use axum::routing::get;
//!
//! # async fn example() -> anyhow::Result<()> {
//! let host = agenthost::embed::Builder::new()?
//!     .components("components")
//!     .store("sqlite://app.db")
//!     .start()
//!     .await?;
//! let app = axum::Router::new()
//!     .route("/hello", get(|| async { "hello from the app" }))
//!     .merge(host.router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! host.shutdown(Duration::from_secs(30)).await;
//! # Ok(())
//! # }
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use tokio_util::sync::CancellationToken;

use crate::agents::{AgentRunner, AgentsSettings};
use crate::cli::ServeArgs;
use crate::durable::{Orchestrator, OrchestratorConfig};
use crate::http::{self, ApiKeys, AppState, HttpConfig};
use crate::model::{ModelClient, ModelSettings};
use crate::registry::Registry;
use crate::runs::Runs;
use crate::store::{now_ms, Kind, Membership, Store, TaskHub};
use crate::streams::{ResponseStreams, StreamSettings};
use crate::wasm::{Limits, NetworkPolicy, Runtime, RuntimeConfig};

/// Settings of an embedded host: every `agenthost serve` flag, with the
/// same defaults and the same environment variables.
pub struct Builder {
    args: ServeArgs,
}

#[derive(Parser)]
struct Defaults {
    #[command(flatten)]
    args: ServeArgs,
}

impl Builder {
    /// The defaults of `agenthost serve`, after its environment variables
    /// (an error names a malformed one).
    pub fn new() -> Result<Self, clap::Error> {
        Ok(Self {
            args: Defaults::try_parse_from(["agenthost"])?.args,
        })
    }

    /// Settings as `agenthost serve` parsed them.
    pub fn from_args(args: ServeArgs) -> Self {
        Self { args }
    }

    /// The directory of `.wasm` components.
    pub fn components(mut self, dir: impl Into<PathBuf>) -> Self {
        self.args.components = dir.into();
        self
    }

    /// The store URL (`sqlite://…` or `postgres://…`).
    pub fn store(mut self, url: &str) -> Self {
        self.args.store = Some(url.to_string());
        self
    }

    /// An endpoint key, `SCOPE:KEY` (`invoke` or `admin`): with one, the
    /// routes answer only callers that present a key of their scope.
    pub fn api_key(mut self, setting: &str) -> Self {
        self.args
            .api_keys
            .push(crate::cli::Secret(setting.to_string()));
        self
    }

    pub fn taskhub(mut self, name: &str) -> Self {
        self.args.taskhub = Some(name.to_string());
        self
    }

    /// Any other setting.
    pub fn configure(mut self, change: impl FnOnce(&mut ServeArgs)) -> Self {
        change(&mut self.args);
        self
    }

    pub async fn start(self) -> anyhow::Result<AgentHost> {
        AgentHost::from_settings(self.args).await
    }
}

/// A running host: its routes and its worker.
pub struct AgentHost {
    state: AppState,
    runs: Arc<Runs>,
    orchestrator: Arc<Orchestrator>,
    store: Store,
    watching: CancellationToken,
    background: CancellationToken,
}

impl AgentHost {
    /// Opens the store, loads the components and starts the worker.
    pub async fn from_settings(args: ServeArgs) -> anyhow::Result<Self> {
        crate::metrics::install();
        let key_settings: Vec<String> = args
            .api_keys
            .iter()
            .map(|k| k.expose().to_string())
            .collect();
        let keys = ApiKeys::from_settings(&key_settings, &args.api_key_files)
            .context("invalid endpoint keys")?;
        if keys.is_empty() && args.require_keys && !args.worker_only {
            anyhow::bail!(
                "--require-keys is set but no endpoint key is configured: give --api-key \
                 SCOPE:KEY (SCOPE invoke or admin), AGENTHOST_API_KEYS or --api-key-file"
            );
        }
        let settings = ModelSettings::from_env().context("invalid model configuration")?;
        let model = ModelClient::new(settings, args.model_timeout)
            .context("could not create the model client")?;
        model
            .check_credential()
            .await
            .context("the model's credential cannot obtain a token")?;
        if model.is_offline() {
            tracing::warn!("no model endpoint configured (set OPENAI_BASE_URL/OPENAI_API_KEY/OPENAI_MODEL or AZURE_OPENAI_ENDPOINT/AZURE_OPENAI_DEPLOYMENT_NAME); answering with the built-in offline model");
        } else {
            tracing::info!(model = %model.describe(), "model configured");
        }
        let role = args.role();
        let store = open_store(&args).await?;
        tracing::info!(session_ttl = ?args.session_ttl.0, "idle sessions are forgotten after session_ttl (every message renews it; None: never)");
        if !role.works() && store.kind() == Kind::Sqlite {
            store.close().await;
            anyhow::bail!(
                "--no-worker needs a task hub that `agenthost worker` processes share: \
                 use a PostgreSQL store (--store postgres://…), or drop --no-worker"
            );
        }
        let runtime = Arc::new(
            Runtime::new(RuntimeConfig {
                cache_dir: args.cache_dir.clone(),
                limits: Limits {
                    memory_bytes: args.guest_memory_mb << 20,
                    cpu_time: args.guest_cpu_time,
                },
                max_instances: args.max_instances,
                describe_timeout: args.describe_timeout,
                episode_cpu_time: args.episode_cpu_time,
                network: NetworkPolicy::from_settings(&args.resolve)
                    .context("invalid --resolve")?,
            })
            .context("could not start the wasm runtime")?,
        );
        let registry = Arc::new(Registry::new(
            runtime.clone(),
            store.clone(),
            args.components.clone(),
        ));
        let loaded = registry.sync().await.with_context(|| {
            format!(
                "could not read the components directory {}",
                args.components.display()
            )
        })?;
        if loaded.loaded.is_empty() {
            tracing::warn!(dir = %args.components.display(), "no .wasm components loaded; nothing is served until one is added");
        }
        let watching = CancellationToken::new();
        if args.watch {
            crate::registry::watch(registry.clone(), watching.clone()).with_context(|| {
                format!(
                    "could not watch the components directory {} (start with --watch=false to load it once)",
                    args.components.display()
                )
            })?;
        }

        let settings = Arc::new(match &args.agent_settings {
            Some(path) => AgentsSettings::load(path)?,
            None => AgentsSettings::default(),
        });
        let runner = AgentRunner::new(
            runtime.clone(),
            model,
            store.clone(),
            args.max_tool_rounds,
            args.history_budget_tokens,
            args.approval_timeout,
            settings.clone(),
        );
        let streams = ResponseStreams::open(
            store.clone(),
            StreamSettings {
                redis: args.redis.clone().filter(|r| !r.trim().is_empty()),
                require_redis: args.require_redis,
                ttl: args.stream_ttl,
                max_followers: args.max_stream_followers,
            },
        )
        .await
        .context("could not open the response streams")?;
        let runs = Runs::new(
            store.clone(),
            registry.clone(),
            runner,
            streams.clone(),
            args.session_ttl.0,
            settings.clone(),
            role.works(),
        );
        let orchestrator = Orchestrator::new(
            store.clone(),
            registry.clone(),
            runtime.clone(),
            runs.clone(),
            OrchestratorConfig {
                limits: Arc::new(args.durable_limits()),
                episode_timeout: args.episode_timeout,
                hot_budget_bytes: args.hot_instances_mib.saturating_mul(1 << 20),
            },
            role.works(),
        );
        orchestrator.start();
        runs.start();
        let background = CancellationToken::new();
        if role.works() {
            tokio::spawn(expire_sessions(
                store.clone(),
                registry.clone(),
                settings.clone(),
                args.session_ttl.0,
                background.clone(),
            ));
        }
        if let (true, Some(retain)) = (role.works(), args.retain.0) {
            tokio::spawn(retain_finished(store.clone(), retain, background.clone()));
        }
        let state = AppState {
            registry,
            runs: runs.clone(),
            orchestrator: orchestrator.clone(),
            health: crate::health::Health::new(store.clone(), args.writer_deadline),
            streams: streams.clone(),
            config: Arc::new(HttpConfig {
                health_enabled: args.enable_health_check,
                max_body_bytes: args.max_body_bytes,
                wait_budget: args.poll_interval.saturating_mul(args.max_poll_retries),
                keys,
            }),
        };
        Ok(Self {
            state,
            runs,
            orchestrator,
            store,
            watching,
            background,
        })
    }

    /// The agents and orchestrations served now, by name.
    pub fn served(&self) -> (Vec<String>, Vec<String>) {
        (
            self.state.registry.agent_names(),
            self.state.registry.orchestration_names(),
        )
    }

    /// The agent, orchestration and management routes (`/api/…`,
    /// `/runtime/webhooks/durabletask/…`), to merge into an application's
    /// router. Unknown paths answer the host's JSON 404, so merge this last
    /// or give the application's routes first.
    pub fn router(&self) -> axum::Router {
        http::router(self.state.clone())
    }

    /// Stops the worker and closes the store: [`Self::drain`], then [`Self::close`].
    pub async fn shutdown(&self, grace: Duration) {
        self.drain(grace).await;
        self.close().await;
    }

    /// Stops the worker: no new work is taken, work under way has `grace`
    /// to finish; whatever is unfinished stays in the store and resumes at
    /// the next start. Requests still being answered keep the store.
    pub async fn drain(&self, grace: Duration) {
        self.watching.cancel();
        self.background.cancel();
        tokio::join!(self.runs.shutdown(grace), self.orchestrator.shutdown(grace));
    }

    /// Resolves, with the reason, once the store's writer is dead or has been
    /// stuck on one batch for four times `--writer-deadline`: the host can
    /// no longer commit anything, and the process should end so that its
    /// supervisor starts a fresh one (what is committed is safe).
    pub async fn writer_gone(&self) -> String {
        let mut ticker = tokio::time::interval(Duration::from_millis(500));
        loop {
            ticker.tick().await;
            if let Some(reason) = self.state.health.gone() {
                return reason;
            }
        }
    }

    /// Commits what is queued and closes the store; call it last.
    pub async fn close(&self) {
        let (writes, transactions) = self.store.commit_stats();
        tracing::info!(
            writes,
            transactions,
            "durable writes committed (group commit)"
        );
        self.state.streams.flush().await;
        self.store.close().await;
    }
}

/// Opens the task hub the settings name, with the remedy in the error.
async fn open_store(args: &ServeArgs) -> anyhow::Result<Store> {
    let (url, hub) = args.store_location();
    let hub = TaskHub::new(&hub)?;
    let membership = Membership {
        role: args.role(),
        lease: args.lease,
    };
    match Store::open(&url, &hub, membership).await {
        Ok(store) => {
            tracing::info!(taskhub = %hub, kind = ?store.kind(), "store open");
            Ok(store)
        }
        Err(e) if e.is_unreachable() => Err(anyhow::anyhow!(
            "{e}. Start the database, or point --store (AGENTHOST_STORE) or the connection \
             string's Endpoint at a reachable one; a SQLite path must be in a writable directory"
        )),
        Err(e) => Err(anyhow::Error::new(e).context(format!("could not open task hub '{hub}'"))),
    }
}

/// Sweeps idle sessions: each agent with its own expiry (the operator's
/// agent settings, else its component's), the others with the host's. The
/// check at enqueue time makes expiry exact; this reclaims space and keeps a
/// forgotten conversation from being read back.
async fn expire_sessions(
    store: Store,
    registry: Arc<Registry>,
    settings: Arc<AgentsSettings>,
    host_ttl: Option<Duration>,
    stop: CancellationToken,
) {
    let ms = |ttl: Duration| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    let mut pause = Duration::from_secs(1);
    loop {
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.cancelled() => return,
        }
        // Agents come and go (hot reload): their expiry is read each time.
        let own: Vec<(String, Option<Duration>)> = registry
            .agent_names()
            .into_iter()
            .filter_map(|name| {
                let described = registry.agent(&name)?.spec.options;
                let ttl = settings.of(&name).over(&described).session_ttl?;
                Some((name, ttl))
            })
            .chain(settings.session_ttls())
            .collect();
        let mut own = own;
        own.sort_by(|a, b| a.0.cmp(&b.0));
        own.dedup_by(|a, b| a.0 == b.0);
        let shortest = own.iter().filter_map(|(_, t)| *t).chain(host_ttl).min();
        pause = shortest.map_or(Duration::from_secs(60), |t| {
            (t / 2).clamp(Duration::from_millis(200), Duration::from_secs(60))
        });
        let now = now_ms();
        let mut expired = 0;
        let mut failed = None;
        for (agent, ttl) in &own {
            if let Some(ttl) = ttl {
                let of_agent = |a: &str| a == agent;
                let expiring = store.expire_sessions(now - ms(*ttl), &of_agent);
                match store.within("idle sessions", expiring).await {
                    Ok(n) => expired += n,
                    Err(e) => failed = Some(e),
                }
            }
        }
        if let Some(ttl) = host_ttl {
            let other = |a: &str| !own.iter().any(|(name, _)| name == a);
            match store
                .within(
                    "idle sessions",
                    store.expire_sessions(now - ms(ttl), &other),
                )
                .await
            {
                Ok(n) => expired += n,
                Err(e) => failed = Some(e),
            }
        }
        if expired > 0 {
            tracing::info!(sessions = expired, "expired idle sessions");
        }
        if let Some(e) = failed {
            tracing::warn!(error = %e, "could not expire idle sessions");
        }
    }
}

/// Deletes finished instances and ended runs older than `retain`, a sweep
/// every tenth of it (between a second and an hour); batches are bounded by
/// the store, so a first sweep over years of history does not hold it.
async fn retain_finished(store: Store, retain: Duration, stop: CancellationToken) {
    let pause = (retain / 10).clamp(Duration::from_secs(1), Duration::from_secs(3600));
    let ms = i64::try_from(retain.as_millis()).unwrap_or(i64::MAX);
    loop {
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.cancelled() => return,
        }
        match store.sweep_finished(now_ms().saturating_sub(ms)).await {
            Ok(swept) if swept.instances + swept.runs > 0 => {
                tracing::info!(instances = swept.instances, runs = swept.runs, retain = %humantime::format_duration(retain), "deleted finished work past its retention");
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "retention sweep failed; it runs again later"),
        }
    }
}
