//! After a worker's kill -9 on a shared hub, is a model call whose answer
//! was committed ever asked again (issue 53, point 6)? Checked the way
//! Jepsen checks a history: every request each worker's model received is
//! logged with the conversation it carries and the answer it got (unique:
//! `a{serial}`), a poller records when each run's end is first seen
//! committed, and afterwards the store (runs, messages, journal) says which
//! answer each turn committed. Each worker has a fake model of its own, so
//! a request is known to come from the worker that died or the one that
//! lived.
//!
//! What may be asked twice is a turn whose answer existed only in the dead
//! worker's memory: asked before the kill, its answer not committed (in
//! flight at the model, or answered and not yet stored). Anything else
//! asked again is a committed call repeated, or a repeat the kill does not
//! explain. PostgreSQL only (several hosts on one hub).
//!
//! `AGENTHOST_TAKEOVER_SEED` chooses the kill's moment, the worker killed
//! and the model's delays; `AGENTHOST_TAKEOVER_INSTANCES` and
//! `AGENTHOST_TAKEOVER_RUNS` the load (20 `chaining` instances and 40
//! `writer` runs on 20 sessions; issue 53 reported 60 and 120), and
//! `AGENTHOST_TAKEOVER_ANSWER_MS` the model's slowest answer (60 ms).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::durable::{start, wait_for_within};
use crate::support::fake_model::Responder;
use crate::support::host::{hub_for, test_store, Host};
use crate::support::{client, FakeModel, HostBuilder, Reply};
use store::{check_journal, check_messages, observe_commits, read_runs, wait_runs_ended};

mod store;

/// The load: `chaining` instances and `writer` runs, these on half as
/// many sessions (two runs each, the second queued behind the first: a
/// session taken over may hold a run not begun).
#[derive(Clone, Copy)]
struct Sizes {
    instances: usize,
    runs: usize,
    /// The model's slowest answer (the quickest takes a fifth of it).
    longest_answer_ms: u64,
}

impl Sizes {
    fn from_env() -> Self {
        let var = |name: &str, default: usize| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        Self {
            instances: var("AGENTHOST_TAKEOVER_INSTANCES", 20),
            runs: var("AGENTHOST_TAKEOVER_RUNS", 40),
            longest_answer_ms: var("AGENTHOST_TAKEOVER_ANSWER_MS", 60) as u64,
        }
    }

    fn turns(self) -> usize {
        self.runs + 2 * self.instances
    }
}

const LEASE: &str = "2s";
/// What `chaining` asks first (the same for every instance), and how its
/// second message begins (followed by the first answer).
const FIRST: &str = "Write a concise inspirational sentence about learning.";
const IMPROVE: &str = "Improve this further while keeping it under 25 words: ";

/// One request a worker's model received.
#[derive(Debug, Clone)]
struct Asked {
    /// Its answer is `a{serial}`: unique across both models.
    serial: usize,
    /// Which worker asked (each has its own model).
    worker: usize,
    at_ms: i64,
    /// When its answer was sent (arrival plus the delay chosen for it).
    answered_ms: i64,
    /// The last user message: the turn it asks.
    question: String,
}

type Log = Arc<Mutex<Vec<Asked>>>;

/// A writer run queued: its correlation id and message.
type QueuedRun = (String, String);

/// A run as stored, with when its end was first seen committed.
#[derive(Debug)]
struct StoredRun {
    correlation_id: String,
    session_id: String,
    message: String,
    status: String,
    response: Option<String>,
    /// The writer's clock when it wrote the run's end (taken off its queue).
    updated_ms: i64,
    seen_committed_ms: Option<i64>,
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_worker_is_killed_no_model_call_whose_answer_was_committed_is_asked_again() {
    let Some(url) = test_store() else {
        return; // SQLite: one host per file.
    };
    let seed: u64 = std::env::var("AGENTHOST_TAKEOVER_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(53);
    let dir = tempfile::tempdir().unwrap();
    let log: Log = Arc::default();
    let serials = Arc::new(AtomicUsize::new(0));
    let sizes = Sizes::from_env();
    let models = [FakeModel::start().await, FakeModel::start().await];
    for (worker, model) in models.iter().enumerate() {
        let longest = sizes.longest_answer_ms;
        model.respond_with(responder(
            worker,
            seed,
            longest,
            log.clone(),
            serials.clone(),
        ));
    }
    let builder = |model: &FakeModel| {
        HostBuilder::new(dir.path())
            .components(&["writer", "chaining"])
            .openai(model, "sk")
            .arg("--lease")
            .arg(LEASE)
    };
    let mut workers = vec![
        builder(&models[0]).start_worker(),
        builder(&models[1]).start_worker(),
    ];
    let fronts = [
        builder(&models[0]).arg("--no-worker").start(),
        builder(&models[0]).arg("--no-worker").start(),
    ];
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&url)
        .await
        .unwrap();
    let schema = format!("\"taskhub_{}\"", hub_for(dir.path()));
    let committed: Arc<Mutex<HashMap<String, i64>>> = Arc::default();
    let observing = Arc::new(AtomicBool::new(true));
    let observer = tokio::spawn(observe_commits(
        pool.clone(),
        schema.clone(),
        committed.clone(),
        observing.clone(),
    ));

    // The kill comes once the models got `kill_after` requests, on a worker
    // with a request in flight.
    let turns = sizes.turns();
    let kill_after = turns / 10 + (mix(seed) % (turns as u64 * 4 / 10)) as usize;
    let victim_choice = (mix(seed ^ 0x5eed) % 2) as usize;
    let (submitted, killed) = tokio::join!(
        submit(&fronts, sizes),
        kill_when(&mut workers, &log, kill_after, victim_choice)
    );
    let (instances, runs) = submitted;
    let (victim, kill_ms) = killed;
    let killed_at = Instant::now();
    let survivor = 1 - victim;

    for (n, id) in instances.iter().enumerate() {
        let done = wait_for_within(
            &fronts[n % 2],
            id,
            &["Completed", "Failed", "Terminated"],
            Duration::from_secs(120),
        )
        .await;
        assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    }
    wait_runs_ended(&pool, &schema, Duration::from_secs(120)).await;
    let all_done = killed_at.elapsed();
    // The last commits are seen before the poller stops.
    tokio::time::sleep(Duration::from_millis(100)).await;
    observing.store(false, Ordering::Relaxed);
    observer.await.unwrap();

    let seen = committed.lock().unwrap().clone();
    let stored = read_runs(&pool, &schema, &seen).await;
    check_journal(&pool, &schema, &instances, &runs, &stored).await;
    check_messages(&pool, &schema, &stored).await;

    // Which request each committed answer came from.
    let asked = log.lock().unwrap().clone();
    let by_serial: HashMap<usize, &Asked> = asked.iter().map(|a| (a.serial, a)).collect();
    let mut committed_serial: HashMap<usize, &StoredRun> = HashMap::new();
    for run in stored.values() {
        let response = run.response.as_deref().unwrap_or_default();
        let serial = serial_of(response)
            .unwrap_or_else(|| panic!("{} answered {response:?}", run.correlation_id));
        let request = by_serial
            .get(&serial)
            .unwrap_or_else(|| panic!("{}: no request got {response}", run.correlation_id));
        assert_eq!(
            request.question, run.message,
            "{} committed the answer to another turn",
            run.correlation_id
        );
        assert!(
            committed_serial.insert(serial, run).is_none(),
            "{response} committed by two runs"
        );
    }
    let found = classify(&asked, &stored, &committed_serial, victim, kill_ms);
    let orphans =
        found.in_flight_at_model.len() + found.answered_not_stored.len() + found.unexplained.len();
    assert_eq!(asked.len(), turns + orphans, "one commit per turn");
    assert!(
        !found.in_flight_at_model.is_empty() || !found.answered_not_stored.is_empty(),
        "the kill came with a model call in flight on the killed worker"
    );
    let dead_committed = committed_serial
        .keys()
        .filter(|s| by_serial[s].worker == victim)
        .count();
    // How long an answer lives only in memory: from the model's answer to
    // the writer taking its run's end, and from there to the end seen
    // committed (the poller looks every 20 ms).
    let quantiles = |mut spans: Vec<i64>| {
        spans.sort_unstable();
        let at = |q: usize| spans.get((spans.len() * q / 100).min(spans.len().saturating_sub(1)));
        format!(
            "p50 {} ms, p90 {} ms, max {} ms",
            at(50).copied().unwrap_or(0),
            at(90).copied().unwrap_or(0),
            at(100).copied().unwrap_or(0)
        )
    };
    let to_writer = quantiles(
        committed_serial
            .iter()
            .map(|(serial, run)| run.updated_ms - by_serial[serial].answered_ms)
            .collect(),
    );
    let to_seen = quantiles(
        committed_serial
            .values()
            .filter_map(|run| Some(run.seen_committed_ms? - run.updated_ms))
            .collect(),
    );
    let gaps: Vec<i64> = found
        .answered_not_stored
        .iter()
        .map(|a| kill_ms - a.answered_ms)
        .collect();
    eprintln!(
        "take-over (seed {seed}): {} model requests for {turns} turns; worker {victim} killed at \
         request {kill_after}+ having committed {dead_committed} turns; asked again: {} in flight \
         at the model, {} answered but not stored (answered {gaps:?} ms before the kill), {} \
         unexplained; the survivor asked {}; all done {all_done:?} after the kill; from an answer to \
         the writer taking its end: {to_writer}; from there to seen committed: {to_seen}",
        asked.len(),
        found.in_flight_at_model.len(),
        found.answered_not_stored.len(),
        found.unexplained.len(),
        asked.iter().filter(|a| a.worker == survivor).count(),
    );
    assert!(
        found.violations.is_empty(),
        "model calls asked after their answer was committed: {:#?}",
        found.violations
    );
    assert!(
        found.unexplained.is_empty(),
        "asked again though not in flight on the killed worker: {:#?}",
        found.unexplained
    );
    drop(pool);
}

/// What the history of requests shows, request by request.
#[derive(Default)]
struct Classified {
    /// Asked after its turn's answer was seen committed.
    violations: Vec<String>,
    /// Not committed, and not explained by the kill.
    unexplained: Vec<String>,
    /// Not committed: asked by the killed worker, answered after the kill.
    in_flight_at_model: Vec<Asked>,
    /// Not committed: asked by the killed worker and answered before the
    /// kill, the answer in its memory only.
    answered_not_stored: Vec<Asked>,
}

/// Sorts every request: committed (one per turn), or an orphan the kill
/// must explain; none may be asked after its turn's answer was seen
/// committed, and no worker may ask one turn twice.
fn classify(
    asked: &[Asked],
    stored: &BTreeMap<String, StoredRun>,
    committed_serial: &HashMap<usize, &StoredRun>,
    victim: usize,
    kill_ms: i64,
) -> Classified {
    let by_message: HashMap<&str, &StoredRun> = stored
        .values()
        .filter(|r| r.message != FIRST)
        .map(|r| (r.message.as_str(), r))
        .collect();
    let firsts: Vec<&StoredRun> = stored.values().filter(|r| r.message == FIRST).collect();
    let mut found = Classified::default();
    let mut asked_by: HashMap<(&str, usize), usize> = HashMap::new();
    for request in asked {
        let committed_here = committed_serial.contains_key(&request.serial);
        let after_commit = if request.question == FIRST {
            // `chaining`'s first turn is the same words for every instance:
            // a request for it comes after a commit only if every instance's
            // first turn was committed by then.
            !committed_here
                && firsts
                    .iter()
                    .all(|r| r.seen_committed_ms.is_some_and(|at| at < request.at_ms))
        } else {
            let turn = by_message
                .get(request.question.as_str())
                .unwrap_or_else(|| panic!("a request for no stored turn: {request:?}"));
            *asked_by
                .entry((request.question.as_str(), request.worker))
                .or_default() += 1;
            turn.seen_committed_ms.is_some_and(|at| at < request.at_ms)
        };
        if after_commit {
            found.violations.push(format!(
                "{:?} (worker {}) asked at {} after its answer was committed",
                request.question, request.worker, request.at_ms
            ));
        }
        if committed_here {
            continue;
        }
        // Whatever the killed worker asked, it sent before it died (one may
        // reach the model a moment after the kill).
        if request.worker != victim {
            found.unexplained.push(format!("{request:?}"));
        } else if request.answered_ms >= kill_ms {
            found.in_flight_at_model.push(request.clone());
        } else {
            found.answered_not_stored.push(request.clone());
        }
    }
    for ((question, worker), times) in asked_by {
        if times > 1 {
            found.unexplained.push(format!(
                "{question:?} asked {times} times by worker {worker}"
            ));
        }
    }
    found
}

/// A model that answers `a{serial}` after a seeded delay (from a fifth of
/// `longest` ms to `longest`), logging each request as from `worker`.
fn responder(
    worker: usize,
    seed: u64,
    longest: u64,
    log: Log,
    serials: Arc<AtomicUsize>,
) -> Responder {
    Arc::new(move |request| {
        let serial = serials.fetch_add(1, Ordering::SeqCst);
        let shortest = longest / 5;
        let spread = mix(seed ^ (serial as u64 + 1)) % (longest - shortest).max(1);
        let delay = i64::try_from(shortest + spread).unwrap_or(i64::MAX);
        log.lock().unwrap().push(Asked {
            serial,
            worker,
            at_ms: request.at_ms,
            answered_ms: request.at_ms + delay,
            question: request.last_user_message(),
        });
        Reply::Delay(
            Duration::from_millis(delay as u64),
            Box::new(Reply::Text(format!("a{serial}"))),
        )
    })
}

/// The serial in an answer `a{serial}`.
fn serial_of(answer: &str) -> Option<usize> {
    answer.strip_prefix('a')?.parse().ok()
}

/// splitmix64: seeded choices without a generator to carry around.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Starts the `chaining` instances and queues the writer runs, alternately
/// through the two fronts, 16 requests at a time (the load peaks while the
/// kill comes); returns the instance ids and each run's correlation id with
/// its message.
async fn submit(fronts: &[Host; 2], sizes: Sizes) -> (Vec<String>, Vec<QueuedRun>) {
    use futures::StreamExt;
    let items = sizes.runs.max(sizes.instances);
    let submitted: Vec<(Option<String>, Option<QueuedRun>)> = futures::stream::iter(0..items)
        .map(|i| async move {
            let front = &fronts[i % 2];
            let instance = match i < sizes.instances {
                true => Some(start(front, "chaining", &json!(null)).await),
                false => None,
            };
            let run = match i < sizes.runs {
                true => Some(queue_run(front, i).await),
                false => None,
            };
            (instance, run)
        })
        .buffered(16)
        .collect()
        .await;
    let (instances, runs): (Vec<_>, Vec<_>) = submitted.into_iter().unzip();
    (
        instances.into_iter().flatten().collect(),
        runs.into_iter().flatten().collect(),
    )
}

/// Queues writer run `i` (`run {i}`, on session `s-{i / 2}`); returns its
/// correlation id and message.
async fn queue_run(front: &Host, i: usize) -> QueuedRun {
    let message = format!("run {i}");
    let session = format!("s-{}", i / 2);
    let body = json!({"message": message, "thread_id": session, "wait_for_response": false});
    let response = client()
        .post(front.url("/api/agents/writer/run"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202, "{message}");
    let body: Value = response.json().await.unwrap();
    let id = body["correlation_id"].as_str().unwrap().to_string();
    (id, message)
}

/// Kills (SIGKILL) a worker once the models got `after` requests: worker
/// `choice` if a request of its is in flight, else the other if one of its
/// is. Returns the worker killed and when (ms).
async fn kill_when(workers: &mut [Host], log: &Log, after: usize, choice: usize) -> (usize, i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = now_ms();
        let (count, in_flight) = {
            let log = log.lock().unwrap();
            let mut in_flight = [0usize; 2];
            for a in log.iter().filter(|a| a.answered_ms > now) {
                in_flight[a.worker] += 1;
            }
            (log.len(), in_flight)
        };
        if count >= after {
            let victim = match (in_flight[choice], in_flight[1 - choice]) {
                (0, n) if n > 0 => Some(1 - choice),
                (0, _) => None,
                _ => Some(choice),
            };
            if let Some(victim) = victim {
                let at = now_ms();
                workers[victim].kill();
                return (victim, at);
            }
        }
        assert!(
            Instant::now() < deadline,
            "no model request in flight to kill a worker under ({count} asked)"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// The checker itself, on a made-up history: a turn asked again after its
/// answer was seen committed is flagged, and so is an orphan of the worker
/// that lived; the killed worker's orphans are sorted by whether the model
/// had answered before the kill. (The scenario above passing says nothing
/// unless this would fail it.)
#[test]
fn the_take_over_checker_flags_a_committed_call_asked_again_and_sorts_the_dead_workers_calls() {
    let run = |id: &str, message: &str, answer: usize, seen: i64| StoredRun {
        correlation_id: id.to_string(),
        session_id: format!("s-{id}"),
        message: message.to_string(),
        status: "completed".to_string(),
        response: Some(format!("a{answer}")),
        updated_ms: seen - 10,
        seen_committed_ms: Some(seen),
    };
    let asked =
        |serial: usize, worker: usize, at_ms: i64, answered_ms: i64, question: &str| Asked {
            serial,
            worker,
            at_ms,
            answered_ms,
            question: question.to_string(),
        };
    let stored: BTreeMap<String, StoredRun> = [
        run("r0", "run 0", 0, 200),
        run("r1", "run 1", 2, 2600),
        run("r2", "run 2", 5, 2700),
    ]
    .into_iter()
    .map(|r| (r.correlation_id.clone(), r))
    .collect();
    let committed: HashMap<usize, &StoredRun> =
        [(0, &stored["r0"]), (2, &stored["r1"]), (5, &stored["r2"])].into();
    let (victim, kill_ms) = (0, 250);
    let history = [
        asked(0, 0, 100, 150, "run 0"),
        asked(1, 0, 120, 400, "run 1"),
        asked(4, 0, 130, 180, "run 2"),
        // Asked by the survivor after `run 0`'s answer was committed.
        asked(3, 1, 300, 350, "run 0"),
        asked(2, 1, 2500, 2550, "run 1"),
        asked(5, 1, 2600, 2650, "run 2"),
    ];
    let found = classify(&history, &stored, &committed, victim, kill_ms);
    assert_eq!(found.violations.len(), 1, "{:?}", found.violations);
    assert_eq!(found.unexplained.len(), 1, "{:?}", found.unexplained);
    let serials = |calls: &[Asked]| calls.iter().map(|a| a.serial).collect::<Vec<_>>();
    assert_eq!(serials(&found.in_flight_at_model), [1]);
    assert_eq!(serials(&found.answered_not_stored), [4]);
}
