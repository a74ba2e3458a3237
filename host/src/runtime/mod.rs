//! The WebAssembly side of the host: one wasmtime [`Engine`], compiled
//! components (cached on disk by content digest), and calls into guests under
//! memory and CPU limits.
//!
//! Nothing here knows about HTTP or sessions. A guest reaches the host only
//! through the imports linked in [`state`]; it gets WASI p2 with no
//! environment, no files, no sockets and no arguments.

mod bindings;
mod cache;
mod durable_imports;
mod engine;
mod error;
mod manifest;
mod state;

pub use cache::ArtifactCache;
pub use error::{GuestError, LoadError};
pub use manifest::{
    ActivitySpec, AgentSpec, Approval, EventRouteSpec, Manifest, OrchestrationSpec,
};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::component::Linker;
use wasmtime::{Engine, Store};

use bindings::{AgenthostComponent, AgenthostComponentPre};
use durable_imports::Stop;

use crate::durable::replay::Replay;
use state::GuestState;

/// Per-call limits every guest runs under.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest linear memory a guest may grow to.
    pub memory_bytes: usize,
    /// CPU time one call into a guest may use before it is interrupted.
    pub cpu_time: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            memory_bytes: 128 << 20,
            cpu_time: Duration::from_secs(10),
        }
    }
}

/// Settings of the runtime.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where compiled artifacts are kept between starts.
    pub cache_dir: PathBuf,
    pub limits: Limits,
    /// How many guest instances may be alive at once (pooling allocator slots).
    pub max_instances: u32,
}

/// Why an activity call produced no result, as the guest reported it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActivityFailure {
    #[error("no activity named '{0}'")]
    NotFound(String),
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    #[error("{0}")]
    Failed(String),
}

/// How an orchestration episode ended.
#[derive(Debug)]
pub enum EpisodeEnd {
    /// `run-orchestration` returned: the output or the orchestration's own error.
    Returned(Result<String, String>),
    /// The code awaits a task that has not finished.
    Waiting,
    /// The code broke the replay contract (non-determinism, unknown task, …).
    Broken(String),
}

/// The engine and everything compiled on it; shared by all requests.
pub struct Runtime {
    engine: Engine,
    /// One permit per live guest instance: callers wait for a pooling-allocator
    /// slot instead of failing when every slot is taken.
    slots: tokio::sync::Semaphore,
    linker: Linker<GuestState>,
    cache: ArtifactCache,
    limits: Limits,
    _ticker: engine::EpochTicker,
}

/// A validated, compiled component ready to instantiate.
pub struct LoadedComponent {
    /// File stem, e.g. `weather` for `weather.wasm`.
    pub name: String,
    pub path: PathBuf,
    /// `sha256:` + hex of the file's bytes.
    pub digest: String,
    pub manifest: Manifest,
    /// True when the compiled artifact came from the on-disk cache.
    pub from_cache: bool,
    pub load_time: Duration,
    pre: AgenthostComponentPre<GuestState>,
}

impl LoadedComponent {
    /// What the component is and offers, as `GET /api/components` and
    /// `agenthost inspect` show it.
    pub fn describe_json(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "file": self.path.display().to_string(),
            "digest": self.digest,
            "agents": self.manifest.agents,
            "activities": self.manifest.activities,
            "orchestrations": self.manifest.orchestrations,
            // Nothing is granted yet: no network, files or environment.
            "grants": {},
            "load_ms": self.load_time.as_secs_f64() * 1000.0,
            "from_cache": self.from_cache,
        })
    }
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Self, LoadError> {
        let engine = engine::build(&config)?;
        let mut linker = Linker::new(&engine);
        state::link(&mut linker)?;
        let cache = ArtifactCache::open(&config.cache_dir, &engine)?;
        let ticker = engine::EpochTicker::start(engine.clone());
        let slots = tokio::sync::Semaphore::new(config.max_instances.max(1) as usize);
        Ok(Self {
            engine,
            slots,
            linker,
            cache,
            limits: config.limits,
            _ticker: ticker,
        })
    }

    /// Reads, compiles (or loads from cache), validates and describes one file.
    ///
    /// Compilation runs on a blocking thread: it takes 100 ms or more and must
    /// never stall the request path.
    pub async fn load(&self, path: &Path) -> Result<Arc<LoadedComponent>, LoadError> {
        let started = Instant::now();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .ok_or_else(|| LoadError::BadFileName(path.to_path_buf()))?
            .to_string();
        let bytes = tokio::fs::read(path).await.map_err(|e| LoadError::Read {
            path: path.to_path_buf(),
            source: e,
        })?;
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&bytes)));
        let engine = self.engine.clone();
        let cache = self.cache.clone();
        let key = digest.clone();
        let (component, from_cache) =
            tokio::task::spawn_blocking(move || cache.get_or_compile(&engine, &key, &bytes))
                .await
                .map_err(|e| LoadError::Compile(format!("the compile task failed: {e}")))??;
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::Link(error::describe(&e)))?;
        let pre = AgenthostComponentPre::new(instance_pre)
            .map_err(|e| LoadError::Link(error::describe(&e)))?;
        let mut loaded = LoadedComponent {
            name,
            path: path.to_path_buf(),
            digest,
            manifest: Manifest::default(),
            from_cache,
            load_time: Duration::ZERO,
            pre,
        };
        let described = self.describe(&loaded).await.map_err(LoadError::Describe)?;
        loaded.manifest = Manifest::from_wit(described)?;
        loaded.load_time = started.elapsed();
        Ok(Arc::new(loaded))
    }

    async fn describe(
        &self,
        component: &LoadedComponent,
    ) -> Result<bindings::Manifest, GuestError> {
        let _slot = self.slot(component).await?;
        let (mut store, instance) = self.instantiate(component).await?;
        instance
            .agenthost_host_component()
            .call_describe(&mut store)
            .await
            .map_err(|e| GuestError::from_call(&component.name, &e, &store))
    }

    /// Runs activity `name` in a fresh instance of the component.
    ///
    /// `Ok(Err(_))` is the guest saying the activity failed; `Err(_)` is the
    /// guest itself failing (trap, deadline, memory).
    pub async fn invoke_activity(
        &self,
        component: &LoadedComponent,
        name: &str,
        arguments: &str,
    ) -> Result<Result<String, ActivityFailure>, GuestError> {
        let _slot = self.slot(component).await?;
        let (mut store, instance) = self.instantiate(component).await?;
        let result = instance
            .agenthost_host_component()
            .call_invoke_activity(&mut store, name, arguments)
            .await
            .map_err(|e| GuestError::from_call(&component.name, &e, &store))?;
        Ok(result.map_err(|e| match e {
            bindings::ActivityError::NotFound(m) => ActivityFailure::NotFound(m),
            bindings::ActivityError::InvalidArguments(m) => ActivityFailure::InvalidArguments(m),
            bindings::ActivityError::Failed(m) => ActivityFailure::Failed(m),
        }))
    }

    /// Runs one episode of an orchestration: the guest from the start, with
    /// its durable calls answered by `replay`. Returns how the episode ended
    /// and the replay (with the calls to journal).
    pub async fn run_orchestration(
        &self,
        component: &LoadedComponent,
        name: &str,
        input: &str,
        instance_id: &str,
        replay: Replay,
    ) -> Result<(EpisodeEnd, Replay), GuestError> {
        let _slot = self.slot(component).await?;
        let store = state::new_orchestration_store(
            &self.engine,
            &component.name,
            self.limits,
            instance_id,
            replay,
        );
        let (mut store, instance) = self.instantiate_in(component, store).await?;
        let result = instance
            .agenthost_host_component()
            .call_run_orchestration(&mut store, name, input)
            .await;
        let end = match result {
            Ok(returned) => EpisodeEnd::Returned(returned),
            Err(e) => match e.downcast_ref::<Stop>() {
                Some(Stop::Waiting) => EpisodeEnd::Waiting,
                Some(stop) => EpisodeEnd::Broken(stop.to_string()),
                None => return Err(GuestError::from_call(&component.name, &e, &store)),
            },
        };
        let replay = store
            .data_mut()
            .orchestration
            .take()
            .map(|scope| scope.replay)
            .ok_or_else(|| GuestError::Trap {
                component: component.name.clone(),
                reason: "the orchestration state was lost".into(),
            })?;
        Ok((end, replay))
    }

    async fn slot(
        &self,
        component: &LoadedComponent,
    ) -> Result<tokio::sync::SemaphorePermit<'_>, GuestError> {
        self.slots
            .acquire()
            .await
            .map_err(|_| GuestError::Instantiate {
                component: component.name.clone(),
                reason: "the runtime is shutting down".into(),
            })
    }

    async fn instantiate(
        &self,
        component: &LoadedComponent,
    ) -> Result<(Store<GuestState>, AgenthostComponent), GuestError> {
        let store = state::new_store(&self.engine, &component.name, self.limits);
        self.instantiate_in(component, store).await
    }

    async fn instantiate_in(
        &self,
        component: &LoadedComponent,
        mut store: Store<GuestState>,
    ) -> Result<(Store<GuestState>, AgenthostComponent), GuestError> {
        let instance = component
            .pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| GuestError::Instantiate {
                component: component.name.clone(),
                reason: error::describe(&e),
            })?;
        Ok((store, instance))
    }
}
