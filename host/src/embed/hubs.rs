//! The task hubs one host serves. Each hub has services of its own (store,
//! registry, agent runs, durable engine, streams, sweeps: a [`HubStack`]);
//! what costs a process once (the wasm runtime, the model client, the keys,
//! the agents' settings) is [`Shared`] by all. The host's own hub and those
//! listed at start (`--taskhubs`) are opened before it serves; with
//! `--dynamic-task-hubs`, any other a caller names is opened on first use,
//! once however many callers race for it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use super::{sweeps, StartError};
use crate::agents::{AgentRunner, AgentsSettings, ModelWindow};
use crate::durable::{Orchestrator, OrchestratorConfig};
use crate::http::hubs::{HubDirectory, HubRefused, Opening};
use crate::http::{ApiKeys, AppParts, AppState, HttpConfig};
use crate::model::ModelClient;
use crate::registry::Registry;
use crate::runs::Runs;
use crate::sdk_workers::Patience;
use crate::store::{Kind, Membership, Store, TaskHub};
use crate::streams::{ResponseStreams, StreamSettings};
use crate::wasm::Runtime;

/// What every hub of the process uses.
pub(super) struct Shared {
    pub(super) args: crate::settings::Settings,
    pub(super) runtime: Arc<Runtime>,
    pub(super) model: Arc<ModelClient>,
    pub(super) keys: ApiKeys,
    pub(super) agents: Arc<AgentsSettings>,
}

/// One task hub's services.
pub(super) struct HubStack {
    pub(super) state: AppState,
    runs: Arc<Runs>,
    orchestrator: Arc<Orchestrator>,
    store: Store,
    watching: CancellationToken,
    background: CancellationToken,
}

impl HubStack {
    /// Opens `hub`'s store, loads the components into it and starts its
    /// work. `primary`: the host's own hub, the one the URLs handed out
    /// name by no `taskHub=`.
    pub(super) async fn open(
        shared: &Shared,
        hub: &TaskHub,
        primary: bool,
    ) -> Result<Self, StartError> {
        let args = &shared.args;
        let role = args.role();
        let store = open_store(args, hub).await?;
        if !role.works() && store.kind() == Kind::Sqlite {
            store.close().await;
            return Err(StartError::FrontNeedsSharedHub);
        }
        let registry = Arc::new(Registry::new(
            shared.runtime.clone(),
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
        if loaded.loaded.is_empty() && primary {
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
        let runner = AgentRunner::new(
            shared.runtime.clone(),
            shared.model.clone(),
            store.clone(),
            args.max_tool_rounds,
            ModelWindow {
                history_budget_tokens: args.history_budget_tokens,
                max_tool_result_bytes: args.max_tool_result_bytes,
            },
            args.approval_timeout,
            shared.agents.clone(),
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
            shared.agents.clone(),
            role.works(),
        );
        let orchestrator = Orchestrator::new(
            store.clone(),
            registry.clone(),
            shared.runtime.clone(),
            runs.clone(),
            OrchestratorConfig {
                limits: Arc::new(args.durable_limits()),
                episode_timeout: args.episode_timeout,
                hot_budget_bytes: args.hot_instances_mib.saturating_mul(1 << 20),
                on_new_version: args.on_new_version,
                replay_check: crate::durable::CheckLimits {
                    budget: args.replay_check_budget,
                    max_instances: args.replay_check_max_instances,
                    replay_timeout: args.episode_timeout,
                },
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
                shared.agents.clone(),
                args.session_ttl,
                background.clone(),
            ));
        }
        if !primary {
            tokio::spawn(sweeps::refresh_gauges(
                orchestrator.clone(),
                runs.clone(),
                hub.to_string(),
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
        let state = AppState::new(AppParts {
            registry,
            runs: runs.clone(),
            orchestrator: orchestrator.clone(),
            health: crate::health::Health::new(
                store.clone(),
                args.writer_deadline,
                orchestrator.scheduler_reads(),
            ),
            streams,
            config: Arc::new(HttpConfig {
                health_enabled: args.enable_health_check,
                mcp_enabled: args.mcp,
                max_body_bytes: args.max_body_bytes,
                body_timeout: args.body_timeout,
                wait_budget: args.poll_interval.saturating_mul(args.max_poll_retries),
                allowed: crate::http::Allowed {
                    hosts: args.allowed_hosts.clone(),
                    origins: args.allowed_origins.clone(),
                    keyless: shared.keys.is_empty(),
                },
                keys: shared.keys.clone(),
                hub: hub.to_string(),
                hub_in_urls: (!primary).then(|| hub.to_string()),
            }),
        });
        Ok(Self {
            state,
            runs,
            orchestrator,
            store,
            watching,
            background,
        })
    }

    /// Stops taking work; work under way has `grace` to finish.
    pub(super) async fn drain(&self, grace: Duration) {
        self.watching.cancel();
        self.background.cancel();
        tokio::join!(self.runs.shutdown(grace), self.orchestrator.shutdown(grace));
    }

    /// Commits what is queued and closes the store.
    pub(super) async fn close(&self) {
        let (writes, transactions) = self.store.commit_stats();
        tracing::info!(
            taskhub = %self.state.config.hub,
            writes,
            transactions,
            "durable writes committed (group commit)"
        );
        self.state.streams.flush().await;
        self.store.close().await;
    }
}

/// Opens the task hub `hub` of the settings' store, with the remedy in the
/// error.
async fn open_store(args: &crate::settings::Settings, hub: &TaskHub) -> Result<Store, StartError> {
    let (url, _) = args.store_location().map_err(StartError::setting)?;
    let membership = Membership {
        role: args.role(),
        lease: args.lease,
    };
    match Store::open(&url, hub, membership).await {
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

/// Every hub the process serves, by name.
pub(super) struct Hubs {
    shared: Shared,
    primary: String,
    /// Hubs served beside the primary one, opened at start.
    listed: HashSet<String>,
    dynamic: bool,
    /// One cell a hub: two callers naming a new hub at once open it once.
    open: Mutex<HashMap<String, Arc<OnceCell<Arc<HubStack>>>>>,
    /// Refused hubs already logged: a client retrying is not a log flood.
    refusals_logged: Mutex<HashSet<String>>,
    stopping: AtomicBool,
}

impl Hubs {
    /// Opens the host's own hub and those listed at start.
    pub(super) async fn open_at_start(shared: Shared) -> Result<Arc<Self>, StartError> {
        let (_, primary) = shared.args.store_location().map_err(StartError::setting)?;
        let primary = TaskHub::new(&primary).map_err(StartError::setting)?;
        let mut listed = HashSet::new();
        for name in &shared.args.taskhubs {
            let name = name.trim();
            if name.is_empty() || name == primary.to_string() {
                continue;
            }
            listed.insert(TaskHub::new(name).map_err(StartError::setting)?.to_string());
        }
        let hubs = Arc::new(Self {
            dynamic: shared.args.dynamic_task_hubs,
            shared,
            primary: primary.to_string(),
            listed,
            open: Mutex::new(HashMap::new()),
            refusals_logged: Mutex::new(HashSet::new()),
            stopping: AtomicBool::new(false),
        });
        hubs.opened(&primary, true).await?;
        let mut names: Vec<String> = hubs.listed.iter().cloned().collect();
        names.sort();
        for name in names {
            let hub = TaskHub::new(&name).map_err(StartError::setting)?;
            if let Err(e) = hubs.opened(&hub, false).await {
                // Work the hubs opened so far began stops before their stores close.
                hubs.shutdown(Duration::from_secs(5)).await;
                return Err(e);
            }
        }
        if hubs.dynamic {
            tracing::info!("dynamic task hubs on: a hub a caller names is created on first use");
        }
        Ok(hubs)
    }

    /// The hub's services, opened now if they are not yet.
    async fn opened(&self, hub: &TaskHub, primary: bool) -> Result<Arc<HubStack>, StartError> {
        let cell = self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(hub.to_string())
            .or_default()
            .clone();
        cell.get_or_try_init(|| async {
            let stack = HubStack::open(&self.shared, hub, primary).await?;
            if !primary {
                tracing::info!(taskhub = %hub, "task hub served");
            }
            Ok(Arc::new(stack))
        })
        .await
        .cloned()
    }

    /// The host's own hub.
    pub(super) fn primary_stack(&self) -> Option<Arc<HubStack>> {
        self.stack(&self.primary)
    }

    fn stack(&self, hub: &str) -> Option<Arc<HubStack>> {
        let cell = self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(hub)
            .cloned();
        cell.and_then(|cell| cell.get().cloned())
    }

    /// Every hub open now, the host's own first.
    pub(super) fn stacks(&self) -> Vec<Arc<HubStack>> {
        let cells: Vec<(String, Arc<OnceCell<Arc<HubStack>>>)> = self
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(name, cell)| (name.clone(), cell.clone()))
            .collect();
        let mut stacks: Vec<(bool, String, Arc<HubStack>)> = cells
            .into_iter()
            .filter_map(|(name, cell)| {
                let stack = cell.get()?.clone();
                Some((name != self.primary, name, stack))
            })
            .collect();
        stacks.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        stacks.into_iter().map(|(_, _, stack)| stack).collect()
    }

    /// No hub is opened from now on; every open one stops taking work.
    pub(super) async fn drain(&self, grace: Duration) {
        self.stopping.store(true, Ordering::SeqCst);
        let stacks = self.stacks();
        futures::future::join_all(stacks.iter().map(|stack| stack.drain(grace))).await;
    }

    /// Closes every open hub's store.
    pub(super) async fn close(&self) {
        for stack in self.stacks() {
            stack.close().await;
        }
    }

    async fn shutdown(&self, grace: Duration) {
        self.drain(grace).await;
        self.close().await;
    }

    /// Why a hub is not served, logged once a hub.
    fn refuse(&self, hub: &str, caller: &str) -> HubRefused {
        let mut served: Vec<String> = std::iter::once(self.primary.clone())
            .chain(self.listed.iter().cloned())
            .map(|name| format!("'{name}'"))
            .collect();
        served[1..].sort();
        let refused = HubRefused::NotServed {
            hub: hub.to_string(),
            served: format!("task hubs {}", served.join(", ")),
        };
        let first = self
            .refusals_logged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(hub.to_string());
        if first {
            tracing::warn!(taskhub = %hub, %caller, "a caller named a task hub this host does not serve: refused (list it with --taskhubs, or start the host with --dynamic-task-hubs; logged once a hub)");
        }
        refused
    }
}

impl HubDirectory for Hubs {
    fn primary(&self) -> &str {
        &self.primary
    }

    fn open<'a>(&'a self, hub: &'a str, caller: &'a str) -> Opening<'a> {
        Box::pin(async move {
            let name = TaskHub::new(hub).map_err(|e| HubRefused::InvalidName(e.to_string()))?;
            if let Some(stack) = self.stack(hub) {
                return Ok(stack.state.clone());
            }
            if !(self.dynamic || self.listed.contains(hub)) {
                return Err(self.refuse(hub, caller));
            }
            if self.stopping.load(Ordering::SeqCst) {
                return Err(HubRefused::Unavailable {
                    hub: hub.to_string(),
                    reason: "the host is stopping".to_string(),
                });
            }
            // A hub being opened by another caller now is joined, not counted
            // again.
            let (open, opening) = {
                let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
                (open.len(), open.contains_key(hub))
            };
            let max = self.shared.args.max_task_hubs;
            if open >= max && !opening && !self.listed.contains(hub) {
                tracing::warn!(taskhub = %hub, %caller, max, "a caller named a new task hub past --max-task-hubs: refused");
                return Err(HubRefused::Unavailable {
                    hub: hub.to_string(),
                    reason: format!(
                        "this host has {open} task hubs open, its limit (--max-task-hubs {max})"
                    ),
                });
            }
            match self.opened(&name, false).await {
                Ok(stack) => Ok(stack.state.clone()),
                Err(e) => {
                    // Not held against --max-task-hubs: a later call tries again.
                    let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
                    if open.get(hub).is_some_and(|cell| !cell.initialized()) {
                        open.remove(hub);
                    }
                    drop(open);
                    let reason = format!("{:#}", anyhow::Error::new(e));
                    tracing::error!(taskhub = %hub, %caller, error = %reason, "could not open a task hub a caller named");
                    Err(HubRefused::Unavailable {
                        hub: hub.to_string(),
                        reason,
                    })
                }
            }
        })
    }
}
