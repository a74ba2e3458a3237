//! One episode of an instance: sort its inbox, replay its code against the
//! journal and the new events, ask the core what that means, commit it.

use std::collections::HashSet;

use tracing::Instrument;

use super::hot::HotInstance;
use super::Orchestrator;
use crate::core::effects::Effect;
use crate::core::instance::RuntimeStatus;
use crate::core::lifecycle::arrivals::{self, Sorted};
use crate::core::lifecycle::episode_end::{Arrived, Ending, Episode};
use crate::core::lifecycle::{self, Command};
use crate::core::replay::{split_journal, Replay};
use crate::registry::VersionError;
use crate::store::{now_ms, Applied, Image, InboxRow, StoreError, Target};
use crate::wasm::{GuestError, LoadedComponent};

use super::episode_slot::Slot;

/// Runs an episode if the instance has work; returns what to dispatch.
pub async fn run(
    orchestrator: &Orchestrator,
    id: &str,
    slot: &Slot,
) -> Result<Applied, StoreError> {
    // A hot image made stale by a management operation is refused by the
    // commit, and one with nothing to do is not trusted: the episode then
    // runs once more on the store's state.
    if let Some(applied) = run_once(orchestrator, id, true, slot).await? {
        return Ok(applied);
    }
    Ok(run_once(orchestrator, id, false, slot)
        .await?
        .unwrap_or_default())
}

/// `None` when the hot image the episode ran on was stale, or had nothing
/// to do.
async fn run_once(
    orchestrator: &Orchestrator,
    id: &str,
    use_hot: bool,
    slot: &Slot,
) -> Result<Option<Applied>, StoreError> {
    let store = &orchestrator.store;
    // A hot instance is held by this episode alone (one episode per instance
    // at a time); it goes back only if what the episode decided is committed,
    // or it decided nothing (the image then still holds).
    // Claimed before any read, so rows committed after the read are kept.
    let mut claim = orchestrator.hot.claim(id);
    let cached = claim.image.take().filter(|_| use_hot);
    let was_hot = cached.is_some();
    let hot = match cached {
        // Another host added inbox rows: the rest of the image holds.
        Some(mut hot) if claim.inbox_stale => {
            hot.inbox = store.inbox(id).await?;
            hot
        }
        Some(hot) => hot,
        None => {
            let Some(Image {
                loaded,
                journal,
                inbox,
            }) = store.image(id).await?
            else {
                return Ok(Some(Applied::default()));
            };
            crate::metrics::instance_loaded();
            // On a shared hub another host may own it: that one runs it.
            let owned = store
                .owner_id()
                .is_none_or(|me| loaded.owner.as_deref() == Some(me));
            if !loaded.state.status.is_active() || !owned {
                orchestrator.for_a_worker.forget(id);
                return Ok(Some(Applied::default()));
            }
            HotInstance {
                loaded,
                journal,
                inbox,
            }
        }
    };
    let read: HashSet<i64> = hot.inbox.iter().map(|row| row.id).collect();
    let state = hot.loaded.state.clone();
    // The journal this episode replays: its commit is refused if another
    // episode appended meanwhile (a take-over while this host was paused).
    let replayed = state.history.events;
    let target = Target {
        id: id.to_string(),
        execution: state.execution,
        name: hot.loaded.name.clone(),
        digest: hot.loaded.digest.clone(),
    };
    let now = now_ms();
    // Started for later: nothing runs before its time (the scheduler wakes
    // then, see `next_due_after`), and the image holds.
    if state.status == RuntimeStatus::Pending && hot.loaded.start_at.is_some_and(|at| at > now) {
        claim.put(hot, &read);
        return Ok(Some(Applied::default()));
    }
    let arrivals = hot.inbox.iter().map(InboxRow::arrival).collect();
    let sorted = arrivals::decide(&state, arrivals, now);
    if !sorted.stale.is_empty() {
        tracing::info!(instance_id = %id, execution = state.execution, dropped = sorted.stale.len(), "dropped results addressed to an older execution");
    }
    let parked = hot.parked_rows();
    if !sorted.news && state.status == RuntimeStatus::Running {
        // Woken with nothing to take (the wake came after an earlier episode
        // took the rows): the store is asked once rather than the image
        // trusted, so an image can never leave an instance waiting for a
        // row it missed.
        if was_hot && sorted.stale.is_empty() {
            return Ok(None);
        }
        let idle = lifecycle::decide(
            Some(&state),
            Command::Idle {
                stale: sorted.stale,
            },
        );
        let applied = if idle.effects.is_empty() {
            Some(Applied::default())
        } else {
            store
                .commit_episode(target, replayed, idle.effects.clone())
                .await?
        };
        return Ok(match applied {
            Some(applied) => {
                if let Some(next) = hot.after(&idle.effects) {
                    claim.put(next, &read);
                }
                Some(applied)
            }
            None if was_hot => None,
            None => Some(Applied::default()),
        });
    }
    let Some(effects) = decide_by_code(orchestrator, id, &hot, sorted, &parked, now, slot).await?
    else {
        // Nothing was written: the image still holds, and the next try
        // (a worker connects, the component can be had) reads nothing.
        claim.put(hot, &read);
        return Ok(Some(Applied::default()));
    };
    let name = hot.loaded.name.clone();
    let ended = Effect::final_status(&effects);
    let next = hot.after(&effects);
    Ok(
        match store.commit_episode(target, replayed, effects).await? {
            Some(applied) => {
                counted(&name, ended);
                if let Some(next) = next {
                    claim.put(next, &read);
                }
                Some(applied)
            }
            None if was_hot => None,
            None => Some(Applied::default()),
        },
    )
}

/// An episode committed: counted, and its instance's end if it ended.
pub(super) fn counted(name: &str, ended: Option<RuntimeStatus>) {
    crate::metrics::episode(name);
    if ended == Some(RuntimeStatus::Completed) {
        crate::metrics::orchestration(name, "completed")
    } else if ended == Some(RuntimeStatus::Failed) {
        crate::metrics::orchestration(name, "failed")
    }
}

/// Runs the instance's code on its journal and the arrivals `sorted` took,
/// and returns what the core makes of it. `None`: its component version
/// cannot be had now (nothing is lost: the arrivals stay where they are).
pub(super) async fn decide_by_code(
    orchestrator: &Orchestrator,
    id: &str,
    hot: &HotInstance,
    sorted: Sorted,
    parked: &HashSet<i64>,
    now: i64,
    slot: &Slot,
) -> Result<Option<Vec<Effect>>, StoreError> {
    let state = &hot.loaded.state;
    if hot.loaded.digest == crate::core::sdk_entities::DIGEST {
        return super::sdk_entity::decide(orchestrator, id, &hot.loaded.name, sorted, parked, slot)
            .await;
    }
    if crate::core::sdk_history::is_sdk(&hot.loaded.digest) {
        return Ok(
            super::sdk_episode::decide(orchestrator, id, hot, sorted, parked, now, slot).await,
        );
    }
    let (calls, mut events) = split_journal(&hot.journal);
    let first_new = events.len();
    events.extend(sorted.taken.iter().map(|(_, e)| e.clone()));
    let replay = Replay::new(calls, events, now, hot.loaded.created_at);
    let first_task = replay.first_new_task();
    let (name, digest, input) = (&hot.loaded.name, &hot.loaded.digest, &hot.loaded.input);

    // The instance replays on the version it started with, whatever is served now.
    let (ending, replay, component) = match orchestrator.registry.pinned(digest, name).await {
        // Nothing is lost by waiting: the inbox stays, and the scheduler
        // offers the instance again on its next pass.
        Err(VersionError::Store(e)) => return Err(e),
        Err(e) if e.is_transient() => {
            tracing::error!(instance_id = %id, error = %e, "cannot run the instance's component version now; retrying");
            return Ok(None);
        }
        Err(e) => (Ending::Broken(e.to_string()), None, None),
        Ok(component) => {
            // The code's run, in the trace of the request that started the
            // instance.
            let span = crate::telemetry::traced(
                || tracing::info_span!("episode", instance_id = %id, orchestration = %name),
            );
            crate::telemetry::continue_trace(&span, hot.loaded.traceparent.as_deref());
            let (ending, replay) =
                run_code(orchestrator, &component, name, input, id, replay, slot)
                    .instrument(span)
                    .await;
            (ending, replay, Some(component))
        }
    };
    let (calls, untaken, unheard) = match replay {
        Some(replay) => {
            let untaken = replay.untaken_events();
            let unheard: HashSet<usize> = replay
                .untaken_arrivals()
                .into_iter()
                .filter_map(|at| at.checked_sub(first_new))
                .collect();
            (replay.into_new_calls(), untaken, unheard)
        }
        None => (Vec::new(), Vec::new(), HashSet::new()),
    };
    let arrived = sorted
        .taken
        .into_iter()
        .enumerate()
        .map(|(i, (row, event))| Arrived {
            row,
            event,
            heard: !unheard.contains(&i),
            parked: parked.contains(&row),
        })
        .collect();
    let child_digests = orchestrator.child_digests(component.as_deref(), &calls);
    // A fresh execution has no journal to replay: it may run the newest
    // code, and pins the activities served now, as a fresh start would.
    let served_now = orchestrator.registry.orchestration(name);
    let continue_on = served_now
        .as_ref()
        .map(|served| served.component.digest.clone());
    let continuing = calls
        .iter()
        .any(|c| matches!(c, crate::core::journal::Call::ContinueAsNew { .. }));
    let activity_set = served_now.filter(|_| continuing).and_then(|served| {
        orchestrator
            .registry
            .current_activity_set(&served.component.name)
    });
    let episode = Episode {
        stale: sorted.stale,
        arrived,
        calls,
        first_task,
        ending,
        untaken,
        digest: digest.clone(),
        child_digests,
        activity_set,
        own_activity_set: hot.loaded.activity_set.clone(),
        continue_on,
        at: now,
    };
    let limits = &orchestrator.config.limits;
    let effects = lifecycle::decide(
        Some(state),
        Command::EndEpisode {
            episode: Box::new(episode),
            limits,
        },
    )
    .effects;
    if let Some(reason) = Effect::failure(&effects) {
        tracing::warn!(instance_id = %id, orchestration = %name, reason, "instance failed");
    }
    if effects
        .iter()
        .any(|e| matches!(e, Effect::NewExecution { .. }))
    {
        orchestrator.continue_pace.continued(id);
    }
    Ok(Some(effects))
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
    slot: &Slot,
) -> (Ending, Option<Replay>) {
    // Waited for without the engine's slot: the component's share may be
    // held by its own sleeping activities for long. The episode's clock
    // starts once the guest has its slot.
    let limit = orchestrator.config.episode_timeout;
    let guest_slot = match slot
        .given_up_while(orchestrator.runtime.orchestration_slot(component, limit))
        .await
    {
        Ok(guest_slot) => guest_slot,
        Err(guest) => return (Ending::Broken(guest.to_string()), None),
    };
    let run = guest_slot.run_orchestration(component, name, input, id, replay);
    match run.await {
        Err(GuestError::WallClock { .. }) => (
            Ending::Broken(format!(
                "the orchestration code ran for more than {limit:?} in one episode: orchestration code must not block \
                 (std::thread::sleep, waiting on I/O); wait with a durable timer or an activity instead"
            )),
            None,
        ),
        Err(guest) => (Ending::Broken(guest.to_string()), None),
        Ok((end, replay)) => (end.checked(&replay), Some(replay)),
    }
}
