//! Writes the effects of a core decision inside the caller's transaction.
//! The order is the decision's; nothing here chooses anything: where a rule
//! is needed (a sub-orchestration's id already taken), the core decides.

use super::durable_records::{to_json, Applied, InboxRow, Loaded, Target, TaskRow};
use super::error::StoreError;
use super::tx::{NextExecution, RowUpdate, Tx};
use crate::core::effects::Effect;
use crate::core::instance::{InstanceState, NewInstance, RuntimeStatus, Size};
use crate::core::journal::{Call, Entry, Event};
use crate::core::lifecycle::start;

/// The target's own row changes, gathered so one statement writes them.
#[derive(Default)]
struct PendingRow {
    update: RowUpdate,
    dirty: bool,
}

impl PendingRow {
    async fn flush(&mut self, tx: &mut impl Tx, id: &str, now: i64) -> Result<(), StoreError> {
        if !std::mem::take(&mut self.dirty) {
            return Ok(());
        }
        tx.update_instance(id, std::mem::take(&mut self.update), now)
            .await
    }
}

fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `journal_len` is how many rows the target's journal holds (its history
/// count as read in this transaction): new rows are numbered after it.
pub(super) async fn apply(
    tx: &mut impl Tx,
    target: &Target,
    journal_len: u64,
    effects: Vec<Effect>,
    now: i64,
) -> Result<Applied, StoreError> {
    let mut applied = Applied::default();
    let mut scheduled: Vec<(u32, Call)> = Vec::new();
    let mut row = PendingRow::default();
    let mut journal_len = journal_len;
    for effect in effects {
        match effect {
            Effect::ConsumeInbox(rows) => tx.delete_inbox_rows(&target.id, &rows).await?,
            Effect::ParkInbox(rows) => tx.park_inbox_rows(&target.id, &rows).await?,
            Effect::Append { entries, at } => {
                let bytes = append(tx, &target.id, journal_len, &entries, at).await?;
                journal_len += entries.len() as u64;
                row.update.events = row
                    .update
                    .events
                    .saturating_add(count(entries.len() as u64));
                row.update.bytes = row.update.bytes.saturating_add(count(bytes));
                row.dirty = true;
            }
            Effect::Stepped => {
                row.update.events = row.update.events.saturating_add(1);
                row.dirty = true;
            }
            Effect::Upgrade {
                digest,
                activity_set,
            } => {
                tx.move_version(&target.id, &digest, activity_set.as_deref())
                    .await?;
                row.update.events = row.update.events.saturating_add(1);
                row.dirty = true;
            }
            Effect::ScheduleTask { task, call } => scheduled.push((task, call)),
            Effect::Create(new) => match create(tx, new.clone(), now).await? {
                Ok(created) => {
                    applied.comes_due(created.start_at);
                    applied.wake.push(new.id);
                    applied.created.push(created);
                }
                Err(()) => match start::collision(&new) {
                    Some((parent, event)) => {
                        push_inbox(tx, &mut applied, &parent.id, parent.execution, event, now)
                            .await?;
                        applied.wake.push(parent.id.clone());
                    }
                    None => return Err(StoreError::Write(format!("instance '{}' exists", new.id))),
                },
            },
            Effect::Start(new) => match create(tx, new.clone(), now).await? {
                Ok(created) => {
                    applied.comes_due(created.start_at);
                    applied.wake.push(new.id);
                    applied.created.push(created);
                }
                Err(()) => {
                    tracing::info!(instance_id = %new.id, "an entity started an orchestration whose id an unfinished instance holds; that one goes on")
                }
            },
            Effect::ArmTimer { task, fire_at } => {
                applied.comes_due(Some(fire_at));
                push_inbox(
                    tx,
                    &mut applied,
                    &target.id,
                    target.execution,
                    Event::TimerFired { task },
                    fire_at,
                )
                .await?;
            }
            Effect::Deliver {
                instance,
                execution,
                event,
                visible_at,
            } => {
                applied.comes_due(visible_at.filter(|at| *at > now));
                let visible_at = visible_at.map_or(now, |at| at.max(now));
                push_inbox(tx, &mut applied, &instance, execution, event, visible_at).await?;
                applied.wake.push(instance);
            }
            Effect::TagCreated { id, tags } => {
                if applied.created.iter().any(|c| c.state.id == id) {
                    tx.set_tags(&id, &tags).await?;
                }
            }
            Effect::SendEvent { instance, event } => match tx.look_up(&instance).await? {
                Some(loaded) if !loaded.state.status.is_finished() => {
                    let execution = loaded.state.execution;
                    push_inbox(tx, &mut applied, &instance, execution, event, now).await?;
                    applied.wake.push(instance);
                }
                Some(_) | None => {
                    tracing::info!(from = %target.id, instance_id = %instance, "an event sent to an instance that does not exist or is over was dropped")
                }
            },
            Effect::SetStatus {
                status,
                output,
                custom_status,
            } => {
                row.update.status = Some(status);
                row.update.output = output.or(row.update.output.take());
                row.update.custom_status = custom_status.or(row.update.custom_status.take());
                row.dirty = true;
            }
            Effect::NewExecution {
                input,
                digest,
                activity_set,
                carried,
            } => {
                row.flush(tx, &target.id, now).await?;
                journal_len = 0;
                let next = tx.new_execution(&target.id).await?;
                // Events raised after the episode read the inbox move along;
                // timers and results of the old execution do not.
                tx.begin_execution(NextExecution {
                    id: &target.id,
                    old: target.execution,
                    next,
                    input: &input,
                    digest: digest.as_deref(),
                    activity_set: activity_set.as_deref(),
                })
                .await?;
                for event in carried {
                    push_inbox(tx, &mut applied, &target.id, next, event, now).await?;
                }
                applied.wake.push(target.id.clone());
            }
            Effect::DropPending => tx.clear_pending(&target.id).await?,
            Effect::NotifyParent { parent, event } => {
                push_inbox(tx, &mut applied, &parent.id, parent.execution, event, now).await?;
                applied.wake.push(parent.id);
            }
            Effect::FinishTask { task } => tx.finish_task(target, task).await?,
            Effect::RetryTask {
                task,
                attempt,
                due_at,
            } => {
                applied.comes_due(Some(due_at));
                tx.retry_task(target, task, attempt, due_at).await?
            }
            Effect::Purge => {
                row = PendingRow::default();
                tx.purge(&target.id).await?
            }
            // The rows written again are numbered after the old ones, and
            // the history count only grows: an episode decided before the
            // rewind finds its fence broken.
            Effect::ResetJournal => tx.reset_journal(&target.id).await?,
            Effect::PurgeIfIdle => {
                // Read under the instance's lock, after this write's own
                // consumption: a row another write queued is still here.
                if tx.inbox(&target.id).await?.is_empty() {
                    row = PendingRow::default();
                    tx.purge(&target.id).await?
                }
            }
            Effect::EntityOperation {
                entity,
                event,
                due_at,
            } => {
                // The entity is created by its first operation; one that
                // exists takes it in its current execution.
                // Not seeded hot as a created instance is: its image would
                // lack the operation queued below; its first batch reads the
                // store.
                let execution = match create(tx, entity.clone(), now).await? {
                    Ok(created) => created.state.execution,
                    Err(()) => match tx.load(&entity.id).await? {
                        Some(loaded) => loaded.state.execution,
                        None => {
                            return Err(StoreError::Write(format!(
                                "entity '{}' could not be created",
                                entity.id
                            )))
                        }
                    },
                };
                // One scheduled for later waits in the inbox, unseen,
                // until its time: the scheduler's pass finds it then.
                applied.comes_due(due_at.filter(|at| *at > now));
                let visible_at = due_at.map_or(now, |at| at.max(now));
                push_inbox(tx, &mut applied, &entity.id, execution, event, visible_at).await?;
                applied.wake.push(entity.id);
            }
        }
    }
    row.flush(tx, &target.id, now).await?;
    if !scheduled.is_empty() {
        let mut rows = Vec::with_capacity(scheduled.len());
        for (task, call) in &scheduled {
            rows.push((*task, to_json(call)?));
        }
        tx.insert_tasks(target, &rows, now).await?;
        applied.tasks = scheduled
            .into_iter()
            .map(|(task, call)| TaskRow {
                instance_id: target.id.clone(),
                execution: target.execution,
                orchestration: target.name.clone(),
                component_digest: target.digest.clone(),
                task,
                call,
                attempt: 0,
            })
            .collect();
    }
    Ok(applied)
}

/// Creates `new` unless an unfinished instance holds its id, or a finished
/// one its starter may not start again ([`start::claim`]: another invoke
/// key's), both `Err(())` with nothing touched; a finished one is purged
/// first: its id begins a new execution, with the same owner. Who owns it
/// is decided here, in the transaction that writes it, never by a read
/// before. The instance as stored.
pub(super) async fn create(
    tx: &mut impl Tx,
    new: NewInstance,
    now: i64,
) -> Result<Result<Loaded, ()>, StoreError> {
    let existing = tx.load(&new.id).await?.map(|l| l.state);
    let new = match start::plan(existing.as_ref(), new) {
        Err(_) => return Ok(Err(())),
        Ok(start::Start::Fresh(new)) => new,
        Ok(start::Start::Again(mut new)) => {
            let by = match &new.parent {
                Some(parent) => tx.caller_of(&parent.id).await?,
                None => new.caller.clone(),
            };
            let owner = tx.caller_of(&new.id).await?;
            match start::claim(owner.as_deref(), by.as_deref()) {
                Ok(caller) => new.caller = caller,
                Err(_) => return Ok(Err(())),
            }
            tx.purge(&new.id).await?;
            new
        }
    };
    let execution = tx.new_execution(&new.id).await?;
    tx.insert_instance(&new, execution, now).await?;
    Ok(Ok(Loaded {
        state: InstanceState {
            id: new.id,
            status: RuntimeStatus::Pending,
            execution,
            parent: new.parent,
            history: Size::default(),
            has_run: false,
        },
        name: new.name,
        digest: new.digest,
        input: new.input,
        created_at: now,
        owner: tx.me().map(str::to_string),
        traceparent: new.traceparent,
        activity_set: new.activity_set,
        start_at: new.start_at,
    }))
}

async fn push_inbox(
    tx: &mut impl Tx,
    applied: &mut Applied,
    id: &str,
    execution: i64,
    event: Event,
    visible_at: i64,
) -> Result<(), StoreError> {
    let row_id = tx
        .push_inbox(id, execution, &to_json(&event)?, visible_at)
        .await?;
    let row = InboxRow {
        id: row_id,
        execution,
        event,
        visible_at,
        parked: false,
    };
    applied.posted.push((id.to_string(), row));
    Ok(())
}

/// Writes journal rows numbered after `journal_len`; returns their size.
async fn append(
    tx: &mut impl Tx,
    id: &str,
    journal_len: u64,
    entries: &[Entry],
    at: i64,
) -> Result<u64, StoreError> {
    let first = count(journal_len).saturating_add(1);
    let mut rows = Vec::with_capacity(entries.len());
    let mut bytes: u64 = 0;
    for (offset, entry) in entries.iter().enumerate() {
        bytes += entry.size();
        rows.push((first + offset as i64, to_json(entry)?));
    }
    tx.append_journal(id, &rows, at).await?;
    Ok(bytes)
}
