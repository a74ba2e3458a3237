//! Critical sections on durable entities, as the Durable Task protocol
//! defines them: an orchestration locks a set of entities (the SDKs sort it,
//! so that two sections never wait on each other), one after the other:
//! each entity, once free, is held by the section and passes the request on
//! to the next; the last tells the orchestration, whose lock task then
//! completes. While held, an entity runs only its owner's calls; whatever
//! else arrives waits, in order, until the owner releases it.
//!
//! The lock is kept in the entity instance's custom status (the entity's
//! state is its output), so that it changes in the same write as the batch
//! that takes or releases it. What waits stays in the entity's inbox,
//! parked: it is kept in arrival order, and does not wake the entity
//! until a release does.

use std::collections::{HashSet, VecDeque};

use serde::{Deserialize, Serialize};

use super::effects::Effect;
use super::instance::ParentRef;
use super::journal::{Call, Event};
use super::sdk_entities::{self, Caller, Operation};

/// The inbox event a lock request travels in.
pub const LOCK_EVENT: &str = "entity-lock";
/// The inbox event a release travels in.
pub const UNLOCK_EVENT: &str = "entity-unlock";
/// An event an entity sends itself when a batch left waiting rows behind
/// that nothing else would wake it for.
pub const WAKE_EVENT: &str = "entity-wake";

/// Who holds an entity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Lock {
    /// The owning orchestration's instance id (the protocol's `lockedBy`).
    #[serde(rename = "lockedBy")]
    pub owner: String,
    #[serde(rename = "criticalSectionId")]
    pub section: String,
    /// The owner's execution when it asked (a later one of the same id,
    /// after a purge and a new start, is another owner).
    #[serde(default)]
    pub execution: i64,
}

/// The lock a custom status holds; `None` for a free entity.
pub fn lock_of(custom_status: Option<&str>) -> Option<Lock> {
    serde_json::from_str(custom_status?).ok()
}

/// The custom status that keeps `lock` (JSON `null` for none: a `None`
/// custom status would leave the last one as it was).
pub fn status_of(lock: Option<&Lock>) -> String {
    lock.and_then(|lock| serde_json::to_string(lock).ok())
        .unwrap_or_else(|| "null".to_string())
}

/// A section's request for the entity at `position` of its set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockRequest {
    pub section: String,
    pub lock_set: Vec<String>,
    pub position: usize,
    /// The orchestration task the grant completes.
    pub owner: Caller,
}

/// A section's release of one entity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Unlock {
    pub section: String,
    pub owner: String,
}

fn raised(name: &str, payload: &impl Serialize) -> Event {
    Event::EventRaised {
        name: name.to_string(),
        payload: serde_json::to_string(payload).unwrap_or_default(),
    }
}

pub fn lock_event(request: &LockRequest) -> Event {
    raised(LOCK_EVENT, request)
}

pub fn unlock_event(unlock: &Unlock) -> Event {
    raised(UNLOCK_EVENT, unlock)
}

/// An event that asks an entity for a batch and nothing else: one with no
/// state, no lock and nothing queued then removes itself.
pub fn wake_event() -> Event {
    raised(WAKE_EVENT, &())
}

/// What an entity's inbox row carries.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Operation(Operation),
    Lock(LockRequest),
    Unlock(Unlock),
    Wake,
    /// Anything else raised at an entity (the management API's raise):
    /// it means nothing to it.
    Other,
}

pub fn message_of(event: &Event) -> Message {
    let Event::EventRaised { name, payload } = event else {
        return Message::Other;
    };
    let parsed = match name.as_str() {
        sdk_entities::OPERATION_EVENT => serde_json::from_str(payload).map(Message::Operation),
        LOCK_EVENT => serde_json::from_str(payload).map(Message::Lock),
        UNLOCK_EVENT => serde_json::from_str(payload).map(Message::Unlock),
        WAKE_EVENT => return Message::Wake,
        _ => return Message::Other,
    };
    parsed.unwrap_or(Message::Other)
}

/// Whether a batch takes one more operation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admit {
    Take,
    /// Take it, and nothing after it.
    TakeLast,
    /// The batch is full: it and what follows wait for the next.
    Stop,
}

/// An entity's inbox sorted under its lock: what the batch runs, what it
/// consumes, what keeps waiting, and the lock after it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Sorted {
    /// The operations the batch runs, in order.
    pub operations: Vec<Operation>,
    /// Every row the batch is done with (its operations' among them).
    pub consumed: Vec<i64>,
    /// Rows that wait for the lock and were not parked yet.
    pub park: Vec<i64>,
    pub lock: Option<Lock>,
    /// Whether `lock` differs from the one the entity had.
    pub lock_changed: bool,
    /// Lock requests passed on, and a wake when rows that were parked are
    /// left for the next batch.
    pub effects: Vec<Effect>,
    /// Requests this entity, the last of their set, completed: each owner
    /// is granted its section ([`grant`]), or, when it no longer runs, the
    /// set is let go ([`abandon`]).
    pub granted: Vec<LockRequest>,
    /// Rows consumed that meant nothing to the entity.
    pub dropped: usize,
}

/// Sorts `rows` (in arrival order) for entity `id`, held by `lock`.
/// `parked` names the rows an earlier batch left waiting.
pub fn sort(
    id: &str,
    lock: Option<Lock>,
    rows: Vec<(i64, Event)>,
    parked: &HashSet<i64>,
    mut admit: impl FnMut(&Operation) -> Admit,
) -> Sorted {
    let before = lock.clone();
    let mut sorted = Sorted {
        lock,
        ..Sorted::default()
    };
    let mut pending: VecDeque<(i64, Message)> = rows
        .into_iter()
        .map(|(row, event)| (row, message_of(&event)))
        .collect();
    let mut waiting: Vec<(i64, Message)> = Vec::new();
    while let Some((row, message)) = pending.pop_front() {
        match message {
            Message::Unlock(unlock) => {
                sorted.consumed.push(row);
                // A release of a section that does not hold the entity is
                // late (its owner released it twice, or ended meanwhile):
                // it changes nothing.
                let held = sorted
                    .lock
                    .as_ref()
                    .is_some_and(|l| l.section == unlock.section && l.owner == unlock.owner);
                if held {
                    sorted.lock = None;
                    // What waited goes first, in its order.
                    for waited in waiting.drain(..).rev() {
                        pending.push_front(waited);
                    }
                }
            }
            Message::Lock(request) if sorted.lock.is_some() => {
                waiting.push((row, Message::Lock(request)))
            }
            Message::Lock(request) => {
                sorted.consumed.push(row);
                sorted.lock = Some(Lock {
                    owner: request.owner.id.clone(),
                    section: request.section.clone(),
                    execution: request.owner.execution,
                });
                match next_step(request) {
                    Step::Pass(effect) => sorted.effects.push(effect),
                    Step::Granted(request) => sorted.granted.push(request),
                    Step::Nowhere => {}
                }
            }
            Message::Operation(operation) => {
                let owned = |lock: &Lock| {
                    operation
                        .caller
                        .as_ref()
                        .is_some_and(|caller| caller.id == lock.owner)
                };
                if sorted.lock.as_ref().is_some_and(|lock| !owned(lock)) {
                    waiting.push((row, Message::Operation(operation)));
                    continue;
                }
                match admit(&operation) {
                    Admit::Take => {
                        sorted.consumed.push(row);
                        sorted.operations.push(operation);
                    }
                    Admit::TakeLast => {
                        sorted.consumed.push(row);
                        sorted.operations.push(operation);
                        break;
                    }
                    Admit::Stop => {
                        pending.push_front((row, Message::Operation(operation)));
                        break;
                    }
                }
            }
            Message::Wake => sorted.consumed.push(row),
            Message::Other => {
                sorted.consumed.push(row);
                sorted.dropped += 1;
            }
        }
    }
    // Rows a full batch left for the next that were parked would wake
    // nobody. (What still waits for the lock is woken by its release.)
    let unwoken = pending.iter().any(|(row, _)| parked.contains(row));
    if unwoken {
        if let Some(entity) = sdk_entities::new_instance(id) {
            sorted.effects.push(Effect::EntityOperation {
                entity,
                event: wake_event(),
                due_at: None,
            });
        }
    }
    sorted.park = waiting
        .iter()
        .map(|(row, _)| *row)
        .filter(|row| !parked.contains(row))
        .collect();
    sorted.lock_changed = sorted.lock != before;
    sorted
}

enum Step {
    /// On to the next entity of the set.
    Pass(Effect),
    /// Every entity of the set is held.
    Granted(LockRequest),
    /// The next entity's id is none (the orchestration's set was checked
    /// when it asked: not met).
    Nowhere,
}

/// A request granted at one entity: passed on to the next of its set, or
/// granted at the last.
fn next_step(request: LockRequest) -> Step {
    let next = request.position.saturating_add(1);
    match request.lock_set.get(next) {
        Some(entity) => match sdk_entities::new_instance(entity) {
            Some(entity) => Step::Pass(Effect::EntityOperation {
                entity,
                event: lock_event(&LockRequest {
                    position: next,
                    ..request
                }),
                due_at: None,
            }),
            None => Step::Nowhere,
        },
        None => Step::Granted(request),
    }
}

/// The owner's lock task completes: its section holds every entity.
pub fn grant(request: LockRequest) -> Effect {
    let Caller {
        id,
        execution,
        task,
    } = request.owner;
    Effect::NotifyParent {
        parent: ParentRef {
            id,
            execution,
            task,
        },
        event: Event::TaskCompleted {
            task,
            result: "null".to_string(),
        },
    }
}

/// A section whose owner ended (or moved to a new execution) before its
/// request got every entity: each entity of the set is released, so that
/// none stays held by an orchestration that will never release it.
pub fn abandon(request: LockRequest) -> Vec<Effect> {
    let section = request.section;
    let held = request
        .lock_set
        .into_iter()
        .map(|entity| (section.clone(), entity))
        .collect();
    releases(&request.owner.id, held)
}

/// The releases owed by the sections whose requests wait among `queued`
/// at entity `id` as it ends: each one's set but `id` itself (a release
/// would start the ended entity afresh). Their owners wait on (a
/// terminated entity answers no lock); terminating them lets go of nothing
/// more.
pub fn abandoned_at<'a>(id: &str, queued: impl IntoIterator<Item = &'a Event>) -> Vec<Effect> {
    queued
        .into_iter()
        .filter_map(|event| match message_of(event) {
            Message::Lock(mut request) => {
                request.lock_set.retain(|entity| entity != id);
                Some(abandon(request))
            }
            _ => None,
        })
        .flatten()
        .collect()
}

/// The entities `calls` (an execution's, in order) locked and did not
/// release, with their sections.
pub fn held<'a>(calls: impl IntoIterator<Item = &'a Call>) -> Vec<(String, String)> {
    let mut held: Vec<(String, String)> = Vec::new();
    for call in calls {
        match call {
            Call::LockEntities { section, entities } => held.extend(
                entities
                    .iter()
                    .map(|entity| (section.clone(), entity.clone())),
            ),
            Call::UnlockEntity { section, entity } => {
                held.retain(|(s, e)| !(s == section && e == entity))
            }
            _ => {}
        }
    }
    held
}

/// The releases an orchestration that ends owes the entities it holds.
/// One sent to an entity its request has not reached yet changes nothing
/// there; `CleanEntityStorage` releases a lock so orphaned.
pub fn releases(owner: &str, held: Vec<(String, String)>) -> Vec<Effect> {
    held.into_iter()
        .filter_map(|(section, entity)| {
            Some(Effect::EntityOperation {
                entity: sdk_entities::new_instance(&entity)?,
                event: unlock_event(&Unlock {
                    section,
                    owner: owner.to_string(),
                }),
                due_at: None,
            })
        })
        .collect()
}

/// What a batch changes of the entity's lock, written with it whatever its
/// operations made of the state: rows left waiting for the lock parked,
/// the lock kept, requests passed on and grants sent.
pub struct Locking {
    pub park: Vec<i64>,
    /// The new custom status, when the lock changed.
    pub status: Option<String>,
    pub effects: Vec<Effect>,
    /// No section holds the entity after the batch.
    pub free: bool,
}

impl Locking {
    pub fn changes_anything(&self) -> bool {
        !self.park.is_empty() || self.status.is_some() || !self.effects.is_empty()
    }

    /// The batch's `effects` with the lock's joined; an entity the batch
    /// leaves without state (as written: a batch refused as a whole keeps
    /// the state it `had`) and free is removed (the instance, its row), as
    /// the managed service removes it, unless an operation arrived since.
    pub fn joined(self, mut effects: Vec<Effect>, had: bool) -> Vec<Effect> {
        let stateless = effects
            .iter()
            .find_map(|effect| match effect {
                Effect::SetStatus { output, .. } => Some(
                    output
                        .as_deref()
                        .map_or(!had, |o| o == sdk_entities::NO_STATE),
                ),
                _ => None,
            })
            .unwrap_or(!had);
        if let Some(status) = self.status {
            for effect in &mut effects {
                if let Effect::SetStatus { custom_status, .. } = effect {
                    *custom_status = Some(status.clone());
                }
            }
        }
        // The batch's fence stays its last effect.
        let at = match effects.last() {
            Some(Effect::Stepped) => effects.len() - 1,
            _ => effects.len(),
        };
        let mut added = self.effects;
        if !self.park.is_empty() {
            added.insert(0, Effect::ParkInbox(self.park));
        }
        effects.splice(at..at, added);
        if stateless && self.free {
            effects.push(Effect::PurgeIfIdle);
        }
        effects
    }
}

#[cfg(test)]
mod tests;
