//! The durable engine's rows and commands as the store carries them: what
//! an episode reads (an instance, its journal and inbox), what the committer
//! is asked to write or read, and what it answers. Types only, so the files
//! that read, decide and write can all use them without using each other.

use crate::core::failure::TaskOutcome;
use std::sync::Arc;

use serde::Serialize;

use super::error::StoreError;
use super::run_writes::{RunWrite, RunWritten};
use crate::core::effects::Effect;
use crate::core::instance::{InstanceState, NewInstance};
use crate::core::journal::{Call, Entry, Event};
use crate::core::lifecycle::arrivals::Arrival;
pub use crate::core::lifecycle::in_hand::Arriving;
use crate::core::lifecycle::task_done::Attempt;
use crate::core::lifecycle::Change;
use crate::core::lifecycle::{Operation, TaskFate};
use crate::core::limits::{LimitError, Limits};

/// A task the worker must run.
#[derive(Debug, Clone)]
pub struct TaskRow {
    pub instance_id: String,
    /// The execution that scheduled it; its result is dropped if the
    /// instance has moved on.
    pub execution: i64,
    /// The orchestration of the instance, whose component runs its activities.
    pub orchestration: String,
    /// The component version the instance runs on.
    pub component_digest: String,
    pub task: u32,
    pub call: Call,
    pub attempt: u32,
}

/// The instance a decision is about.
#[derive(Debug, Clone)]
pub struct Target {
    pub id: String,
    pub execution: i64,
    /// Its orchestration and component version, which run its tasks.
    pub name: String,
    pub digest: String,
}

/// What the written effects ask the dispatcher to do.
#[derive(Debug, Default)]
pub struct Applied {
    /// Tasks scheduled, due now.
    pub tasks: Vec<TaskRow>,
    /// Instances with something new in their inbox, or just created.
    pub wake: Vec<String>,
    /// Inbox rows written, by instance: the committer hands them to the
    /// hot instances once committed, then empties this.
    pub posted: Vec<(String, InboxRow)>,
    /// Instances given something new whose owner may be another host: on a
    /// shared hub, the others are told (see [`super::postgres`]'s shared hub).
    pub news: Vec<String>,
    /// Instances this write created, as stored: the host that runs them
    /// starts from these instead of reading them back.
    pub created: Vec<Loaded>,
    /// The earliest time (ms) something this write armed for later comes
    /// due: a timer, a retry's next attempt, a row unseen until then, a
    /// start for later. The scheduler sleeps until the next due time it
    /// read; this wakes it sooner when sooner is due.
    pub due: Option<i64>,
}

impl Applied {
    /// Something this write armed comes due at `at` (ms).
    pub fn comes_due(&mut self, at: Option<i64>) {
        self.due = match (self.due, at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// One row of an instance's inbox.
#[derive(Debug, Clone, PartialEq)]
pub struct InboxRow {
    pub id: i64,
    /// The execution it is addressed to.
    pub execution: i64,
    pub event: Event,
    /// When it becomes visible to the code (a durable timer's firing time).
    pub visible_at: i64,
    /// A raised event no code waited for yet: offered to each episode, but
    /// it does not make the instance ready by itself.
    pub parked: bool,
}

impl InboxRow {
    /// A row as stored: its event as JSON, `parked` a 0/1 flag.
    pub(super) fn stored(
        id: i64,
        execution: i64,
        event: &str,
        visible_at: i64,
        parked: i64,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            id,
            execution,
            event: from_json(event, "inbox event")?,
            visible_at,
            parked: parked != 0,
        })
    }

    pub fn arrival(&self) -> Arrival {
        Arrival {
            row: self.id,
            execution: self.execution,
            event: self.event.clone(),
            visible_at: self.visible_at,
            parked: self.parked,
        }
    }
}

/// An instance as a cold episode starts from.
#[derive(Debug)]
pub struct Image {
    pub loaded: Loaded,
    pub journal: Vec<(Entry, i64)>,
    pub inbox: Vec<InboxRow>,
}

pub(super) fn to_json<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

pub(super) fn from_json<T: serde::de::DeserializeOwned>(
    text: &str,
    what: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

/// An instance as the committer's decisions read it.
#[derive(Debug, Clone)]
pub struct Loaded {
    pub state: InstanceState,
    pub name: String,
    pub digest: String,
    pub input: String,
    pub created_at: i64,
    /// The host that runs its episodes, on a hub shared by several hosts
    /// (always `None` on SQLite, where one process serves the hub).
    pub owner: Option<String>,
    /// The trace its episodes continue.
    pub traceparent: Option<String>,
    /// The activity set it pinned (its sub-orchestrations share it).
    pub activity_set: Option<String>,
    /// Started for later (Unix ms): no episode before then.
    pub start_at: Option<i64>,
}

/// One write, decided inside the transaction that commits it.
#[derive(Clone)]
pub enum Write {
    /// An episode's effects, applied only onto the state the episode ran
    /// on ([`crate::core::fence::admits_episode`]): its execution, still active, still
    /// this host's, with the journal length it replayed.
    Episode {
        target: Target,
        replayed: u64,
        effects: Vec<Effect>,
    },
    TaskDone {
        instance: String,
        attempt: Attempt,
        result: TaskOutcome,
        limits: Arc<Limits>,
    },
    /// What arrived for an instance (a task's result, a raised event) with
    /// the episode the instance ran on it before it was stored: one write
    /// where there would be two (the arrival into the inbox, then the
    /// episode taking it out), so one commit per step. Written whole only
    /// if the arrival is one the instance takes now (the task waits for
    /// this attempt and the result is delivered; the event is accepted)
    /// and the episode's fence holds: the arrival then never enters the
    /// inbox, `effects` journal it. Otherwise the arrival alone is written,
    /// exactly as [`Write::TaskDone`] or [`Write::Raise`] would write it,
    /// and the episode is dropped.
    ArrivalAndEpisode {
        arriving: Arriving,
        target: Target,
        replayed: u64,
        effects: Vec<Effect>,
        limits: Arc<Limits>,
    },
    Start(NewInstance),
    Raise {
        instance: String,
        name: String,
        payload: String,
        limits: Arc<Limits>,
        /// Unseen until then (ms): an operation signalled for later.
        due_at: Option<i64>,
    },
    Manage {
        instance: String,
        op: Operation,
    },
    /// A write of the agent run path (see [`super::run_writes`]).
    Run(RunWrite),
}

/// Effects (or stream rows) a write may carry and still be committed on a
/// caller's thread that found the writer idle: past that, it could hold
/// the caller's runtime thread for milliseconds.
const LIGHT_ROWS: usize = 64;

impl Write {
    /// Whether its commit is short enough to run on a caller's thread
    /// (see [`super::sqlite`]'s writer). Management operations are not:
    /// a purge deletes a whole history.
    pub(super) fn light(&self) -> bool {
        match self {
            Write::Episode { effects, .. } | Write::ArrivalAndEpisode { effects, .. } => {
                effects.len() <= LIGHT_ROWS
            }
            Write::Run(RunWrite::Stream { rows, .. }) => rows.len() <= LIGHT_ROWS,
            Write::Manage { .. } => false,
            Write::TaskDone { .. } | Write::Start(_) | Write::Raise { .. } | Write::Run(_) => true,
        }
    }
}

/// A read on the writer's connection, answered once the writes queued
/// before it are committed: it sees every write acknowledged before it, and
/// an episode's reads cost no hand-off to another connection.
#[derive(Debug)]
pub enum Read {
    /// State, journal and inbox at one moment.
    Image(String),
}

#[derive(Debug)]
pub enum ReadOut {
    Image(Option<Image>),
}

/// What a write did.
#[derive(Debug)]
pub enum Written {
    /// `None` when the episode no longer applied (terminated, suspended or
    /// restarted meanwhile): nothing was written.
    Episode(Option<Applied>),
    TaskDone(TaskFate, Applied),
    ArrivalAndEpisode(ArrivalWritten),
    /// `None` when the id is held by an unfinished instance.
    Start(Option<Applied>),
    Raise(Result<Change, LimitError>, Applied),
    Manage(Change, Applied),
    Run(RunWritten),
}

/// What became of a [`Write::ArrivalAndEpisode`].
#[derive(Debug)]
pub enum ArrivalWritten {
    /// The arrival and the episode run on it are committed together.
    WithEpisode(Applied),
    /// The result alone was written, as a [`Write::TaskDone`] would have.
    Result(TaskFate, Applied),
    /// The event alone was written, as a [`Write::Raise`] would have.
    Event(Result<Change, LimitError>, Applied),
}

impl Written {
    pub(super) fn applied(&self) -> Option<&Applied> {
        match self {
            Written::Episode(applied) | Written::Start(applied) => applied.as_ref(),
            Written::TaskDone(_, applied)
            | Written::ArrivalAndEpisode(
                ArrivalWritten::WithEpisode(applied)
                | ArrivalWritten::Result(_, applied)
                | ArrivalWritten::Event(_, applied),
            )
            | Written::Raise(_, applied)
            | Written::Manage(_, applied) => Some(applied),
            Written::Run(_) => None,
        }
    }

    pub(super) fn applied_mut(&mut self) -> Option<&mut Applied> {
        match self {
            Written::Episode(applied) | Written::Start(applied) => applied.as_mut(),
            Written::TaskDone(_, applied)
            | Written::ArrivalAndEpisode(
                ArrivalWritten::WithEpisode(applied)
                | ArrivalWritten::Result(_, applied)
                | ArrivalWritten::Event(_, applied),
            )
            | Written::Raise(_, applied)
            | Written::Manage(_, applied) => Some(applied),
            Written::Run(_) => None,
        }
    }
}
