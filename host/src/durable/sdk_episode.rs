//! An episode of an orchestration written with a Durable Task SDK: its code
//! runs in a connected worker, which replays the history it is sent and
//! answers with actions; the engine journals and carries them out exactly
//! as it does a wasm episode's calls (one commit, the same leases, fences,
//! limits and metrics).

use super::episode_slot::Slot;
use super::given_back;
use std::collections::HashSet;
use std::time::Duration;

use super::hot::HotInstance;
use super::Orchestrator;
use crate::core::effects::Effect;
use crate::core::entity_locks;
use crate::core::instance::ParentRef;
use crate::core::journal::{Call, Entry};
use crate::core::lifecycle::arrivals::Sorted;
use crate::core::lifecycle::episode_end::Ending;
use crate::core::lifecycle::episode_end::{Arrived, Episode};
use crate::core::lifecycle::{self, Command};
use crate::core::sdk_actions;
use crate::core::sdk_history::{self, Started};
use crate::sdk_workers::{EpisodeAnswer, EpisodeItem};

/// How long an episode waits for a worker that runs its orchestration to
/// connect: not at all, since it would hold an episode permit meanwhile
/// (a thousand instances waiting for a worker would starve every other
/// instance of the host); the scheduler offers the instance again on its
/// next pass, every second at most, or at once when a worker connects.
const FOR_A_WORKER: Duration = Duration::ZERO;

/// What the SDKs take in one message, less room for the message's frame.
pub(super) const MESSAGE_LIMIT: usize = (4 << 20) - (256 << 10);

/// The worker's answer; `None` when none came (see [`decide`]).
async fn answer_of(
    orchestrator: &Orchestrator,
    id: &str,
    name: &str,
    version: Option<&str>,
    item: EpisodeItem,
) -> Option<sdk_actions::Answer> {
    let answer = orchestrator
        .sdk_workers
        .run_episode(
            name,
            version,
            item,
            FOR_A_WORKER,
            orchestrator.config.episode_timeout,
        )
        .await;
    let key = format!("episode:{id}");
    match answer {
        Some(EpisodeAnswer::Done(answer)) => {
            orchestrator.given_back.answered(&key);
            Some(answer)
        }
        Some(EpisodeAnswer::Abandoned) if orchestrator.given_back.again(&key) => {
            tracing::warn!(instance_id = %id, orchestration = %name, "SDK workers gave the episode back {} times in a row; the instance fails", given_back::LIMIT);
            Some(sdk_actions::Answer {
                actions: vec![sdk_actions::Action::Invalid(format!(
                    "SDK workers gave the orchestration's episode back {} times in a row (each gave it back, went away with it, or did not answer within --episode-timeout)",
                    given_back::LIMIT
                ))],
                custom_status: None,
            })
        }
        Some(EpisodeAnswer::Abandoned) => {
            tracing::info!(instance_id = %id, orchestration = %name, "an SDK worker gave the episode back (or went away); it runs again");
            None
        }
        None => {
            tracing::debug!(instance_id = %id, orchestration = %name, "no SDK worker that runs the orchestration is connected; the instance waits for one");
            orchestrator.for_a_worker.wait(id, name, version);
            None
        }
    }
}

/// A sub-orchestration's parent as the SDKs show it (`ctx.parent`): its
/// name and version are read from its instance (a parent purged meanwhile
/// keeps its id alone). `None` when the store cannot be read now: the
/// episode is offered again, nothing written.
async fn parent_of(
    orchestrator: &Orchestrator,
    id: &str,
    parent: &ParentRef,
) -> Option<sdk_history::Parent> {
    let record = match orchestrator.store.instance(&parent.id).await {
        Ok(record) => record,
        Err(e) => {
            tracing::warn!(instance_id = %id, parent = %parent.id, error = %e, "the parent of an SDK sub-orchestration could not be read; its episode runs later");
            return None;
        }
    };
    Some(sdk_history::Parent {
        instance_id: parent.id.clone(),
        execution: parent.execution,
        task: parent.task,
        name: record.as_ref().map(|r| r.name.clone()).unwrap_or_default(),
        version: record
            .as_ref()
            .and_then(|r| sdk_history::version_of(&r.component_digest))
            .map(str::to_string),
    })
}

/// What the worker's answer makes of the episode; `None` when no worker
/// answered (none connected, it gave the episode back, went away, or took
/// longer than the episode timeout): nothing is written, and the arrivals
/// wait in the inbox for the next try.
pub(super) async fn decide(
    orchestrator: &Orchestrator,
    id: &str,
    hot: &HotInstance,
    sorted: Sorted,
    parked: &HashSet<i64>,
    now: i64,
    slot: &Slot,
) -> Option<Vec<Effect>> {
    let state = &hot.loaded.state;
    let name = &hot.loaded.name;
    let parent = match &state.parent {
        None => None,
        Some(parent) => Some(parent_of(orchestrator, id, parent).await?),
    };
    let started = Started {
        name: name.clone(),
        input: hot.loaded.input.clone(),
        instance_id: id.to_string(),
        execution: state.execution,
        parent,
        version: sdk_history::version_of(&hot.loaded.digest).map(str::to_string),
    };
    let arrived: Vec<_> = sorted.taken.iter().map(|(_, e)| e.clone()).collect();
    let item = EpisodeItem {
        token: String::new(),
        instance_id: id.to_string(),
        execution: state.execution,
        past: sdk_history::past(&started, &hot.journal),
        new: sdk_history::new_events(&started, &hot.journal, &arrived, now),
    };
    let bytes = sdk_history::payload_bytes(&item.past) + sdk_history::payload_bytes(&item.new);
    let decided = if bytes > MESSAGE_LIMIT {
        // The SDKs take 4 MiB a message: a history past it would break the
        // worker's stream, and be sent again, forever.
        sdk_actions::Decided {
            calls: vec![Call::SdkEpisode { ids: Vec::new(), failure: None }],
            ending: Ending::Broken(format!(
                "the instance's history ({} KiB) is past what a Durable Task SDK worker takes in one message (4 MiB): \
                 keep payloads small, or continue as new",
                bytes / 1024
            )),
            carryover: Vec::new(),
            child_versions: Vec::new(),
            child_tags: Vec::new(),
            next_version: None,
        }
    } else {
        // What remains is a wait for the worker and a commit: other
        // instances' episodes run meanwhile.
        slot.give_up();
        let answer = answer_of(orchestrator, id, name, started.version.as_deref(), item).await?;
        sdk_actions::decide(&hot.journal, answer)
    };
    let first_task = hot
        .journal
        .iter()
        .filter(|(entry, _)| matches!(entry, Entry::Call(_)))
        .count();
    let mut child_digests = orchestrator.child_digests(None, &decided.calls);
    // A child no component serves runs in an SDK worker, on the version
    // its call named (not the parent's).
    for (name, version) in &decided.child_versions {
        child_digests
            .entry(name.clone())
            .or_insert_with(|| sdk_history::digest_of(version.as_deref()));
    }
    // The entities the execution still holds once it ends.
    let held = entity_locks::held(
        hot.journal
            .iter()
            .filter_map(|(entry, _)| match entry {
                Entry::Call(call) => Some(call),
                Entry::Event(_) => None,
            })
            .chain(&decided.calls),
    );
    // Continue-as-new to a new version moves the instance to it (its
    // activity pin goes along); otherwise the next execution keeps it.
    let continue_on = decided
        .next_version
        .as_deref()
        .map(|version| sdk_history::digest_of(Some(version)));
    let activity_set = continue_on
        .as_ref()
        .and_then(|_| hot.loaded.activity_set.clone());
    let episode = Episode {
        stale: sorted.stale,
        // The worker keeps raised events no wait took itself: all are heard.
        arrived: sorted
            .taken
            .into_iter()
            .map(|(row, event)| Arrived {
                row,
                event,
                heard: true,
                parked: parked.contains(&row),
            })
            .collect(),
        calls: decided.calls,
        first_task: u32::try_from(first_task).unwrap_or(u32::MAX),
        ending: decided.ending,
        untaken: decided.carryover,
        digest: hot.loaded.digest.clone(),
        child_digests,
        activity_set,
        own_activity_set: hot.loaded.activity_set.clone(),
        continue_on,
        at: now,
    };
    let mut effects = lifecycle::decide(
        Some(state),
        Command::EndEpisode {
            episode: Box::new(episode),
            limits: &orchestrator.config.limits,
        },
    )
    .effects;
    tag_children(
        &mut effects,
        decided.child_tags,
        &orchestrator.config.limits,
    );
    // An execution that ends holding entities (its code broke, or it was
    // ended for it before its worker released them) lets them go.
    let ends = Effect::final_status(&effects).is_some()
        || effects
            .iter()
            .any(|e| matches!(e, Effect::NewExecution { .. }));
    if ends && !held.is_empty() {
        effects.extend(entity_locks::releases(id, held));
    }
    if let Some(reason) = Effect::failure(&effects) {
        tracing::warn!(instance_id = %id, orchestration = %name, reason, "instance failed");
    }
    Some(effects)
}

/// Each sub-orchestration the effects create whose worker gave it tags gets
/// them in the write that creates it (tags past the payload limit are not
/// kept, and said so).
fn tag_children(
    effects: &mut Vec<Effect>,
    tags: Vec<(String, String)>,
    limits: &crate::core::limits::Limits,
) {
    if tags.is_empty() {
        return;
    }
    let mut tags: std::collections::HashMap<String, String> = tags.into_iter().collect();
    let mut tagged = Vec::with_capacity(effects.len() + tags.len());
    for effect in effects.drain(..) {
        let created = if let Effect::Create(new) = &effect {
            tags.remove(&new.id).map(|t| (new.id.clone(), t))
        } else {
            None
        };
        tagged.push(effect);
        if let Some((id, tags)) = created {
            match limits.check_payload("sub-orchestration tags", &tags) {
                Ok(()) => tagged.push(Effect::TagCreated { id, tags }),
                Err(e) => {
                    tracing::warn!(instance_id = %id, error = %e, "a sub-orchestration's tags were not kept")
                }
            }
        }
    }
    *effects = tagged;
}
