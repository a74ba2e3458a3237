//! Episodes run on an arrival in hand (a task's result, a raised event)
//! at an instance that is hot here: the arrival and the episode that takes
//! it are committed in one write, one commit per step instead of two;
//! whatever the episode cannot take is stored as any other arrival.

use std::collections::HashSet;

use super::episode::{counted, decide_by_code, run};
use super::episode_slot::Slot;
use super::in_flight::InHand;
use super::Orchestrator;
use crate::core::effects::Effect;
use crate::core::instance::Size;
use crate::core::lifecycle::arrivals;
use crate::core::lifecycle::in_hand;
use crate::core::lifecycle::Change;
use crate::core::limits::LimitError;
use crate::store::{
    now_ms, Applied, ArrivalWritten, Arriving, InboxRow, StoreError, Target, TaskFate,
};

/// Runs the instance's episode on a task's result in hand, when the
/// instance is hot here and the result is one that is delivered: the
/// result and the episode are committed in one write (one commit per step
/// instead of two). Otherwise, or if the code leaves the result for later,
/// the result is stored alone, as any other, and its instance woken.
pub async fn run_on_result(
    orchestrator: &Orchestrator,
    id: &str,
    in_hand: InHand,
    slot: &Slot,
) -> Result<Applied, StoreError> {
    let InHand {
        attempt,
        result,
        running,
    } = in_hand;
    let arriving = Arriving::Result { attempt, result };
    let taken = match run_taking(orchestrator, id, &arriving, slot).await {
        Ok(taken) => taken,
        // The result is not lost with the episode (its task would run
        // again): it is stored alone. Storing it twice is harmless, should
        // the failed write have committed after all: a task's result is
        // taken once, a second one is dropped.
        Err(e) => {
            tracing::warn!(instance_id = %id, error = %e, "the episode on a result in hand failed; storing the result alone");
            None
        }
    };
    let written = match taken {
        Some(written) => written,
        None => {
            let Arriving::Result { attempt, result } = arriving else {
                return Err(StoreError::Write("a result turned into an event".into()));
            };
            let limits = orchestrator.config.limits.clone();
            let (fate, applied) = orchestrator
                .store
                .task_done(id, attempt, result, limits)
                .await?;
            ArrivalWritten::Result(fate, applied)
        }
    };
    drop(running);
    Ok(match written {
        ArrivalWritten::WithEpisode(applied) | ArrivalWritten::Event(_, applied) => applied,
        // A retry's next attempt is due later: `applied` says when.
        ArrivalWritten::Result(fate, applied) => {
            if fate == TaskFate::Dropped {
                tracing::info!(instance_id = %id, "dropped the result of a task the instance no longer waits for");
            }
            applied
        }
    })
}

/// Several results in hand (a fan-out's, arriving together): stored as
/// any others, in one batch, then one episode takes them all.
pub async fn run_on_results(
    orchestrator: &Orchestrator,
    id: &str,
    held: Vec<InHand>,
    slot: &Slot,
) -> Result<Applied, StoreError> {
    let limits = orchestrator.config.limits.clone();
    let (writes, running): (Vec<_>, Vec<_>) = held
        .into_iter()
        .map(|h| ((h.attempt, h.result), h.running))
        .unzip();
    let results = orchestrator.store.tasks_done(id, writes, limits).await;
    drop(running);
    let mut applied = Applied::default();
    for result in results {
        let (_, done) = result?;
        applied.comes_due(done.due);
        applied.tasks.extend(done.tasks);
        applied
            .wake
            .extend(done.wake.into_iter().filter(|w| w != id));
    }
    let ran = run(orchestrator, id, slot).await?;
    applied.tasks.extend(ran.tasks);
    applied.wake.extend(ran.wake);
    applied.comes_due(ran.due);
    Ok(applied)
}

/// Raises an event at an instance whose episodes the caller holds: when
/// the instance is hot here and waits for it, its episode runs on the event
/// and both are committed in one write; otherwise the event is stored as
/// any raise. What the raise came to, and what to dispatch.
pub async fn raise_on(
    orchestrator: &Orchestrator,
    id: &str,
    name: &str,
    payload: &str,
    slot: &Slot,
) -> Result<(Result<Change, LimitError>, Applied), StoreError> {
    let arriving = Arriving::Event {
        name: name.to_string(),
        payload: payload.to_string(),
        // Set by the episode, from the image it runs on.
        held: 0,
    };
    match run_taking(orchestrator, id, &arriving, slot).await? {
        Some(ArrivalWritten::WithEpisode(applied)) => Ok((Ok(Change::Done), applied)),
        Some(ArrivalWritten::Event(change, applied)) => Ok((change, applied)),
        Some(ArrivalWritten::Result(..)) => {
            Err(StoreError::Write("an event was written as a result".into()))
        }
        None => {
            let limits = orchestrator.config.limits.clone();
            orchestrator.store.raise(id, name, payload, limits).await
        }
    }
}

/// The episode on an arrival in hand, committed with it; `None` when it
/// could not run on it (nothing written, the image kept).
async fn run_taking(
    orchestrator: &Orchestrator,
    id: &str,
    arriving: &Arriving,
    slot: &Slot,
) -> Result<Option<ArrivalWritten>, StoreError> {
    let mut claim = orchestrator.hot.claim(id);
    let Some(mut hot) = claim.image.take() else {
        return Ok(None);
    };
    if claim.inbox_stale {
        // Another host added inbox rows: they come before the arrival.
        match orchestrator.store.inbox(id).await {
            Ok(inbox) => hot.inbox = inbox,
            // The arrival is stored as any other (the image is dropped).
            Err(e) => {
                tracing::warn!(instance_id = %id, error = %e, "could not read the inbox again; the arrival is stored");
                return Ok(None);
            }
        }
    }
    let held = hot.inbox.len() as u64;
    let state = hot.loaded.state.clone();
    let now = now_ms();
    let limits = orchestrator.config.limits.clone();
    // The inbox as the image holds it, for an event's limits.
    let waiting = Size {
        events: hot.inbox.len() as u64,
        bytes: hot.inbox.iter().map(|r| r.event.payload_len() as u64).sum(),
    };
    let Some(event) = in_hand::delivers(&state, arriving, waiting, now, &limits) else {
        claim.put(hot, &HashSet::new());
        return Ok(None);
    };
    hot.inbox.push(InboxRow {
        id: in_hand::ROW,
        execution: state.execution,
        event,
        visible_at: now,
        parked: false,
    });
    let read: HashSet<i64> = hot.inbox.iter().map(|row| row.id).collect();
    let parked = hot.parked_rows();
    let arrivals = hot.inbox.iter().map(InboxRow::arrival).collect();
    let sorted = arrivals::decide(&state, arrivals, now);
    let decided = decide_by_code(orchestrator, id, &hot, sorted, &parked, now, slot).await?;
    let taken = decided.as_deref().is_some_and(in_hand::taken);
    let Some(effects) = decided.filter(|_| taken) else {
        // The code left the arrival for later: it is stored as any other.
        hot.inbox.retain(|row| row.id != in_hand::ROW);
        claim.put(hot, &HashSet::new());
        return Ok(None);
    };
    let target = Target {
        id: id.to_string(),
        execution: state.execution,
        name: hot.loaded.name.clone(),
        digest: hot.loaded.digest.clone(),
    };
    let name = hot.loaded.name.clone();
    let ended = Effect::final_status(&effects);
    let next = hot.after(&effects);
    // The arrival never enters the inbox: the effects journal it.
    let effects = in_hand::as_stored(effects);
    let written = orchestrator
        .store
        .arrival_and_episode(
            seen(arriving, held),
            target,
            state.history.events,
            effects,
            limits,
        )
        .await?;
    if let ArrivalWritten::WithEpisode(_) = &written {
        counted(&name, ended);
        if let Some(next) = next {
            claim.put(next, &read);
        }
    }
    // Otherwise the instance moved on meanwhile (its image was stale): the
    // arrival was stored as any other, and the image is dropped.
    Ok(Some(written))
}

/// `arriving` as committed: an event carries the inbox rows its episode
/// saw, so that it never overtakes one the episode did not.
fn seen(arriving: &Arriving, rows: u64) -> Arriving {
    let mut arriving = arriving.clone();
    if let Arriving::Event { held, .. } = &mut arriving {
        *held = rows;
    }
    arriving
}
