//! What travels between the host and its SDK workers: the items sent (an
//! activity, an episode, an entity batch), what a worker says it runs, and
//! what comes back.

use crate::core::failure::TaskOutcome;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::core::sdk_actions;
use crate::core::sdk_entities::{BatchResult, Operation};
use crate::core::sdk_history::HistoryEvent;

/// One activity for a worker to run.
#[derive(Debug, Clone)]
pub struct ActivityItem {
    /// Names this dispatch: the worker echoes it with its answer.
    pub token: String,
    pub name: String,
    /// JSON text.
    pub input: String,
    pub instance_id: String,
    /// The execution of the instance that called it.
    pub execution: i64,
    /// The call's position in its instance: the protocol's task id.
    pub task_id: i32,
}

/// One episode of an SDK orchestration for a worker to run: the history it
/// replays and what is new.
#[derive(Debug, Clone)]
pub struct EpisodeItem {
    pub token: String,
    pub instance_id: String,
    pub execution: i64,
    pub past: Vec<HistoryEvent>,
    pub new: Vec<HistoryEvent>,
}

/// A batch of operations for a worker to run on one entity, in order.
#[derive(Debug, Clone)]
pub struct EntityItem {
    pub token: String,
    /// `@name@key`.
    pub instance_id: String,
    /// JSON text; `None`: the entity has no state yet.
    pub state: Option<String>,
    pub operations: Vec<Operation>,
}

/// What a worker is sent.
#[derive(Debug, Clone)]
pub enum Item {
    Activity(ActivityItem),
    Episode(EpisodeItem),
    Entity(EntityItem),
}

/// What a worker runs, as its work item filters say; `None`: any.
#[derive(Debug, Clone, Default)]
pub struct Runs {
    pub activities: Option<HashSet<String>>,
    /// By name, each with the versions it runs (none listed: any).
    pub orchestrations: Option<HashMap<String, Vec<String>>>,
    pub entities: Option<HashSet<String>>,
    /// How many of each it runs at once.
    pub capacity: Capacity,
}

/// How many items of each kind a worker runs at once, as it declared
/// (`GetWorkItemsRequest.maxConcurrent*WorkItems`); `None`: no bound
/// declared. Items past it would wait inside the worker, where their
/// patience for an answer would run out unstarted: they wait here instead.
#[derive(Debug, Clone, Copy, Default)]
pub struct Capacity {
    pub activities: Option<usize>,
    pub episodes: Option<usize>,
    pub entities: Option<usize>,
}

/// What became of a dispatched activity.
#[derive(Debug)]
pub enum Answer {
    /// The worker ran it: its JSON result, or why it failed.
    Done(TaskOutcome),
    /// The worker gave it back, went away or did not answer in time: it
    /// runs again later.
    Abandoned,
}

/// What became of a dispatched episode.
#[derive(Debug)]
pub enum EpisodeAnswer {
    Done(sdk_actions::Answer),
    /// Given back, or its worker went away or did not answer in time: the
    /// episode runs again.
    Abandoned,
}

/// What became of a dispatched entity batch.
#[derive(Debug)]
pub enum EntityAnswer {
    Done(BatchResult),
    /// Given back, or its worker went away or did not answer in time: the
    /// operations stay queued and run again.
    Abandoned,
}

/// What a worker sent back for an item.
#[derive(Debug)]
pub enum Reply {
    Activity(TaskOutcome),
    Episode(sdk_actions::Answer),
    Entity(BatchResult),
}

/// How long waits last: for a worker to connect, and for its answer.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    /// How long an activity no component serves waits for a worker to
    /// connect before it fails: zero unless the gRPC endpoint is served.
    pub for_a_worker: Duration,
    /// How long a worker has to answer an item before it is taken back.
    pub for_an_answer: Duration,
}
