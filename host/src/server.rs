//! Wires the pieces together for `agenthost serve` and runs until a signal.

use std::time::Duration;

use anyhow::Context;
use std::future::IntoFuture;

use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::embed::AgentHost;
use crate::settings::Settings;
use crate::wasm::{Limits, NetworkPolicy, Runtime, RuntimeConfig};

pub(crate) async fn serve(args: Settings) -> anyhow::Result<()> {
    let grace = args.shutdown_grace;
    let (address, port) = (args.host, args.port);
    if args.api_keys.is_empty() && args.api_key_files.is_empty() && !address.is_loopback() {
        tracing::warn!(%address, "listening beyond this machine without endpoint keys: anyone who reaches the port can run agents, read conversations and manage instances (give --api-key SCOPE:KEY, or --require-keys to refuse to start like this)");
    }
    let grpc_port = args.grpc.then_some(args.grpc_port);
    let host = AgentHost::start(args).await?;
    let shutdown = install_shutdown_signal()?;
    let stop = CancellationToken::new();
    let mut grpc = match grpc_port {
        Some(port) => Some(serve_grpc(&host, address, port, stop.clone()).await?),
        None => None,
    };
    let listener = TcpListener::bind((address, port)).await.with_context(|| {
        format!("could not listen on {address}:{port} (is another process using the port?)")
    })?;
    let address = listener.local_addr()?;
    // Streamed answers are many small writes: without TCP_NODELAY each one
    // after the first waits for the client's delayed ACK (40 ms on Linux).
    let listener = listener.tap_io(|connection| {
        if let Err(e) = connection.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY on a connection");
        }
    });
    tracing::info!(%address, "listening");
    // Machine-readable line on stdout; tests and scripts wait for it.
    println!("agenthost listening on http://{address}");

    let server =
        axum::serve(listener, host.router()).with_graceful_shutdown(stop.clone().cancelled_owned());
    let mut server = tokio::spawn(server.into_future());
    tokio::select! {
        () = shutdown => {}
        reason = host.writer_gone() => {
            anyhow::bail!("stopping at once: {reason}");
        }
        result = &mut server => {
            // The server stopped on its own: that is a failure, not a shutdown.
            result.context("the HTTP server task failed")?.context("the HTTP server failed")?;
        }
        Some(result) = async { Some((grpc.as_mut()?).await) } => {
            result.context("the gRPC server task failed")?.context("the gRPC server failed")?;
            anyhow::bail!("the gRPC server stopped on its own");
        }
    }
    // Stop accepting, then give in-flight runs (and the callers waiting on
    // them) one grace period in all; whatever is unfinished then stays in the
    // store and resumes at the next start.
    tracing::info!(grace = ?grace, "stopping: no new requests; letting in-flight runs finish");
    stop.cancel();
    let deadline = tokio::time::Instant::now() + grace;
    host.drain(grace).await;
    if tokio::time::timeout_at(deadline, server).await.is_err() {
        tracing::warn!("closing connections still open after the grace period");
    }
    if let Some(mut grpc) = grpc {
        // Worker streams ended with the drain; a wait for an instance may
        // still be open: it is cut at the deadline.
        if tokio::time::timeout_at(deadline, &mut grpc).await.is_err() {
            tracing::warn!("closing gRPC calls still open after the grace period");
            grpc.abort();
        }
    }
    host.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// Listens on `port` for the Durable Task sidecar protocol and serves it
/// until `stop`; says where on stdout, before the HTTP line tests wait for.
async fn serve_grpc(
    host: &AgentHost,
    address: std::net::IpAddr,
    port: u16,
    stop: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<Result<(), tonic::transport::Error>>> {
    let listener = TcpListener::bind((address, port)).await.with_context(|| {
        format!("could not listen for gRPC on {address}:{port} (is another process using the port? --grpc-port picks another)")
    })?;
    let bound = listener.local_addr()?;
    tracing::info!(address = %bound, "gRPC (Durable Task sidecar protocol) listening");
    println!("agenthost gRPC listening on http://{bound}");
    // Keepalives: a worker whose machine is gone (no FIN ever comes) is
    // noticed, its stream ends, and what it ran runs again.
    let incoming = tonic::transport::server::TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(Duration::from_secs(60)));
    let routes = host.grpc_routes();
    Ok(tokio::spawn(async move {
        tonic::transport::Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(20)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .add_routes(routes)
            .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
            .await
    }))
}

/// `agenthost worker`: the work of a task hub (agent runs, episodes,
/// activities, timers) with no HTTP, until a signal; then a graceful stop
/// that hands this host's work back to the others.
pub(crate) async fn work(mut args: Settings) -> anyhow::Result<()> {
    args.worker_only = true;
    let grace = args.shutdown_grace;
    let (store, hub) = args.store_location()?;
    let host = AgentHost::start(args).await?;
    let shutdown = install_shutdown_signal()?;
    let (agents, orchestrations) = host.served();
    tracing::info!(taskhub = %hub, agents = ?agents, orchestrations = ?orchestrations, "worker serving");
    // Machine-readable line on stdout; tests and scripts wait for it.
    println!(
        "agenthost worker serving task hub {hub} of {}: agents [{}], orchestrations [{}]",
        crate::taskhub::redacted(&store),
        agents.join(", "),
        orchestrations.join(", ")
    );
    tokio::select! {
        () = shutdown => {}
        reason = host.writer_gone() => anyhow::bail!("stopping at once: {reason}"),
    }
    tracing::info!(grace = ?grace, "stopping: no new work; letting work under way finish");
    host.shutdown(grace).await;
    tracing::info!("stopped");
    Ok(())
}

/// A runtime for a command on component files (`build`, `compile`,
/// `inspect`, `tool call`): default limits, and the cache a `serve` of this
/// user reads by default (or `AGENTHOST_CACHE_DIR`, as `serve` reads it
/// too), so that what a command compiled a host loads without compiling.
pub(crate) fn local_runtime() -> anyhow::Result<Runtime> {
    let configured = std::env::var_os("AGENTHOST_CACHE_DIR")
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from);
    Runtime::new(RuntimeConfig {
        cache_dir: configured,
        load_precompiled: false,
        limits: Limits::default(),
        max_instances: 4,
        describe_timeout: Duration::from_secs(30),
        episode_cpu_time: Duration::from_secs(1),
        network: NetworkPolicy::default(),
        guest_runners: None,
    })
    .context("could not start the wasm runtime")
}

/// `agenthost inspect FILE`: loads one component and prints its description.
pub(crate) async fn inspect(file: &std::path::Path) -> anyhow::Result<()> {
    let runtime = local_runtime()?;
    let loaded = runtime.load(file).await;
    let component = loaded.with_context(|| format!("{} does not load", file.display()))?;
    println!(
        "{}",
        serde_json::to_string_pretty(&component.describe_json())?
    );
    Ok(())
}

/// `agenthost tool call FILE TOOL [ARGUMENTS]`: runs one tool of a component
/// as an agent's tool round would, and prints its result.
pub(crate) async fn call_tool(
    file: &std::path::Path,
    tool: &str,
    arguments: &str,
) -> anyhow::Result<()> {
    let parsed = serde_json::from_str::<serde_json::Value>(arguments);
    if !parsed.is_ok_and(|v| v.is_object()) {
        anyhow::bail!("the arguments must be a JSON object, not: {arguments}");
    }
    let runtime = local_runtime()?;
    let called = async {
        let component = runtime
            .load(file)
            .await
            .with_context(|| format!("{} does not load", file.display()))?;
        let found = component.manifest.activity(tool);
        if found.is_some_and(|a| a.approval == crate::wasm::Approval::AlwaysRequire) {
            // Called by a person at a terminal, the tool runs: that person
            // is the approval. Said, so nobody takes it for the host's rule.
            eprintln!(
                "note: '{tool}' needs a human's approval when an agent calls it; `tool call` runs it now, as you asked"
            );
        }
        if found.is_none() {
            let names: Vec<&str> = component
                .manifest
                .activities
                .iter()
                .map(|a| a.name.as_str())
                .collect();
            anyhow::bail!(
                "{} has no tool named '{tool}' (its tools: {})",
                file.display(),
                if names.is_empty() {
                    "none".to_string()
                } else {
                    names.join(", ")
                }
            );
        }
        runtime
            .invoke_activity(&component, tool, arguments, None)
            .await
            .with_context(|| format!("tool '{tool}' stopped the component"))
    }
    .await;
    match called? {
        Ok(result) => {
            println!("{result}");
            Ok(())
        }
        Err(failure) => anyhow::bail!("tool '{tool}' failed: {failure}"),
    }
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
