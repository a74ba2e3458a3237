//! The WebAssembly side of the host: one wasmtime [`Engine`], compiled
//! components (cached on disk by content digest), and calls into guests under
//! memory and CPU limits.
//!
//! Nothing here knows about HTTP or sessions. A guest reaches the host only
//! through the imports linked in [`host`], one file per capability; it gets WASI p2 with no
//! environment, no files, no sockets and no arguments.

mod bindings;
mod cache;
mod cache_folder;
mod connect;
mod cpu_share;
mod destinations;
mod engine;
mod engine_tick;
mod episode_run;
mod error;
mod files;
mod grants;
mod host;
mod inputs_bindings;
mod manifest;
mod orchestration_scope;
mod send_gate;
mod settings_bindings;
mod trust;

pub use cache::{Artifact, ArtifactCache, Beside, PRECOMPILED};
pub use destinations::NetworkPolicy;
pub use error::{GuestError, LoadError};
pub use files::{component_name, digest_of, ComponentFiles};
pub use grants::{Ceilings, Grants};
pub use manifest::{AgentOptions, AgentSpec, Approval, Manifest, OrchestrationSpec};
pub use send_gate::{HeldBack, SendGate};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::component::Linker;
use wasmtime::{Engine, Store};

use bindings::{AgenthostComponent, AgenthostComponentPre};
use orchestration_scope::Stop;

use host::GuestState;

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

/// A call may take this many times its CPU limit in wall-clock time.
pub const WALL_CLOCK_FACTOR: u32 = 6;

/// Settings of the runtime.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where compiled artifacts are kept between starts; `None`: the
    /// user's cache folder ([`cache_folder`]). Either is used only if no
    /// other user may write it ([`trust`]).
    pub cache_dir: Option<PathBuf>,
    /// Whether a component's compiled code found beside it
    /// ([`PRECOMPILED`]) is loaded: the operator's choice, since it is
    /// native code ([`cache`]). Commands that load a file (`build`,
    /// `inspect`, `compile`) never do.
    pub load_precompiled: bool,
    pub limits: Limits,
    /// How many guest instances may be alive at once (pooling allocator slots).
    pub max_instances: u32,
    /// Longest `describe()` may run (wall clock) when a component loads.
    pub describe_timeout: Duration,
    /// CPU time one episode of orchestration code may use (at most the
    /// component's own CPU limit): an episode only replays and decides, so
    /// code that spins is stopped long before it holds a slot for seconds.
    pub episode_cpu_time: Duration,
    /// Guests' outbound rules ([`destinations`]).
    pub network: NetworkPolicy,
    /// How many guest calls may run (hold a thread) at once, shared fairly
    /// between components ([`cpu_share`]); `None`: [`default_runners`].
    pub guest_runners: Option<usize>,
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

/// The engine and everything compiled on it; shared by all requests.
pub struct Runtime {
    engine: Engine,
    /// One permit per live guest instance: callers wait for a pooling-allocator
    /// slot instead of failing when every slot is taken.
    slots: tokio::sync::Semaphore,
    linker: Linker<GuestState>,
    /// The same imports, with clock waits trapping ([`host::link_orchestration`]).
    orchestration_linker: Linker<GuestState>,
    cache: ArtifactCache,
    load_precompiled: bool,
    ceilings: Ceilings,
    describe_timeout: Duration,
    episode_cpu_time: Duration,
    /// Shares the runners guest code runs with between components
    /// ([`cpu_share`]).
    cpu: Arc<cpu_share::CpuGate>,
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
    /// Where its compiled code came from.
    pub artifact: Artifact,
    pub load_time: Duration,
    pub grants: Arc<Grants>,
    /// Its share of the host's slots: the `max_instances` grant, else
    /// [`default_share`].
    instances: Arc<tokio::sync::Semaphore>,
    /// How many of the host's slots one of its instances takes
    /// ([`engine::slots_per_instance`]).
    slots_per_instance: u32,
    pre: AgenthostComponentPre<GuestState>,
    /// Instantiates it for orchestration episodes.
    orchestration_pre: AgenthostComponentPre<GuestState>,
}

impl LoadedComponent {
    /// Whether instances may need this exact version later: to replay its
    /// orchestrations, or to call its activities in the version they pinned.
    pub fn is_versioned(&self) -> bool {
        !self.manifest.orchestrations.is_empty() || !self.manifest.activities.is_empty()
    }

    /// Whether its compiled code was read, not compiled by this load.
    pub fn from_cache(&self) -> bool {
        self.artifact != Artifact::Compiled
    }

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
            "grants": *self.grants,
            "load_ms": self.load_time.as_secs_f64() * 1000.0,
            "from_cache": self.from_cache(),
            "artifact": self.artifact.as_str(),
            "slots_per_instance": self.slots_per_instance,
        })
    }
}

/// What a component says of itself when it loads: its manifest, its
/// agents' settings, its orchestrations' input schemas.
type Described = (
    bindings::Manifest,
    Vec<settings_bindings::Settings>,
    Vec<inputs_bindings::InputSchema>,
);

impl Runtime {
    pub fn new(config: RuntimeConfig) -> Result<Self, LoadError> {
        let engine = engine::build(&config)?;
        let mut linker = Linker::new(&engine);
        host::link(&mut linker)?;
        let mut orchestration_linker = Linker::new(&engine);
        host::link_orchestration(&mut orchestration_linker)?;
        let cache = ArtifactCache::open(config.cache_dir.as_deref(), &engine)?;
        let ticker = engine::EpochTicker::start(engine.clone());
        let slots = tokio::sync::Semaphore::new(config.max_instances.max(1) as usize);
        let runners = config.guest_runners.unwrap_or_else(default_runners).max(1);
        tracing::debug!(runners, "guest code runs with this many runners");
        Ok(Self {
            engine,
            slots,
            linker,
            orchestration_linker,
            cache,
            load_precompiled: config.load_precompiled,
            ceilings: Ceilings {
                limits: config.limits,
                max_instances: config.max_instances.max(1),
                network: Arc::new(config.network),
            },
            describe_timeout: config.describe_timeout,
            episode_cpu_time: config.episode_cpu_time,
            cpu: cpu_share::CpuGate::new(runners),
            _ticker: ticker,
        })
    }

    /// Reads one file and its sidecar grants, then loads it as
    /// [`Runtime::load_bytes`] does.
    pub async fn load(&self, path: &Path) -> Result<Arc<LoadedComponent>, LoadError> {
        let files = ComponentFiles::read(path).await?;
        let grants = self.grants(&files.name, files.grants_source.as_deref())?;
        self.load_bytes(&files.name, path, files.bytes, grants)
            .await
    }

    /// Puts the compiled code of `component` (loaded by this runtime) beside
    /// the file `placed`, where a host loading that file finds it without
    /// compiling ([`PRECOMPILED`]). Returns the artifact's path.
    pub fn place_beside(
        &self,
        component: &LoadedComponent,
        placed: &Path,
    ) -> Result<PathBuf, LoadError> {
        let name = component_name(placed)?;
        let folder = placed.parent().unwrap_or(Path::new("."));
        self.cache
            .place_beside(
                &component.digest,
                Beside {
                    name: &name,
                    folder,
                    load: false,
                },
            )
            .map_err(|reason| LoadError::Cache {
                path: folder.join(PRECOMPILED).join(&name),
                reason,
            })
    }

    /// Checks a component's grants (the sidecar's text, if it has one) against
    /// the host's limits and environment.
    pub fn grants(&self, component: &str, source: Option<&str>) -> Result<Grants, LoadError> {
        match source {
            Some(source) => Grants::parse(component, source, &self.ceilings, &|v| {
                std::env::var(v).ok()
            }),
            None => Ok(Grants::none(&self.ceilings)),
        }
    }

    /// Compiles (or loads from cache), validates and describes one component.
    ///
    /// Compilation runs on a blocking thread: it takes 100 ms or more and must
    /// never stall the request path.
    pub async fn load_bytes(
        &self,
        name: &str,
        path: &Path,
        bytes: Vec<u8>,
        grants: Grants,
    ) -> Result<Arc<LoadedComponent>, LoadError> {
        let started = Instant::now();
        let digest = digest_of(&bytes);
        let engine = self.engine.clone();
        let cache = self.cache.clone();
        let key = digest.clone();
        let (named, folder) = (name.to_string(), path.parent().map(Path::to_path_buf));
        let load = self.load_precompiled;
        let (component, artifact, slots_per_instance) = tokio::task::spawn_blocking(move || {
            let beside = folder.as_deref().map(|folder| Beside {
                name: &named,
                folder,
                load,
            });
            cache
                .get_or_compile(&engine, &key, &bytes, beside)
                .map(|(component, artifact)| {
                    let slots = engine::slots_per_instance(&component, &bytes);
                    (component, artifact, slots)
                })
        })
        .await
        .map_err(|e| LoadError::Compile(format!("the compile task failed: {e}")))??;
        if slots_per_instance > self.ceilings.max_instances {
            return Err(LoadError::TooLarge {
                slots: slots_per_instance,
                max_instances: self.ceilings.max_instances,
            });
        }
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| LoadError::Link(error::describe(&e)))?;
        let pre = AgenthostComponentPre::new(instance_pre)
            .map_err(|e| LoadError::Link(error::describe(&e)))?;
        let orchestration_pre = self
            .orchestration_linker
            .instantiate_pre(&component)
            .and_then(AgenthostComponentPre::new)
            .map_err(|e| LoadError::Link(error::describe(&e)))?;
        let share = grants
            .max_instances
            .unwrap_or_else(|| default_share(self.ceilings.max_instances));
        let instances = Arc::new(tokio::sync::Semaphore::new(share as usize));
        let mut loaded = LoadedComponent {
            name: name.to_string(),
            path: path.to_path_buf(),
            digest,
            manifest: Manifest::default(),
            artifact,
            load_time: Duration::ZERO,
            grants: Arc::new(grants),
            instances,
            slots_per_instance,
            pre,
            orchestration_pre,
        };
        let (described, settings, inputs) =
            self.describe(&loaded).await.map_err(LoadError::Describe)?;
        loaded.manifest = Manifest::from_wit(described)?
            .with_settings(&settings)?
            .with_input_schemas(&inputs)?;
        loaded.load_time = started.elapsed();
        Ok(Arc::new(loaded))
    }

    /// The component's manifest, its agents' settings and its
    /// orchestrations' input schemas when it exports them (components built
    /// before those exports have none).
    async fn describe(&self, component: &LoadedComponent) -> Result<Described, GuestError> {
        let _slot = self.slot(component).await?;
        let mut store = host::new_store(&self.engine, &component.name, &component.grants);
        let instantiate_error = |e: wasmtime::Error| GuestError::Instantiate {
            component: component.name.clone(),
            reason: error::describe(&e),
        };
        let raw = component
            .pre
            .instance_pre()
            .instantiate_async(&mut store)
            .await
            .map_err(instantiate_error)?;
        let instance = AgenthostComponent::new(&mut store, &raw).map_err(instantiate_error)?;
        let settings = settings_bindings::AgentSettingsProvider::new(&mut store, &raw).ok();
        let inputs = inputs_bindings::OrchestrationInputsProvider::new(&mut store, &raw).ok();
        // A describe that blocks (a sleep, a poll) would hold the load, and
        // with it the whole sync, forever.
        let limit = self.describe_timeout;
        let ticks = store.data().ticks();
        let described = async {
            let manifest = instance
                .agenthost_host_component()
                .call_describe(&mut store)
                .await?;
            let settings = match &settings {
                Some(provider) => {
                    provider
                        .agenthost_host_agent_settings()
                        .call_agent_settings(&mut store)
                        .await?
                }
                None => Vec::new(),
            };
            let inputs = match &inputs {
                Some(provider) => {
                    provider
                        .agenthost_host_orchestration_inputs()
                        .call_input_schemas(&mut store)
                        .await?
                }
                None => Vec::new(),
            };
            Ok::<_, wasmtime::Error>((manifest, settings, inputs))
        };
        let described = self.gated(component, ticks, described);
        let result =
            tokio::time::timeout(limit, described)
                .await
                .map_err(|_| GuestError::WallClock {
                    component: component.name.clone(),
                    limit,
                })?;
        result.map_err(|e| {
            GuestError::from_call(&component.name, &e, store.data().hit_memory_limit())
        })
    }

    /// Runs activity `name` in a fresh instance of the component.
    ///
    /// `Ok(Err(_))` is the guest saying the activity failed; `Err(_)` is the
    /// guest itself failing (trap, deadline, memory).
    /// With `gate`, each outbound request asks it first (see [`SendGate`]);
    /// a call one of whose requests it held back ends in
    /// [`GuestError::HeldBack`], whatever the guest made of the refusal.
    pub async fn invoke_activity(
        &self,
        component: &LoadedComponent,
        name: &str,
        arguments: &str,
        gate: Option<SendGate>,
    ) -> Result<Result<String, ActivityFailure>, GuestError> {
        let _slot = self.slot(component).await?;
        let (mut store, instance) = self.instantiate(component).await?;
        let held_back = gate.map(|gate| store.data_mut().gate_outbound(gate));
        // CPU time is bounded by epochs; time spent waiting in host calls
        // (outbound HTTP) is bounded here, so no call holds a slot forever.
        let limit = component
            .grants
            .limits
            .cpu_time
            .saturating_mul(WALL_CLOCK_FACTOR);
        let ticks = store.data().ticks();
        let call = instance
            .agenthost_host_component()
            .call_invoke_activity(&mut store, name, arguments);
        let call = self.gated(component, ticks, call);
        let timed = tokio::time::timeout(limit, call).await;
        // Held back first: a call whose request was held back and that then
        // ran out of time or trapped did not fail on its own account.
        if let Some(why) = held_back.and_then(|flag| flag.get()) {
            return Err(GuestError::HeldBack {
                component: component.name.clone(),
                why,
            });
        }
        let result = timed
            .map_err(|_| GuestError::WallClock {
                component: component.name.clone(),
                limit,
            })?
            .map_err(|e| {
                GuestError::from_call(&component.name, &e, store.data().hit_memory_limit())
            })?;
        Ok(result.map_err(|e| match e {
            bindings::ActivityError::NotFound(m) => ActivityFailure::NotFound(m),
            bindings::ActivityError::InvalidArguments(m) => ActivityFailure::InvalidArguments(m),
            bindings::ActivityError::Failed(m) => ActivityFailure::Failed(m),
        }))
    }

    /// Waits for a slot of the component (its share: the `max_instances`
    /// grant, else [`default_share`]), then for one of the host's pooling
    /// slots.
    async fn slot(&self, component: &LoadedComponent) -> Result<Slot<'_>, GuestError> {
        let closed = |_| GuestError::Instantiate {
            component: component.name.clone(),
            reason: "the runtime is shutting down".into(),
        };
        let own = component
            .instances
            .clone()
            .acquire_owned()
            .await
            .map_err(closed)?;
        let host = self
            .slots
            .acquire_many(component.slots_per_instance)
            .await
            .map_err(closed)?;
        Ok(Slot {
            _component: own,
            _host: host,
        })
    }

    /// `call`, a call into `component`'s guest code, run with its share of
    /// the runners ([`cpu_share`]).
    fn gated<F: std::future::Future>(
        &self,
        component: &LoadedComponent,
        ticks: std::sync::Arc<std::sync::atomic::AtomicU64>,
        call: F,
    ) -> cpu_share::Gated<F> {
        self.cpu
            .run(&component.name, component.grants.cpu_weight, ticks, call)
    }

    async fn instantiate(
        &self,
        component: &LoadedComponent,
    ) -> Result<(Store<GuestState>, AgenthostComponent), GuestError> {
        let store = host::new_store(&self.engine, &component.name, &component.grants);
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
            .map_err(|e| instantiate_failed(component, &e))?;
        Ok((store, instance))
    }
}

/// Runners when the operator sets none: the async runtime's worker threads
/// (outside one, as in a command that loads a file, the cores). Calls that
/// compute hold all but one of them ([`cpu_share`]).
pub(crate) fn default_runners() -> usize {
    tokio::runtime::Handle::try_current()
        .map(|handle| handle.metrics().num_workers())
        .unwrap_or_else(|_| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1)
}

/// The slots a component may hold at once without a `max_instances` grant:
/// half of the host's (`--max-instances`), so that one component's sleeping
/// activities (no CPU: the CPU budget never stops them) cannot take every
/// slot and queue every other component's work behind them.
pub(crate) fn default_share(max_instances: u32) -> u32 {
    (max_instances / 2).max(1)
}

fn instantiate_failed(component: &LoadedComponent, error: &wasmtime::Error) -> GuestError {
    GuestError::Instantiate {
        component: component.name.clone(),
        reason: error::describe(error),
    }
}

/// Held while a guest instance is alive: its component's permit (of its
/// share) and a host pooling slot.
struct Slot<'a> {
    _component: tokio::sync::OwnedSemaphorePermit,
    _host: tokio::sync::SemaphorePermit<'a>,
}
