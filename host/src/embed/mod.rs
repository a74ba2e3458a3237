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

use crate::agents::AgentsSettings;
use crate::http::{self, ApiKeys, Scope};
use crate::model::{ModelClient, ModelSettings};
use crate::wasm::{Limits, NetworkPolicy, Runtime, RuntimeConfig};
use hubs::{HubStack, Hubs, Shared};

mod error;
mod hubs;
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

/// A running host: its routes and its worker, for each task hub it serves.
pub struct AgentHost {
    hubs: Arc<Hubs>,
    /// The host's own hub: what a request naming no hub is served by.
    primary: Arc<HubStack>,
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
        tracing::info!(session_ttl = ?args.session_ttl, "idle sessions are forgotten after session_ttl (every message renews it; None: never)");
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
        let agents = Arc::new(match &args.agent_settings {
            Some(path) => {
                AgentsSettings::load(path).map_err(|e| StartError::AgentSettings(e.into()))?
            }
            None => AgentsSettings::default(),
        });
        let hubs = Hubs::open_at_start(Shared {
            args,
            runtime,
            model: Arc::new(model),
            keys,
            agents,
        })
        .await?;
        let primary = hubs.primary_stack().ok_or_else(|| {
            StartError::setting(std::io::Error::other(
                "the host's own task hub did not open",
            ))
        })?;
        Ok(Self { hubs, primary })
    }

    /// The agents and orchestrations served now, by name.
    pub fn served(&self) -> (Vec<String>, Vec<String>) {
        let registry = &self.primary.state.registry;
        (registry.agent_names(), registry.orchestration_names())
    }

    /// The agent, orchestration and management routes (`/api/…`,
    /// `/runtime/webhooks/durabletask/…`), to merge into an application's
    /// router. Unknown paths answer the host's JSON 404, so merge this last
    /// or give the application's routes first. A request naming another
    /// task hub (`?taskHub=`) is served by that hub's routes.
    pub fn router(&self) -> axum::Router {
        http::hubs::router(self.primary.state.clone(), self.hubs.clone())
    }

    /// The Durable Task sidecar protocol's gRPC service (`--grpc`).
    pub(crate) fn grpc_routes(&self) -> tonic::service::Routes {
        http::grpc::routes(self.primary.state.clone(), self.hubs.clone())
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
        self.hubs.drain(grace).await;
    }

    /// Resolves, with the reason, once the store's writer is dead or has been
    /// stuck on one batch for four times `--writer-deadline`: the host can
    /// no longer commit anything, and the process should end so that its
    /// supervisor starts a fresh one (what is committed is safe).
    pub async fn writer_gone(&self) -> String {
        let mut ticker = tokio::time::interval(Duration::from_millis(500));
        loop {
            ticker.tick().await;
            for stack in self.hubs.stacks() {
                if let Some(reason) = stack.state.health.gone() {
                    return format!("task hub '{}': {reason}", stack.state.config.hub);
                }
            }
        }
    }

    /// Commits what is queued and closes the stores; call it last.
    pub async fn close(&self) {
        self.hubs.close().await;
    }
}
