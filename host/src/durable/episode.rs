//! One episode of an instance: replay its code against the journal and the
//! new inbox events, then commit what it decided.

use super::journal::{Call, Entry, Event};
use super::replay::Replay;
use super::Orchestrator;
use crate::registry::VersionError;
use crate::runtime::EpisodeEnd;
use crate::store::{now_ms, EpisodeCommit, RuntimeStatus, StoreError, TaskRow};

/// What to do after an episode: instances to wake (children it started, the
/// parent it finished for, itself after continue-as-new) and tasks to run.
#[derive(Default)]
pub struct FollowUp {
    pub wake: Vec<String>,
    pub tasks: Vec<TaskRow>,
}

/// Runs an episode if the instance has work.
pub async fn run(orchestrator: &Orchestrator, id: &str) -> Result<FollowUp, StoreError> {
    let store = &orchestrator.store;
    let Some(instance) = store.instance(id).await? else {
        return Ok(FollowUp::default());
    };
    if !matches!(
        instance.status,
        RuntimeStatus::Pending | RuntimeStatus::Running | RuntimeStatus::ContinuedAsNew
    ) {
        return Ok(FollowUp::default());
    }
    let now = now_ms();
    let inbox = store.visible_inbox(id, now).await?;
    if inbox.is_empty() && instance.status == RuntimeStatus::Running {
        return Ok(FollowUp::default());
    }
    let mut calls = Vec::new();
    let mut events = Vec::new();
    for (entry, at) in store.journal(id).await? {
        match entry {
            Entry::Call(call) => calls.push((call, at)),
            Entry::Event(event) => events.push(event),
        }
    }
    let new_events: Vec<Event> = inbox.iter().map(|(_, e)| e.clone()).collect();
    events.extend(new_events.iter().cloned());
    let consumed: Vec<i64> = inbox.iter().map(|(row, _)| *row).collect();
    let replay = Replay::new(calls, events, now, instance.created_at);
    let first_task = replay.first_new_task();

    // The instance replays on the version it started with, whatever is served now.
    let (end, replay, component) = match orchestrator
        .registry
        .pinned(&instance.component_digest, &instance.name)
        .await
    {
        // Nothing is lost by waiting: the inbox stays, and the scheduler
        // offers the instance again on its next pass.
        Err(VersionError::Store(e)) => return Err(e),
        Err(e) if e.is_transient() => {
            tracing::error!(instance_id = %id, error = %e, "cannot run the instance's component version now; retrying");
            return Ok(FollowUp::default());
        }
        Err(e) => (EpisodeEnd::Broken(e.to_string()), None, None),
        Ok(component) => {
            match orchestrator
                .runtime
                .run_orchestration(&component, &instance.name, &instance.input, id, replay)
                .await
            {
                Ok((end, replay)) => (end, Some(replay), Some(component)),
                Err(guest) => (EpisodeEnd::Broken(guest.to_string()), None, None),
            }
        }
    };

    let new_calls: Vec<Call> = replay
        .as_ref()
        .map(|r| r.new_calls().to_vec())
        .unwrap_or_default();
    let custom_status = new_calls.iter().rev().find_map(|c| match c {
        Call::SetCustomStatus { status } => Some(status.clone()),
        _ => None,
    });
    let child_digests = orchestrator.child_digests(component.as_deref(), &new_calls);
    let continue_with = new_calls.iter().find_map(|c| match c {
        Call::ContinueAsNew { input } => Some(input.clone()),
        _ => None,
    });
    let outcome = match (end, &replay) {
        (EpisodeEnd::Waiting, _) => Outcome::status(RuntimeStatus::Running),
        (EpisodeEnd::Returned(Ok(output)), Some(replay)) => match replay.check_complete() {
            Err(e) => Outcome::failed(e.to_string()),
            Ok(()) => match continue_with {
                Some(input) => match orchestrator.check_size("continue-as-new input", &input) {
                    Ok(()) => Outcome {
                        restart_with: Some((input, replay.untaken_events())),
                        ..Outcome::status(RuntimeStatus::ContinuedAsNew)
                    },
                    Err(e) => Outcome::failed(e.to_string()),
                },
                None => match orchestrator.check_size("output", &output) {
                    Ok(()) => Outcome {
                        output: Some(output),
                        ..Outcome::status(RuntimeStatus::Completed)
                    },
                    Err(e) => Outcome::failed(e.to_string()),
                },
            },
        },
        (EpisodeEnd::Returned(Err(error)), _) => Outcome::failed(error),
        (EpisodeEnd::Broken(reason), _) => Outcome::failed(reason),
        (EpisodeEnd::Returned(Ok(_)), None) => Outcome::failed("the replay state was lost".into()),
    };
    let Outcome {
        status,
        output,
        restart_with,
    } = outcome;
    // A fresh execution has no journal to replay: it may run the newest code.
    let continue_on = restart_with.as_ref().and_then(|_| {
        orchestrator
            .registry
            .orchestration(&instance.name)
            .map(|served| served.component.digest.clone())
    });
    if status == RuntimeStatus::Failed {
        tracing::warn!(instance_id = %id, orchestration = %instance.name, output = ?output, "instance failed");
    }
    let mut entries: Vec<Entry> = new_events.into_iter().map(Entry::Event).collect();
    entries.extend(new_calls.into_iter().map(Entry::Call));
    let committed = store
        .commit_episode(EpisodeCommit {
            instance_id: id.to_string(),
            orchestration: instance.name.clone(),
            consumed,
            entries,
            first_task,
            status,
            output,
            custom_status,
            restart_with,
            component_digest: instance.component_digest.clone(),
            child_digests,
            continue_on,
        })
        .await?;
    let mut wake = committed.children;
    wake.extend(committed.parent);
    if status == RuntimeStatus::ContinuedAsNew {
        wake.push(id.to_string());
    }
    Ok(FollowUp {
        wake,
        tasks: committed.tasks,
    })
}

/// How the instance stands after the episode.
struct Outcome {
    status: RuntimeStatus,
    output: Option<String>,
    /// Continue-as-new: the next input and the events carried over.
    restart_with: Option<(String, Vec<Event>)>,
}

impl Outcome {
    fn status(status: RuntimeStatus) -> Self {
        Self {
            status,
            output: None,
            restart_with: None,
        }
    }

    /// The output of a failed instance is its error, as a JSON string.
    fn failed(reason: String) -> Self {
        let output = serde_json::to_string(&reason).unwrap_or_else(|_| "\"failed\"".into());
        Self {
            output: Some(output),
            ..Self::status(RuntimeStatus::Failed)
        }
    }
}
