//! The background sweeps of a working host: idle sessions, and finished
//! work past its retention.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::agents::AgentsSettings;
use crate::registry::Registry;
use crate::store::{now_ms, Store};

/// Sweeps idle sessions: each agent with its own expiry (the operator's
/// agent settings, else its component's), the others with the host's. The
/// check at enqueue time makes expiry exact; this reclaims space and keeps a
/// forgotten conversation from being read back.
pub(super) async fn expire_sessions(
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
                let expiring = store.expire_sessions(now - ms(*ttl), Some(agent), &of_agent);
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
                    store.expire_sessions(now - ms(ttl), None, &other),
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
pub(super) async fn retain_finished(store: Store, retain: Duration, stop: CancellationToken) {
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

/// How often the gauges of a hub other than the host's own are read: the
/// host's own are read at each scrape of `/metrics`.
const GAUGES_EVERY: Duration = Duration::from_secs(15);

/// Keeps the gauges of a hub other than the host's own current.
pub(super) async fn refresh_gauges(
    orchestrator: std::sync::Arc<crate::durable::Orchestrator>,
    runs: std::sync::Arc<crate::runs::Runs>,
    hub: String,
    stop: CancellationToken,
) {
    let mut every = tokio::time::interval(GAUGES_EVERY);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = every.tick() => {}
        }
        if let Err(e) = orchestrator.refresh_gauges().await {
            tracing::debug!(taskhub = %hub, error = %e, "could not count waiting instances");
        }
        match runs.pending_approvals_count().await {
            Ok(count) => crate::metrics::approvals_pending(&hub, count),
            Err(e) => {
                tracing::debug!(taskhub = %hub, error = %e, "could not count pending approvals")
            }
        }
    }
}
