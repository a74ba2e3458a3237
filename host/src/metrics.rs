//! The host's metrics, served at `/metrics` in the Prometheus text format.
//!
//! Every metric name and label is written here and nowhere else, so the set
//! an operator scrapes is one table to read and its cardinality is bounded
//! by construction: labels are agent, tool, activity and orchestration names
//! (bounded by the components loaded), route templates (not paths), methods,
//! status codes and outcomes — never an instance, session or run id.
//!
//! The `metrics` facade is process-wide, as `tracing` is: a layer records
//! without being handed a registry, and recording costs an atomic add when
//! nothing is installed. The exporter is installed once per process (a
//! second embedded host shares it).

use std::sync::OnceLock;
use std::time::Duration;

use ::metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Renders what has been recorded; `None` when the exporter could not be
/// installed (another recorder was installed first by an embedding program).
pub(crate) fn render() -> Option<String> {
    runtime_queue();
    handle().map(PrometheusHandle::render)
}

/// The async runtime's queue, sampled when scraped. Every task woken from
/// outside the runtime (each answer of the store's writer thread) waits
/// behind what that queue holds: a queue that stays long means every
/// request is slow, whatever it asks (see `durable::fan_out`).
fn runtime_queue() {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let metrics = runtime.metrics();
        gauge!(RUNTIME_QUEUED).set(metrics.global_queue_depth() as f64);
        gauge!(RUNTIME_TASKS).set(metrics.num_alive_tasks() as f64);
    }
}

/// Installs the exporter if no host in this process has yet.
pub(crate) fn install() {
    let _ = handle();
}

fn handle() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            // Latencies from a millisecond to a few minutes; batch sizes to
            // the committer's largest batch.
            let seconds = [
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                30.0, 60.0, 120.0, 300.0,
            ];
            let sizes = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &seconds)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(COMMIT_BATCH.into()), &sizes)
                });
            let recorder = match builder {
                Ok(builder) => builder.build_recorder(),
                Err(e) => {
                    tracing::warn!(error = %e, "metrics are not recorded");
                    return None;
                }
            };
            let handle = recorder.handle();
            match ::metrics::set_global_recorder(recorder) {
                Ok(()) => {
                    describe();
                    at_zero();
                    keep_up(handle.clone());
                    Some(handle)
                }
                Err(_) => {
                    tracing::warn!("another metrics recorder is installed in this process: /metrics answers 404");
                    None
                }
            }
        })
        .as_ref()
}

/// Histogram samples are queued until the recorder's upkeep folds them in:
/// without it, a host nobody scrapes would hold every sample it ever took.
/// A thread of its own (a few microseconds every five seconds), so that it
/// runs whether or not a tokio runtime is there.
fn keep_up(handle: PrometheusHandle) {
    let spawned = std::thread::Builder::new()
        .name("metrics-upkeep".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_secs(5));
            handle.run_upkeep();
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no metrics upkeep thread: histograms grow until scraped");
    }
}

const RUNS: &str = "agenthost_runs_total";
const MODEL_CALL: &str = "agenthost_model_call_seconds";
const MODEL_TOKENS: &str = "agenthost_model_tokens_total";
const TOOL_CALL: &str = "agenthost_tool_call_seconds";
const ACTIVITY: &str = "agenthost_activity_seconds";
const APPROVALS_PENDING: &str = "agenthost_approvals_pending";
const ORCHESTRATIONS: &str = "agenthost_orchestrations_total";
const EPISODES: &str = "agenthost_episodes_total";
const COMMIT_BATCH: &str = "agenthost_journal_commit_batch_size";
const COMMIT: &str = "agenthost_journal_commit_seconds";
const HOT_INSTANCES: &str = "agenthost_hot_instances";
const INBOX_EVENTS: &str = "agenthost_inbox_events";
const WAITING_INSTANCES: &str = "agenthost_waiting_instances";
const WAITING_RUNS: &str = "agenthost_waiting_callers";
const LEASE_RENEWALS: &str = "agenthost_lease_renewals_total";
const TAKE_OVERS: &str = "agenthost_take_overs_total";
const INSTANCE_LOADS: &str = "agenthost_instance_loads_total";
const STREAM_FOLLOWERS: &str = "agenthost_stream_followers";
const COMPONENT_LOADS: &str = "agenthost_component_loads_total";
const COMPONENT_LOAD: &str = "agenthost_component_load_seconds";
const HTTP_REQUESTS: &str = "agenthost_http_requests_total";
const HTTP_REQUEST: &str = "agenthost_http_request_seconds";
const TASKS_UNREADABLE: &str = "agenthost_tasks_unreadable_total";
const REPLAY_CHECKS: &str = "agenthost_replay_checked_instances_total";
const RUNTIME_QUEUED: &str = "agenthost_runtime_queued_tasks";
const RUNTIME_TASKS: &str = "agenthost_runtime_tasks";

fn describe() {
    use ::metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_counter!(
        RUNS,
        "Agent runs ended, by agent and outcome (completed, failed)"
    );
    describe_histogram!(MODEL_CALL, Unit::Seconds, "Model requests, by agent");
    describe_counter!(
        MODEL_TOKENS,
        "Model tokens, by agent and kind (prompt, completion)"
    );
    describe_histogram!(
        TOOL_CALL,
        Unit::Seconds,
        "Tool calls of agents, by tool and outcome"
    );
    describe_histogram!(
        ACTIVITY,
        Unit::Seconds,
        "Activities of orchestrations, by activity and outcome"
    );
    describe_gauge!(
        APPROVALS_PENDING,
        "Tool calls waiting for a human's decision, by task hub (read from the store when scraped)"
    );
    describe_counter!(
        ORCHESTRATIONS,
        "Orchestration instances, by orchestration and event (started, completed, failed)"
    );
    describe_counter!(
        EPISODES,
        "Orchestration episodes committed, by orchestration"
    );
    describe_histogram!(COMMIT_BATCH, "Writes in one journal commit batch");
    describe_histogram!(COMMIT, Unit::Seconds, "One journal commit batch");
    describe_gauge!(
        HOT_INSTANCES,
        "Orchestration instances kept in memory between episodes, by task hub"
    );
    describe_gauge!(
        INBOX_EVENTS,
        "Events in the inboxes of hot instances not yet taken by their code: timers not yet due, \
         events raised before the code waits for them, results arrived since the last episode; by task hub"
    );
    describe_gauge!(
        WAITING_INSTANCES,
        "Running orchestration instances of the task hub, each waiting for an event, a timer or \
         a task, by task hub (read from the store when scraped)"
    );
    describe_gauge!(WAITING_RUNS, "HTTP callers waiting for a run to end");
    describe_counter!(
        INSTANCE_LOADS,
        "Orchestration instances read whole from the store (state, journal and inbox) for an \
         episode, because no image of them was held in memory"
    );
    describe_counter!(
        LEASE_RENEWALS,
        "Renewals of this host's lease on a shared task hub"
    );
    describe_counter!(TAKE_OVERS, "Work taken over from a host whose lease lapsed");
    describe_gauge!(
        STREAM_FOLLOWERS,
        "Readers following a run's streamed answer"
    );
    describe_counter!(
        COMPONENT_LOADS,
        "Component loads, by outcome (loaded, failed)"
    );
    describe_histogram!(
        COMPONENT_LOAD,
        Unit::Seconds,
        "Loading (compiling or reading from cache) one component"
    );
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests, by route template, method and status"
    );
    describe_histogram!(
        HTTP_REQUEST,
        Unit::Seconds,
        "HTTP requests, by route template"
    );
    describe_counter!(
        TASKS_UNREADABLE,
        "Due tasks whose stored call could not be read, each failed (its instance sees why), \
         by orchestration"
    );
    describe_gauge!(
        RUNTIME_QUEUED,
        "Tasks ready to run in the async runtime's shared queue, behind which every task woken \
         from outside the runtime waits (sampled when scraped)"
    );
    describe_gauge!(
        RUNTIME_TASKS,
        "Tasks alive in the async runtime, running, ready or waiting (sampled when scraped)"
    );
    describe_counter!(
        REPLAY_CHECKS,
        "Instances a new component version was replayed against, by result \
         (compatible, divergent, upgraded)"
    );
}

/// Series that would otherwise appear only at their first sample, exported
/// at zero from the start: a dashboard or an alert on them (`rate()`, "no
/// take-over in the last hour") then reads 0, not "no data".
fn at_zero() {
    counter!(LEASE_RENEWALS).absolute(0);
    counter!(TAKE_OVERS).absolute(0);
    counter!(INSTANCE_LOADS).absolute(0);
    counter!(TASKS_UNREADABLE).absolute(0);
    for result in ["compatible", "divergent", "upgraded"] {
        counter!(REPLAY_CHECKS, "result" => result).absolute(0);
    }
    gauge!(STREAM_FOLLOWERS).set(0.0);
    gauge!(WAITING_RUNS).set(0.0);
}

/// Registers the activity-time series of each activity a loaded component
/// declares, empty until its first call (a histogram is labelled by
/// activity, so none can be exported before the activities are known).
pub(crate) fn activities_served<'a>(names: impl IntoIterator<Item = &'a str>) {
    for name in names {
        for ok in [true, false] {
            let _ = histogram!(ACTIVITY, "activity" => name.to_string(), "outcome" => outcome(ok));
        }
    }
}

pub(crate) fn run_ended(agent: &str, completed: bool) {
    let outcome = if completed { "completed" } else { "failed" };
    counter!(RUNS, "agent" => agent.to_string(), "outcome" => outcome).increment(1);
}

pub(crate) fn model_call(agent: &str, took: Duration, prompt: u64, completion: u64) {
    histogram!(MODEL_CALL, "agent" => agent.to_string()).record(took.as_secs_f64());
    counter!(MODEL_TOKENS, "agent" => agent.to_string(), "kind" => "prompt").increment(prompt);
    counter!(MODEL_TOKENS, "agent" => agent.to_string(), "kind" => "completion")
        .increment(completion);
}

fn outcome(ok: bool) -> &'static str {
    if ok {
        "ok"
    } else {
        "failed"
    }
}

pub(crate) fn tool_call(tool: &str, took: Duration, ok: bool) {
    histogram!(TOOL_CALL, "tool" => tool.to_string(), "outcome" => outcome(ok))
        .record(took.as_secs_f64());
}

pub(crate) fn activity(name: &str, took: Duration, ok: bool) {
    histogram!(ACTIVITY, "activity" => name.to_string(), "outcome" => outcome(ok))
        .record(took.as_secs_f64());
}

pub(crate) fn approvals_pending(hub: &str, count: i64) {
    gauge!(APPROVALS_PENDING, "taskhub" => hub.to_string()).set(count as f64);
}

/// `event`: started, completed, failed, terminated.
pub(crate) fn orchestration(name: &str, event: &'static str) {
    counter!(ORCHESTRATIONS, "orchestration" => name.to_string(), "event" => event).increment(1);
}

/// `result`: compatible, divergent, upgraded (an instance counted
/// compatible is counted upgraded too once it moves).
pub(crate) fn replay_checked(result: &'static str) {
    counter!(REPLAY_CHECKS, "result" => result).increment(1);
}

pub(crate) fn episode(orchestration: &str) {
    counter!(EPISODES, "orchestration" => orchestration.to_string()).increment(1);
}

pub(crate) fn commit(batch: usize, took: Duration) {
    histogram!(COMMIT_BATCH).record(batch as f64);
    histogram!(COMMIT).record(took.as_secs_f64());
}

/// The hot instances held, and the inbox rows their images hold.
pub(crate) fn hot_instances(hub: &str, count: usize, inbox_events: usize) {
    gauge!(HOT_INSTANCES, "taskhub" => hub.to_string()).set(count as f64);
    gauge!(INBOX_EVENTS, "taskhub" => hub.to_string()).set(inbox_events as f64);
}

/// An instance read whole from the store for an episode (no hot image).
pub(crate) fn instance_loaded() {
    counter!(INSTANCE_LOADS).increment(1);
}

pub(crate) fn waiting_instances(hub: &str, count: i64) {
    gauge!(WAITING_INSTANCES, "taskhub" => hub.to_string()).set(count as f64);
}

/// Counts one waiting caller while it lives.
pub(crate) struct Gauged(&'static str);

impl Drop for Gauged {
    fn drop(&mut self) {
        gauge!(self.0).decrement(1.0);
    }
}

pub(crate) fn waiting_caller() -> Gauged {
    gauge!(WAITING_RUNS).increment(1.0);
    Gauged(WAITING_RUNS)
}

pub(crate) fn stream_follower() -> Gauged {
    gauge!(STREAM_FOLLOWERS).increment(1.0);
    Gauged(STREAM_FOLLOWERS)
}

pub(crate) fn lease_renewed() {
    counter!(LEASE_RENEWALS).increment(1);
}

pub(crate) fn taken_over(count: u64) {
    counter!(TAKE_OVERS).increment(count);
}

pub(crate) fn component_loaded(took: Duration, ok: bool) {
    let outcome = if ok { "loaded" } else { "failed" };
    counter!(COMPONENT_LOADS, "outcome" => outcome).increment(1);
    if ok {
        histogram!(COMPONENT_LOAD).record(took.as_secs_f64());
    }
}

pub(crate) fn http_request(route: &str, method: &str, status: u16, took: Duration) {
    counter!(HTTP_REQUESTS, "route" => route.to_string(), "method" => method.to_string(), "status" => status.to_string())
        .increment(1);
    histogram!(HTTP_REQUEST, "route" => route.to_string()).record(took.as_secs_f64());
}

/// A due task whose stored call could not be read, failed instead of run.
pub(crate) fn task_unreadable(orchestration: &str) {
    counter!(TASKS_UNREADABLE, "orchestration" => orchestration.to_string()).increment(1);
}
