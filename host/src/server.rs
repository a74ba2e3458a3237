//! Wires the pieces together for `agenthost serve` and runs until a signal.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use std::future::IntoFuture;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::agents::AgentRunner;
use crate::cli::ServeArgs;
use crate::durable::{Orchestrator, OrchestratorConfig};
use crate::http::{self, AppState, HttpConfig};
use crate::model::{ModelClient, ModelSettings};
use crate::registry::Registry;
use crate::runs::Runs;
use crate::runtime::{Limits, Runtime, RuntimeConfig};
use crate::store::{now_ms, Store, TaskHub};

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let settings = ModelSettings::from_env().context("invalid model configuration")?;
    let model = ModelClient::new(settings, args.model_timeout)
        .context("could not create the model client")?;
    if model.is_offline() {
        tracing::warn!("no model endpoint configured (set OPENAI_BASE_URL/OPENAI_API_KEY/OPENAI_MODEL or AZURE_OPENAI_ENDPOINT/AZURE_OPENAI_DEPLOYMENT_NAME); answering with the built-in offline model");
    } else {
        tracing::info!(model = %model.describe(), "model configured");
    }

    let store = open_store(&args).await?;

    let runtime = Arc::new(
        Runtime::new(RuntimeConfig {
            cache_dir: args.cache_dir.clone(),
            limits: Limits {
                memory_bytes: args.guest_memory_mb << 20,
                cpu_time: args.guest_cpu_time,
            },
            max_instances: args.max_instances,
            describe_timeout: args.describe_timeout,
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

    let runner = AgentRunner::new(runtime.clone(), model, store.clone(), args.max_tool_rounds);
    let runs = Runs::new(store.clone(), registry.clone(), runner, args.session_ttl);
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
    );
    orchestrator.start();
    let resumed = runs
        .resume_unfinished()
        .await
        .context("could not read unfinished runs")?;
    if resumed > 0 {
        tracing::info!(
            sessions = resumed,
            "resuming runs left unfinished by a previous process"
        );
    }
    if let Some(ttl) = args.session_ttl {
        tokio::spawn(expire_sessions(store.clone(), ttl));
    }

    let state = AppState {
        registry,
        runs: runs.clone(),
        orchestrator: orchestrator.clone(),
        store: store.clone(),
        config: Arc::new(HttpConfig {
            health_enabled: args.enable_health_check,
            max_body_bytes: args.max_body_bytes,
            wait_budget: args.poll_interval.saturating_mul(args.max_poll_retries),
        }),
    };
    let shutdown = install_shutdown_signal()?;
    let listener = TcpListener::bind((args.host, args.port))
        .await
        .with_context(|| {
            format!(
                "could not listen on {}:{} (is another process using the port?)",
                args.host, args.port
            )
        })?;
    let address = listener.local_addr()?;
    tracing::info!(%address, "listening");
    // Machine-readable line on stdout; tests and scripts wait for it.
    println!("agenthost listening on http://{address}");

    let stop = CancellationToken::new();
    let server = axum::serve(listener, http::router(state))
        .with_graceful_shutdown(stop.clone().cancelled_owned());
    let mut server = tokio::spawn(server.into_future());
    tokio::select! {
        () = shutdown => {}
        result = &mut server => {
            // The server stopped on its own: that is a failure, not a shutdown.
            result.context("the HTTP server task failed")?.context("the HTTP server failed")?;
        }
    }
    // Stop accepting, then give in-flight runs (and the callers waiting on
    // them) one grace period in all; whatever is unfinished then stays in the
    // store and resumes at the next start.
    tracing::info!(grace = ?args.shutdown_grace, "stopping: no new requests; letting in-flight runs finish");
    stop.cancel();
    watching.cancel();
    let deadline = tokio::time::Instant::now() + args.shutdown_grace;
    tokio::join!(
        runs.shutdown(args.shutdown_grace),
        orchestrator.shutdown(args.shutdown_grace)
    );
    if tokio::time::timeout_at(deadline, server).await.is_err() {
        tracing::warn!("closing connections still open after the grace period");
    }
    let (writes, transactions) = store.commit_stats();
    tracing::info!(
        writes,
        transactions,
        "durable writes committed (group commit)"
    );
    store.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// Opens the task hub the flags name, with the remedy in the error.
async fn open_store(args: &ServeArgs) -> anyhow::Result<Store> {
    let (url, hub) = args.store_location();
    let hub = TaskHub::new(&hub)?;
    match Store::open(&url, &hub).await {
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

/// `agenthost inspect FILE`: loads one component with default limits (a
/// throw-away artifact cache) and prints its description.
pub async fn inspect(file: &std::path::Path) -> anyhow::Result<()> {
    let cache = std::env::temp_dir().join(format!("agenthost-inspect-{}", std::process::id()));
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: cache.clone(),
        limits: Limits::default(),
        max_instances: 4,
        describe_timeout: Duration::from_secs(30),
    })
    .context("could not start the wasm runtime")?;
    let loaded = runtime.load(file).await;
    let _ = std::fs::remove_dir_all(&cache);
    let component = loaded.with_context(|| format!("{} does not load", file.display()))?;
    println!(
        "{}",
        serde_json::to_string_pretty(&component.describe_json())?
    );
    Ok(())
}

/// Installs the SIGTERM and Ctrl-C handlers now (before the host says it is
/// listening: a signal arriving earlier would otherwise kill the process
/// without a graceful stop) and returns a future that resolves on either.
fn install_shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for Ctrl-C")?;
        Ok(async move {
            tokio::select! {
                _ = terminate.recv() => {},
                _ = interrupt.recv() => {},
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}

/// Sweeps idle sessions; the check at enqueue time makes expiry exact, this
/// only reclaims space.
async fn expire_sessions(store: Store, ttl: Duration) {
    let period = (ttl / 2).clamp(Duration::from_millis(200), Duration::from_secs(60));
    let mut ticker = tokio::time::interval(period);
    loop {
        ticker.tick().await;
        let cutoff = now_ms() - i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
        match store.expire_sessions(cutoff).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(sessions = n, "expired idle sessions"),
            Err(e) => tracing::warn!(error = %e, "could not expire idle sessions"),
        }
    }
}
