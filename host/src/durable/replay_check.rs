//! Replay checks: a new version of an orchestration component, replayed
//! against the journal of every unfinished instance of its older versions,
//! before any of them meets it.
//!
//! Instances stay pinned to the version they started on (that is always
//! safe); the check says which of them the new code would carry on exactly
//! as the old did ([`crate::core::replay_check`]), and under
//! [`OnNewVersion::UpgradeCompatible`] moves those to it from their next
//! episode. The replay runs the new code in the sandbox with nothing but
//! the journal: every durable call is answered from it or recorded in
//! memory, so no activity, agent call, timer or event is issued and nothing
//! is written, whatever the code asks. The one write is the move itself, an
//! episode write under the fence of the journal the check read
//! ([`Effect::Upgrade`]): an instance that took a step meanwhile is left
//! where it is, and checked again by the next check.
//!
//! A check runs when a component with orchestrations begins to serve
//! (dropped in, replaced, or found at start beside instances of another
//! version), one at a time per hub, within a time budget; the last report
//! of each component is kept in memory for `/api/components` and the
//! dashboard. `agenthost check-replay` runs the same check from a shell
//! against a store, read-only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::{self, FuturesUnordered, StreamExt};
use serde::{Deserialize, Serialize};

use super::Orchestrator;
use crate::core::effects::Effect;
use crate::core::replay::{split_journal, Divergence, Replay};
use crate::core::replay_check::{judge, Verdict};
use crate::store::{now_ms, CheckReads, Checkable, Target};
use crate::wasm::{LoadedComponent, Runtime};

/// What the host does with the instances a check finds compatible.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum OnNewVersion {
    /// Report only: every instance stays on the version it started with.
    #[default]
    Report,
    /// Move each compatible instance to the new version from its next
    /// episode; divergent ones stay pinned.
    UpgradeCompatible,
}

/// How much one check may do.
#[derive(Debug, Clone)]
pub struct CheckLimits {
    /// Wall-clock time for the whole check: instances past it are counted
    /// unchecked (a sample, oldest ids first).
    pub budget: Duration,
    /// Most instances one check lists.
    pub max_instances: usize,
    /// Longest one instance's replay may run (the episode's limit).
    pub replay_timeout: Duration,
}

/// Instances whose journal is read ahead of the one replayed.
const READ_AHEAD: usize = 8;

/// Moves of compatible instances being committed at once.
const MOVES_AT_ONCE: usize = 64;

/// The most divergences a report lists (the tally counts them all).
const LISTED_DIVERGENCES: usize = 1_000;

/// One instance the new code does not carry on as the old did.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DivergentInstance {
    pub instance_id: String,
    pub orchestration: String,
    /// The version it runs (and stays on).
    pub digest: String,
    /// The first step (0-based) where the new code departs from the journal.
    pub step: usize,
    /// What the journal holds at that step; `null`: the journal had ended.
    pub journal: Option<String>,
    /// What the new code did there instead.
    pub new_code: String,
}

/// The outcome of one check of one new version.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    pub component: String,
    /// The new version.
    pub digest: String,
    pub policy: OnNewVersion,
    /// Unix ms.
    pub started_at: i64,
    /// Unix ms; `null` while it runs.
    pub finished_at: Option<i64>,
    /// Unfinished instances of older versions found.
    pub instances: usize,
    pub compatible: usize,
    pub divergent: usize,
    /// Compatible instances moved to the new version.
    pub upgraded: usize,
    /// Found but not judged: the budget ran out, or the instance could not
    /// be read or replayed (the log says why).
    pub unchecked: usize,
    /// Found, then finished (or moved to this version by another host)
    /// before it was judged: nothing to judge.
    pub ended: usize,
    /// Compatible, but it took a step on its old version while it was read
    /// or before it could be moved: it stays there until a later check.
    pub moved_on: usize,
    /// Median and slowest replay of one instance (ms).
    pub replay_p50_ms: f64,
    pub replay_max_ms: f64,
    /// The first divergences, by instance id.
    pub divergences: Vec<DivergentInstance>,
    /// Why the check could not finish, if it could not.
    pub error: Option<String>,
}

impl CheckReport {
    fn new(component: &LoadedComponent, policy: OnNewVersion) -> Self {
        Self {
            component: component.name.clone(),
            digest: component.digest.clone(),
            policy,
            started_at: now_ms(),
            finished_at: None,
            instances: 0,
            compatible: 0,
            divergent: 0,
            upgraded: 0,
            unchecked: 0,
            ended: 0,
            moved_on: 0,
            replay_p50_ms: 0.0,
            replay_max_ms: 0.0,
            divergences: Vec::new(),
            error: None,
        }
    }

    fn count(&mut self, moved: Moved) {
        match moved {
            Moved::Yes => {
                self.upgraded += 1;
                crate::metrics::replay_checked("upgraded");
            }
            Moved::SteppedMeanwhile => self.moved_on += 1,
            Moved::No => {}
        }
    }

    /// Whether every instance found was judged and none diverged.
    pub fn all_compatible(&self) -> bool {
        self.error.is_none() && self.divergent == 0 && self.unchecked == 0
    }
}

/// Whether a compatible instance was moved.
pub enum Moved {
    Yes,
    /// It took a step meanwhile, or another host runs it.
    SteppedMeanwhile,
    /// Not asked to (report only).
    No,
}

/// Replays `component` against the unfinished instances of its other
/// versions that `reads` lists; `on_compatible` is given each compatible
/// one and says whether it moved it. `policy` is only reported.
pub async fn check_version<F, Fut>(
    runtime: &Runtime,
    reads: &CheckReads<'_>,
    component: &Arc<LoadedComponent>,
    limits: &CheckLimits,
    policy: OnNewVersion,
    mut on_compatible: F,
) -> CheckReport
where
    F: FnMut(Checkable) -> Fut,
    Fut: std::future::Future<Output = Moved>,
{
    let mut report = CheckReport::new(component, policy);
    let began = Instant::now();
    let ids = match reads
        .instances_on_other_versions(&component.name, &component.digest, limits.max_instances)
        .await
    {
        Ok(ids) => ids,
        Err(e) => {
            report.error = Some(format!("could not list the instances to check: {e}"));
            report.finished_at = Some(now_ms());
            return report;
        }
    };
    report.instances = ids.len();
    let mut took = Vec::with_capacity(ids.len());
    // Journals are read a few ahead of the replay, and moves commit while
    // the next instances replay (each a write of its own, which the
    // store's group commit batches): the replay is the only part in turn.
    let mut journals = stream::iter(ids)
        .map(|id| async move { (reads.checkable(&id).await, id) })
        .buffered(READ_AHEAD);
    let mut moves = FuturesUnordered::new();
    while let Some((read, id)) = journals.next().await {
        if began.elapsed() >= limits.budget {
            report.unchecked += 1;
            continue;
        }
        let instance = match read {
            Ok(Some(instance)) if instance.digest != component.digest => instance,
            Ok(_) => {
                report.ended += 1;
                continue;
            }
            Err(e) => {
                tracing::warn!(instance_id = %id, error = %e, "replay check: could not read the instance");
                report.unchecked += 1;
                continue;
            }
        };
        let started = Instant::now();
        // The budget bounds the replay under way too.
        let left = limits.budget.saturating_sub(began.elapsed());
        let verdict = replay(
            runtime,
            component,
            &instance,
            limits.replay_timeout.min(left),
        )
        .await;
        took.push(started.elapsed().as_secs_f64() * 1000.0);
        match verdict {
            Err(why) => {
                tracing::warn!(instance_id = %id, %why, "replay check: could not replay the instance");
                report.unchecked += 1;
            }
            Ok(Verdict::Compatible) => {
                report.compatible += 1;
                crate::metrics::replay_checked("compatible");
                moves.push(on_compatible(instance));
                while moves.len() >= MOVES_AT_ONCE {
                    if let Some(moved) = moves.next().await {
                        report.count(moved);
                    }
                }
            }
            Ok(Verdict::Divergent(divergence)) => {
                report.divergent += 1;
                crate::metrics::replay_checked("divergent");
                if report.divergences.len() < LISTED_DIVERGENCES {
                    report.divergences.push(divergent(instance, divergence));
                }
            }
        }
    }
    while let Some(moved) = moves.next().await {
        report.count(moved);
    }
    took.sort_by(f64::total_cmp);
    report.replay_p50_ms = took.get(took.len() / 2).copied().unwrap_or(0.0);
    report.replay_max_ms = took.last().copied().unwrap_or(0.0);
    report.finished_at = Some(now_ms());
    report
}

fn divergent(instance: Checkable, divergence: Divergence) -> DivergentInstance {
    DivergentInstance {
        instance_id: instance.id,
        orchestration: instance.name,
        digest: instance.digest,
        step: divergence.step,
        journal: divergence.journal,
        new_code: divergence.code,
    }
}

/// The new code's run over one instance's journal, judged. `Err`: the host
/// could not run it (no slot in time), which says nothing of the code.
async fn replay(
    runtime: &Runtime,
    component: &LoadedComponent,
    instance: &Checkable,
    timeout: Duration,
) -> Result<Verdict, String> {
    let (calls, events) = split_journal(&instance.journal);
    let replay = Replay::new(calls, events, now_ms(), instance.created_at);
    if component.manifest.orchestration(&instance.name).is_none() {
        return Ok(Verdict::Divergent(Divergence {
            step: 0,
            journal: replay.journaled(0),
            code: format!(
                "has no orchestration '{}' (the new version does not serve it)",
                instance.name
            ),
        }));
    }
    let slot = runtime
        .orchestration_slot(component, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let ran = slot
        .check_orchestration(
            component,
            &instance.name,
            &instance.input,
            &instance.id,
            replay,
        )
        .await;
    Ok(match ran {
        Ok((ending, replay)) => judge(&ending, &replay),
        // The replay went with the trapped store: where the code was is
        // unknown; what it did is the reason.
        Err(e) => Verdict::Divergent(Divergence {
            step: 0,
            journal: None,
            code: format!("fails: {e}"),
        }),
    })
}

/// The last report of each component (this hub's), and the setting.
pub(super) struct ReplayChecks {
    pub policy: OnNewVersion,
    pub limits: CheckLimits,
    reports: Mutex<HashMap<String, CheckReport>>,
    /// One check at a time: a second version dropped while one runs waits.
    running: tokio::sync::Mutex<()>,
}

impl ReplayChecks {
    pub fn new(policy: OnNewVersion, limits: CheckLimits) -> Self {
        Self {
            policy,
            limits,
            reports: Mutex::default(),
            running: tokio::sync::Mutex::default(),
        }
    }

    fn reports(&self) -> std::sync::MutexGuard<'_, HashMap<String, CheckReport>> {
        self.reports.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Orchestrator {
    /// The last replay check of component `name` on this host, if one ran.
    pub fn replay_check(&self, name: &str) -> Option<CheckReport> {
        self.replay_checks.reports().get(name).cloned()
    }

    /// Checks each component with orchestrations served now, then each one
    /// that begins to serve, until shutdown.
    pub(super) fn check_new_versions(self: &Arc<Self>) {
        let mut began = self.registry.began_serving();
        let this = self.clone();
        self.tracker.spawn(async move {
            for component in this.registry.components() {
                if !component.manifest.orchestrations.is_empty() {
                    this.check_one(component).await;
                }
            }
            loop {
                let component = tokio::select! {
                    next = began.recv() => next,
                    () = this.stopping.cancelled() => return,
                };
                match component {
                    Ok(component) => this.check_one(component).await,
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        for component in this.registry.components() {
                            if !component.manifest.orchestrations.is_empty() {
                                this.check_one(component).await;
                            }
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }

    async fn check_one(self: &Arc<Self>, component: Arc<LoadedComponent>) {
        let checks = &self.replay_checks;
        let _one = checks.running.lock().await;
        let policy = checks.policy;
        // Seen as under way (no `finishedAt`) until it ends.
        checks
            .reports()
            .insert(component.name.clone(), CheckReport::new(&component, policy));
        let reads = self.store.check_reads();
        let report = tokio::select! {
            report = check_version(&self.runtime, &reads, &component, &checks.limits, policy, |instance| {
                let this = self.clone();
                let component = component.clone();
                async move {
                    match policy {
                        OnNewVersion::Report => Moved::No,
                        OnNewVersion::UpgradeCompatible => this.upgrade(instance, &component).await,
                    }
                }
            }) => report,
            () = self.stopping.cancelled() => return,
        };
        if report.instances > 0 {
            tracing::info!(
                component = %report.component,
                digest = %report.digest,
                instances = report.instances,
                compatible = report.compatible,
                divergent = report.divergent,
                upgraded = report.upgraded,
                moved_on = report.moved_on,
                unchecked = report.unchecked,
                ended = report.ended,
                first_divergence = ?report.divergences.first(),
                "replay check of a new version"
            );
        }
        checks.reports().insert(component.name.clone(), report);
    }

    /// Moves `instance` to `component`, if that still serves its
    /// orchestration and the instance is still as the check read it.
    async fn upgrade(self: &Arc<Self>, instance: Checkable, component: &LoadedComponent) -> Moved {
        let served = self.registry.orchestration(&instance.name);
        if served.is_none_or(|s| s.component.digest != component.digest) {
            // A newer version came meanwhile: its own check decides.
            return Moved::SteppedMeanwhile;
        }
        let Some(fence) = instance.fence else {
            return Moved::SteppedMeanwhile;
        };
        let id = instance.id.clone();
        let target = Target {
            id: id.clone(),
            execution: instance.execution,
            name: instance.name,
            digest: instance.digest,
        };
        let upgrade = Effect::Upgrade {
            digest: component.digest.clone(),
            activity_set: self.registry.current_activity_set(&component.name),
        };
        // Its next episode reads it anew, on the new version; one under way
        // finds its fence broken and runs again.
        self.hot.forget(&id);
        let written = self
            .store
            .commit_episode(target, fence, vec![upgrade])
            .await;
        self.hot.forget(&id);
        match written {
            Ok(Some(applied)) => {
                tracing::debug!(instance_id = %id, digest = %component.digest, "instance moved to the new version its replay check found compatible");
                self.dispatch(applied);
                Moved::Yes
            }
            Ok(None) => Moved::SteppedMeanwhile,
            Err(e) => {
                tracing::warn!(instance_id = %id, error = %e, "could not move the instance to the new version; it stays where it is");
                Moved::SteppedMeanwhile
            }
        }
    }
}
