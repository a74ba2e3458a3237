//! What each write to the durable store means: the core is asked inside
//! the transaction, on the state read there, and its effects are applied.
//! The committer ([`super::group_commit`]) decides only when and with what
//! else a write is committed.

use super::apply::{apply, create};
use super::decided::{decide_and_apply, is_mine, with_news};
use super::durable_records::{
    Applied, ArrivalWritten, Arriving, Image, Loaded, Read, ReadOut, Target, Write, Written,
};
use super::error::StoreError;
use super::run_tx::RunTx;
use super::run_writes::write_run;
use super::tx::Tx;
use crate::core::effects::Effect;
use crate::core::entity_locks;
use crate::core::failure::TaskOutcome;
use crate::core::fence::{self, EpisodeFence, InstanceHolder};
use crate::core::journal::Entry;
use crate::core::lifecycle::task_done::{self, Attempt};
use crate::core::lifecycle::{self, Change, Command, Reply, TaskFate};
use crate::core::limits::{LimitError, Limits};
use crate::core::sdk_entities;
use crate::core::sdk_history;

pub(super) async fn write_one(
    tx: &mut (impl Tx + RunTx),
    write: Write,
    now: i64,
) -> Result<Written, StoreError> {
    match write {
        Write::Run(write) => Ok(Written::Run(write_run(tx, write, now).await?)),
        durable => write_durable(tx, durable, now).await,
    }
}

/// A write of the durable engine (any but [`Write::Run`]), which needs
/// only the engine's statements ([`Tx`]).
pub(super) async fn write_durable(
    tx: &mut impl Tx,
    write: Write,
    now: i64,
) -> Result<Written, StoreError> {
    match write {
        Write::Run(_) => Err(StoreError::Write(
            "an agent run's write is not a durable engine's".into(),
        )),
        Write::Episode {
            target,
            replayed,
            effects,
        } => {
            let current = tx.load(&target.id).await?;
            let fence = EpisodeFence {
                execution: target.execution,
                replayed,
                writer: tx.me(),
            };
            let Some(current) = current.filter(|c| fence::admits_episode(&holder(c), &fence))
            else {
                return Ok(Written::Episode(None));
            };
            let journal_len = current.state.history.events;
            let applied = apply(tx, &target, journal_len, effects, now).await?;
            Ok(Written::Episode(Some(with_news(applied, &target.id, true))))
        }
        Write::TaskDone {
            instance,
            attempt,
            result,
            limits,
        } => {
            let (fate, applied) = task_done(tx, instance, attempt, result, &limits, now).await?;
            Ok(Written::TaskDone(fate, applied))
        }
        Write::ArrivalAndEpisode {
            arriving,
            target,
            replayed,
            effects,
            limits,
        } => {
            let current = tx.load(&target.id).await?;
            let fence = EpisodeFence {
                execution: target.execution,
                replayed,
                writer: tx.me(),
            };
            let admitted = current
                .as_ref()
                .filter(|c| fence::admits_episode(&holder(c), &fence));
            let written = match arriving {
                Arriving::Result { attempt, result } => {
                    // The episode took the result as the task's outcome: it
                    // stands if the task still waits for this very attempt
                    // and the result is one that is delivered (not retried).
                    let delivered = admitted.is_some_and(|c| {
                        matches!(
                            task_done::decide(
                                Some(&c.state),
                                true,
                                &attempt,
                                result.clone(),
                                now,
                                &limits
                            ),
                            task_done::Settled::Delivered(_)
                        )
                    });
                    if delivered && tx.task_pending(&target.id, &attempt).await? {
                        tx.finish_task(&target, attempt.task).await?;
                        None
                    } else {
                        let (fate, applied) =
                            task_done(tx, target.id.clone(), attempt, result, &limits, now).await?;
                        Some(ArrivalWritten::Result(fate, applied))
                    }
                }
                Arriving::Event {
                    name,
                    payload,
                    held,
                } => {
                    // The episode took the event: it stands if the event is
                    // accepted, as a raise would accept it, and the episode
                    // saw every row the inbox holds (one it did not see, say
                    // another host's raise, is not overtaken in memory).
                    let accepted = match admitted {
                        Some(c) => {
                            let waiting = tx.inbox_size(&target.id).await?;
                            if waiting.events != held {
                                tracing::debug!(instance_id = %target.id, stored = waiting.events, held, "an event in hand is stored as a raise: the inbox holds rows its episode did not see");
                            }
                            let decision = lifecycle::decide(
                                Some(&c.state),
                                Command::Raise {
                                    name: &name,
                                    payload: &payload,
                                    waiting,
                                    limits: &limits,
                                    due_at: None,
                                },
                            );
                            waiting.events == held && decision.reply == Reply::Change(Change::Done)
                        }
                        None => false,
                    };
                    if accepted {
                        None
                    } else {
                        let event = Raised {
                            name: &name,
                            payload: &payload,
                            due_at: None,
                        };
                        let (change, applied) =
                            raise(tx, target.id.clone(), event, &limits, now).await?;
                        Some(ArrivalWritten::Event(change, applied))
                    }
                }
            };
            if let Some(alone) = written {
                return Ok(Written::ArrivalAndEpisode(alone));
            }
            let mine = is_mine(tx.me(), current.as_ref());
            let applied = apply(tx, &target, replayed, effects, now).await?;
            Ok(Written::ArrivalAndEpisode(ArrivalWritten::WithEpisode(
                with_news(applied, &target.id, mine),
            )))
        }
        Write::Start(new) => {
            let id = new.id.clone();
            // A host that works owns what it starts; a front's starts are
            // for the others.
            let mine = tx.me().is_some();
            Ok(Written::Start(match create(tx, new, now).await? {
                Ok(created) => {
                    let applied = Applied {
                        wake: vec![id.clone()],
                        due: created.start_at,
                        created: vec![created],
                        ..Applied::default()
                    };
                    Some(with_news(applied, &id, mine))
                }
                Err(()) => None,
            }))
        }
        Write::Raise {
            instance,
            name,
            payload,
            limits,
            due_at,
        } => {
            let event = Raised {
                name: &name,
                payload: &payload,
                due_at,
            };
            let (change, applied) = raise(tx, instance, event, &limits, now).await?;
            Ok(Written::Raise(change, applied))
        }
        Write::Manage {
            instance,
            op: lifecycle::Operation::Rewind { .. },
        } => {
            let (change, applied) = super::rewinds::rewind_tree(tx, &instance, now).await?;
            Ok(Written::Manage(change, applied))
        }
        Write::Manage { instance, op } => {
            let current = tx.load(&instance).await?;
            let state = current.as_ref().map(|c| &c.state);
            let mut decision = lifecycle::decide(state, Command::Manage(&op));
            let ended = matches!(op, lifecycle::Operation::Terminate { .. })
                && decision.reply == Reply::Change(Change::Done);
            // An SDK orchestration that ends holding entities lets them go.
            if let Some(sdk) = current
                .as_ref()
                .filter(|c| ended && sdk_history::is_sdk(&c.digest))
            {
                let journal = tx.journal(&instance).await?;
                let held =
                    entity_locks::held(journal.iter().filter_map(|(entry, _)| match entry {
                        Entry::Call(call) => Some(call),
                        Entry::Event(_) => None,
                    }));
                decision
                    .effects
                    .extend(entity_locks::releases(&sdk.state.id, held));
            }
            // An entity that ends tells the callers of the operations
            // still queued at it: none is left waiting for a result.
            if let Some(entity) = &current {
                if ended && entity.digest == sdk_entities::DIGEST {
                    let queued = tx.inbox(&instance).await?;
                    decision.effects.extend(sdk_entities::callers_of_queued(
                        &instance,
                        queued.iter().map(|row| &row.event),
                        "it was terminated",
                    ));
                    // A section whose request waited here gets none of its
                    // set: the entities it holds already are let go.
                    decision.effects.extend(entity_locks::abandoned_at(
                        &instance,
                        queued.iter().map(|row| &row.event),
                    ));
                }
            }
            let (change, applied) = decide_and_apply(tx, current, decision, now).await?;
            Ok(Written::Manage(change, applied))
        }
    }
}

/// A task's result, decided on the instance and the task as stored.
async fn task_done(
    tx: &mut impl Tx,
    instance: String,
    attempt: Attempt,
    result: TaskOutcome,
    limits: &Limits,
    now: i64,
) -> Result<(TaskFate, Applied), StoreError> {
    let Some(current) = tx.load(&instance).await? else {
        return Ok((TaskFate::Dropped, Applied::default()));
    };
    let mine = is_mine(tx.me(), Some(&current));
    let pending = tx.task_pending(&instance, &attempt).await?;
    let decision = lifecycle::decide(
        Some(&current.state),
        Command::TaskDone {
            pending,
            attempt: &attempt,
            result,
            now,
            limits,
        },
    );
    let (Reply::Task(outcome), effects) = (decision.reply, decision.effects) else {
        return Err(StoreError::Write(
            "a task's result got another reply".into(),
        ));
    };
    let target = Target {
        id: instance,
        execution: attempt.execution,
        name: current.name,
        digest: current.digest,
    };
    let journal_len = current.state.history.events;
    let applied = apply(tx, &target, journal_len, effects, now).await?;
    Ok((outcome, with_news(applied, &target.id, mine)))
}

/// An event to raise, and when it is seen (`None`: at once).
struct Raised<'a> {
    name: &'a str,
    payload: &'a str,
    due_at: Option<i64>,
}

/// An event raised at an instance, decided on the instance as stored.
async fn raise(
    tx: &mut impl Tx,
    instance: String,
    Raised {
        name,
        payload,
        due_at,
    }: Raised<'_>,
    limits: &Limits,
    now: i64,
) -> Result<(Result<Change, LimitError>, Applied), StoreError> {
    let current = tx.load(&instance).await?;
    let waiting = match &current {
        Some(_) => tx.inbox_size(&instance).await?,
        None => Default::default(),
    };
    let decision = lifecycle::decide(
        current.as_ref().map(|c| &c.state),
        Command::Raise {
            name,
            payload,
            waiting,
            limits,
            due_at,
        },
    );
    match decision.reply {
        Reply::Refused(refused) => Ok((Err(refused), Applied::default())),
        Reply::Change(_) | Reply::Task(_) | Reply::Episode => {
            let (change, applied) = decide_and_apply(tx, current, decision, now).await?;
            Ok((Ok(change), applied))
        }
    }
}

/// An instance as the episode fence reads it.
fn holder(current: &Loaded) -> InstanceHolder<'_> {
    InstanceHolder {
        execution: current.state.execution,
        active: current.state.status.is_active(),
        owner: current.owner.as_deref(),
        journal_len: current.state.history.events,
    }
}

/// An episode's effects written under its fence, without reading its
/// instance: the caller makes the fence (the same rule as
/// [`fence::admits_episode`], with `replayed` as the journal's length) the
/// condition of the statement that writes them, which is refused whole if
/// it does not hold. Only for a host that owns what it runs.
pub(super) async fn write_fenced_episode(
    tx: &mut impl Tx,
    target: Target,
    replayed: u64,
    effects: Vec<Effect>,
    now: i64,
) -> Result<Written, StoreError> {
    let applied = apply(tx, &target, replayed, effects, now).await?;
    Ok(Written::Episode(Some(with_news(applied, &target.id, true))))
}

pub(super) async fn read_one(tx: &mut impl Tx, read: Read) -> Result<ReadOut, StoreError> {
    Ok(match read {
        Read::Image(id) => ReadOut::Image(image(tx, &id).await?),
    })
}

/// State, journal and inbox of an instance, read in one transaction.
async fn image(tx: &mut impl Tx, id: &str) -> Result<Option<Image>, StoreError> {
    let Some(loaded) = tx.load(id).await? else {
        return Ok(None);
    };
    let inbox = tx.inbox(id).await?;
    let journal = tx.journal(id).await?;
    Ok(Some(Image {
        loaded,
        journal,
        inbox,
    }))
}
