//! agenthost as a library: a web application embeds the agents, the durable
//! engine and their HTTP API. [`AgentHost::start`] opens the store, loads the
//! components and starts the worker; [`AgentHost::router`] is an axum
//! `Router` to merge into the application's own; [`AgentHost::shutdown`]
//! drains the worker. `agenthost serve` is built on exactly this.
//!
//! The settings are a plain [`Settings`] struct with `serve`'s defaults:
//! set its fields in code, or read it from a config file with serde;
//! [`Builder::new`] starts from the `AGENTHOST_*` environment variables as
//! `serve` does.
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

use tokio_util::sync::CancellationToken;

use crate::agents::{AgentRunner, AgentsSettings, ModelWindow};
use crate::durable::{Orchestrator, OrchestratorConfig};
use crate::http::{self, ApiKeys, AppState, HttpConfig, Scope};
use crate::model::{ModelClient, ModelSettings};
use crate::registry::Registry;
use crate::runs::Runs;
use crate::sdk_workers::Patience;
use crate::store::{Kind, Membership, Store, TaskHub};
use crate::streams::{ResponseStreams, StreamSettings};
use crate::wasm::{Limits, NetworkPolicy, Runtime, RuntimeConfig};

mod error;
mod sweeps;

pub use crate::settings::{Secret, Settings};
pub use error::StartError;

/// Builds an embedded host from [`Settings`].
pub struct Builder {
    settings: Settings,
}

impl Builder {
    /// The defaults of `agenthost serve`, after its `AGENTHOST_*`
    /// environment variables (an error names a malformed one).
    pub fn new() -> Result<Self, StartError> {
        let settings = crate::settings::settings_from_env().map_err(StartError::setting)?;
        Ok(Self { settings })
    }

    /// These settings as they are: no `AGENTHOST_*` variable is read. (The
    /// model endpoint and its credential still come from the environment,
    /// `OPENAI_*` or `AZURE_OPENAI_*`, as for `agenthost serve`.)
    pub fn with_settings(settings: Settings) -> Self {
        Self { settings }
    }

    /// The directory of `.wasm` components.
    pub fn components(mut self, dir: impl Into<PathBuf>) -> Self {
        self.settings.components = dir.into();
        self
    }

    /// The store URL (`sqlite://…` or `postgres://…`).
    pub fn store(mut self, url: &str) -> Self {
        self.settings.store = Some(url.to_string());
        self
    }

    /// An endpoint key, `SCOPE:KEY` (`invoke` or `admin`): with one, the
    /// routes answer only callers that present a key of their scope.
    pub fn api_key(mut self, setting: &str) -> Self {
        self.settings.api_keys.push(Secret::new(setting));
        self
    }

    /// The task hub inside the store.
    pub fn taskhub(mut self, name: &str) -> Self {
        self.settings.taskhub = Some(name.to_string());
        self
    }

    /// Any other setting.
    pub fn configure(mut self, change: impl FnOnce(&mut Settings)) -> Self {
        change(&mut self.settings);
        self
    }

    /// Opens the store, loads the components and starts the worker.
    pub async fn start(self) -> Result<AgentHost, StartError> {
        AgentHost::start(self.settings).await
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
    pub(crate) async fn start(args: Settings) -> Result<Self, StartError> {
        crate::metrics::install();
        let key_settings: Vec<String> = args
            .api_keys
            .iter()
            .map(|k| k.expose().to_string())
            .collect();
        let keys = ApiKeys::from_settings(&key_settings, &args.api_key_files)
            .map_err(|e| StartError::Keys(e.into()))?;
        if keys.is_empty() && args.require_keys && !args.worker_only {
            return Err(StartError::KeysRequired);
        }
        if !args.worker_only {
            if keys.is_empty() {
                tracing::info!("endpoint keys off: every route is open to whoever reaches the port (--api-key SCOPE:KEY turns them on)");
            } else {
                tracing::info!(
                    invoke_keys = keys.count(Scope::Invoke),
                    admin_keys = keys.count(Scope::Admin),
                    "endpoint keys on: every route but health, the OpenAPI document and agent cards needs a key (invoke: runs, A2A, MCP, starting orchestrations; admin: everything)"
                );
            }
        }
        let settings = ModelSettings::from_env().map_err(|e| StartError::Model(e.into()))?;
        let model = ModelClient::new(settings, args.model_timeout)
            .map_err(|e| StartError::Model(e.into()))?;
        model
            .check_credential()
            .await
            .map_err(|e| StartError::Credential(e.into()))?;
        if model.is_offline() {
            tracing::warn!("no model endpoint configured (set OPENAI_BASE_URL/OPENAI_API_KEY/OPENAI_MODEL or AZURE_OPENAI_ENDPOINT/AZURE_OPENAI_DEPLOYMENT_NAME); answering with the built-in offline model");
        } else {
            tracing::info!(model = %model.describe(), "model configured");
        }
        let role = args.role();
        let store = open_store(&args).await?;
        tracing::info!(session_ttl = ?args.session_ttl, "idle sessions are forgotten after session_ttl (every message renews it; None: never)");
        if !role.works() && store.kind() == Kind::Sqlite {
            store.close().await;
            return Err(StartError::FrontNeedsSharedHub);
        }
        let runtime = Arc::new(
            Runtime::new(RuntimeConfig {
                cache_dir: args.cache_dir.clone(),
                load_precompiled: args.load_precompiled,
                limits: Limits {
                    memory_bytes: args.guest_memory_mb << 20,
                    cpu_time: args.guest_cpu_time,
                },
                max_instances: args.max_instances,
                describe_timeout: args.describe_timeout,
                episode_cpu_time: args.episode_cpu_time,
                network: NetworkPolicy::from_settings(&args.resolve)
                    .map_err(StartError::setting)?,
                guest_runners: args.guest_runners,
            })
            .map_err(|e| StartError::Runtime(e.into()))?,
        );
        // A first start names a directory that is not there yet: made
        // here, so that components can be dropped into it while serving.
        if !args.components.exists() {
            std::fs::create_dir_all(&args.components).map_err(|source| StartError::Components {
                dir: args.components.clone(),
                source,
            })?;
            tracing::info!(dir = %args.components.display(), "created the components directory, which did not exist: drop .wasm components into it (they load without a restart)");
        }
        let registry = Arc::new(Registry::new(
            runtime.clone(),
            store.clone(),
            args.components.clone(),
        ));
        let loaded = registry
            .sync()
            .await
            .map_err(|source| StartError::Components {
                dir: args.components.clone(),
                source,
            })?;
        if loaded.loaded.is_empty() {
            tracing::warn!(dir = %args.components.display(), "no .wasm components loaded; nothing is served until one is added");
        }
        let watching = CancellationToken::new();
        if args.watch {
            crate::registry::watch(registry.clone(), watching.clone()).map_err(|e| {
                StartError::Watch {
                    dir: args.components.clone(),
                    source: e.into(),
                }
            })?;
        }

        let settings = Arc::new(match &args.agent_settings {
            Some(path) => {
                AgentsSettings::load(path).map_err(|e| StartError::AgentSettings(e.into()))?
            }
            None => AgentsSettings::default(),
        });
        let runner = AgentRunner::new(
            runtime.clone(),
            model,
            store.clone(),
            args.max_tool_rounds,
            ModelWindow {
                history_budget_tokens: args.history_budget_tokens,
                max_tool_result_bytes: args.max_tool_result_bytes,
            },
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
        .map_err(|e| StartError::Streams(e.into()))?;
        let runs = Runs::new(
            store.clone(),
            registry.clone(),
            runner,
            streams.clone(),
            args.session_ttl,
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
                // Only `serve --grpc` on a host that runs work has workers.
                sdk_patience: Patience {
                    for_a_worker: if args.grpc && !args.worker_only && role.works() {
                        args.sdk_worker_wait
                    } else {
                        Duration::ZERO
                    },
                    for_an_answer: args.sdk_activity_timeout,
                },
            },
            role.works(),
        );
        orchestrator.start();
        runs.start();
        let background = CancellationToken::new();
        if role.works() {
            tokio::spawn(sweeps::expire_sessions(
                store.clone(),
                registry.clone(),
                settings.clone(),
                args.session_ttl,
                background.clone(),
            ));
        }
        if let (true, Some(retain)) = (role.works(), args.retain) {
            tokio::spawn(sweeps::retain_finished(
                store.clone(),
                retain,
                background.clone(),
            ));
        }
        // Checked when the store opened: what a gRPC caller must name.
        let (_, hub) = args.store_location().map_err(StartError::setting)?;
        let state = AppState {
            registry,
            runs: runs.clone(),
            orchestrator: orchestrator.clone(),
            health: crate::health::Health::new(
                store.clone(),
                args.writer_deadline,
                orchestrator.scheduler_reads(),
            ),
            streams: streams.clone(),
            config: Arc::new(HttpConfig {
                health_enabled: args.enable_health_check,
                mcp_enabled: args.mcp,
                max_body_bytes: args.max_body_bytes,
                body_timeout: args.body_timeout,
                wait_budget: args.poll_interval.saturating_mul(args.max_poll_retries),
                allowed: crate::http::Allowed {
                    hosts: args.allowed_hosts.clone(),
                    origins: args.allowed_origins.clone(),
                    keyless: keys.is_empty(),
                },
                keys,
                hub,
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

    /// The Durable Task sidecar protocol's gRPC service (`--grpc`).
    pub(crate) fn grpc_routes(&self) -> tonic::service::Routes {
        http::grpc::routes(self.state.clone())
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
async fn open_store(args: &Settings) -> Result<Store, StartError> {
    let (url, hub) = args.store_location().map_err(StartError::setting)?;
    let hub = TaskHub::new(&hub).map_err(StartError::setting)?;
    let membership = Membership {
        role: args.role(),
        lease: args.lease,
    };
    match Store::open(&url, &hub, membership).await {
        Ok(store) => {
            tracing::info!(taskhub = %hub, kind = ?store.kind(), "store open");
            Ok(store)
        }
        Err(e) if e.is_unreachable() => Err(StartError::StoreUnreachable(e.into())),
        Err(e) => Err(StartError::Store {
            hub: hub.to_string(),
            source: e.into(),
        }),
    }
}
