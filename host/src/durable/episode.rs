//! One episode of an instance: sort its inbox, replay its code against the
//! journal and the new events, ask the core what that means, commit it.

use super::Orchestrator;
use crate::core::effects::Effect;
use crate::core::instance::RuntimeStatus;
use crate::core::journal::Entry;
use crate::core::lifecycle::arrivals;
use crate::core::lifecycle::episode_end::{self, Ending, Episode};
use crate::core::replay::Replay;
use crate::registry::VersionError;
use crate::runtime::{EpisodeEnd, LoadedComponent};
use crate::store::{now_ms, Applied, StoreError, Target};

/// Runs an episode if the instance has work; returns what to dispatch.
pub async fn run(orchestrator: &Orchestrator, id: &str) -> Result<Applied, StoreError> {
    let store = &orchestrator.store;
    let Some(instance) = store.load(id).await? else {
        return Ok(Applied::default());
    };
    let state = &instance.state;
    if !state.status.is_active() {
        return Ok(Applied::default());
    }
    let target = Target {
        id: id.to_string(),
        execution: state.execution,
        name: instance.name.clone(),
        digest: instance.digest.clone(),
    };
    let now = now_ms();
    let sorted = arrivals::decide(state, store.visible_inbox(id, now).await?);
    if !sorted.stale.is_empty() {
        tracing::info!(instance_id = %id, execution = state.execution, dropped = sorted.stale.len(), "dropped results addressed to an older execution");
    }
    let mut consumed: Vec<i64> = sorted.taken.iter().map(|(row, _)| *row).collect();
    consumed.extend(&sorted.stale);
    if sorted.taken.is_empty() && state.status == RuntimeStatus::Running {
        if !consumed.is_empty() {
            store
                .commit_episode(target, vec![Effect::ConsumeInbox(consumed)])
                .await?;
        }
        return Ok(Applied::default());
    }
    let mut calls = Vec::new();
    let mut events = Vec::new();
    for (entry, at) in store.journal(id).await? {
        match entry {
            Entry::Call(call) => calls.push((call, at)),
            Entry::Event(event) => events.push(event),
        }
    }
    let new_events: Vec<_> = sorted.taken.into_iter().map(|(_, e)| e).collect();
    events.extend(new_events.iter().cloned());
    let replay = Replay::new(calls, events, now, instance.created_at);
    let first_task = replay.first_new_task();

    // The instance replays on the version it started with, whatever is served now.
    let (ending, replay, component) = match orchestrator
        .registry
        .pinned(&instance.digest, &instance.name)
        .await
    {
        // Nothing is lost by waiting: the inbox stays, and the scheduler
        // offers the instance again on its next pass.
        Err(VersionError::Store(e)) => return Err(e),
        Err(e) if e.is_transient() => {
            tracing::error!(instance_id = %id, error = %e, "cannot run the instance's component version now; retrying");
            return Ok(Applied::default());
        }
        Err(e) => (Ending::Broken(e.to_string()), None, None),
        Ok(component) => {
            let (ending, replay) = run_code(
                orchestrator,
                &component,
                &instance.name,
                &instance.input,
                id,
                replay,
            )
            .await;
            (ending, replay, Some(component))
        }
    };
    let (calls, untaken) = match replay {
        Some(replay) => {
            let untaken = replay.untaken_events();
            (replay.into_new_calls(), untaken)
        }
        None => (Vec::new(), Vec::new()),
    };
    let child_digests = orchestrator.child_digests(component.as_deref(), &calls);
    // A fresh execution has no journal to replay: it may run the newest code.
    let continue_on = orchestrator
        .registry
        .orchestration(&instance.name)
        .map(|served| served.component.digest.clone());
    let episode = Episode {
        consumed,
        events: new_events,
        calls,
        first_task,
        ending,
        untaken,
        digest: instance.digest.clone(),
        child_digests,
        continue_on,
    };
    let effects = episode_end::decide(state, episode, &orchestrator.config.limits);
    if let Some(reason) = failure(&effects) {
        tracing::warn!(instance_id = %id, orchestration = %instance.name, reason, "instance failed");
    }
    Ok(store
        .commit_episode(target, effects)
        .await?
        .unwrap_or_default())
}

/// Runs the guest under the episode's wall-clock limit. The CPU limit stops
/// a busy loop; this stops code that blocks (a sleep, a long poll), which
/// would otherwise hold an episode permit forever.
async fn run_code(
    orchestrator: &Orchestrator,
    component: &LoadedComponent,
    name: &str,
    input: &str,
    id: &str,
    replay: Replay,
) -> (Ending, Option<Replay>) {
    let limit = orchestrator.config.episode_timeout;
    let run = orchestrator
        .runtime
        .run_orchestration(component, name, input, id, replay);
    match tokio::time::timeout(limit, run).await {
        Err(_) => (
            Ending::Broken(format!(
                "the orchestration code ran for more than {limit:?} in one episode: orchestration code must not block \
                 (std::thread::sleep, waiting on I/O); wait with a durable timer or an activity instead"
            )),
            None,
        ),
        Ok(Err(guest)) => (Ending::Broken(guest.to_string()), None),
        Ok(Ok((end, replay))) => {
            let ending = match end {
                EpisodeEnd::Waiting => Ending::Waiting,
                EpisodeEnd::Broken(reason) => Ending::Broken(reason),
                EpisodeEnd::Returned(returned) => match (&returned, replay.check_complete()) {
                    (Ok(_), Err(e)) => Ending::Broken(e.to_string()),
                    _ => Ending::Returned(returned),
                },
            };
            (ending, Some(replay))
        }
    }
}

/// The reason, when the effects fail the instance.
fn failure(effects: &[Effect]) -> Option<&str> {
    effects.iter().find_map(|e| match e {
        Effect::SetStatus {
            status: RuntimeStatus::Failed,
            output,
            ..
        } => output.as_deref(),
        _ => None,
    })
}
