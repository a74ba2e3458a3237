//! The fault suite: a mixed load (sequences, fan-outs, counted activities,
//! event waits, agent calls from orchestrations, agent runs with and without
//! tools, streamed answers) while faults land at seeded moments; then, from
//! outside, the history of what was acknowledged is checked: every
//! acknowledged item finished with the right result (nothing lost), no
//! activity or model turn that had completed ran again (nothing done twice),
//! every stream reads as its stored answer (or as failed, never with a hole),
//! and no session holds a tool result after its final answer.
//!
//! On SQLite one host serves; its faults are kill -9, SIGSTOP/SIGCONT,
//! another process holding the database's lock, and Redis refusing writes.
//! On PostgreSQL (`AGENTHOST_TEST_STORE`) an HTTP front and two workers
//! share a hub through a TCP proxy; the faults are kill -9 of a worker, a
//! worker paused past its lease, every database connection cut, every
//! connection silent (open ones for good), and Redis refusing writes.
//!
//! Sizes: `AGENTHOST_CHAOS_ITEMS` (work items), `AGENTHOST_CHAOS_FAULTS`,
//! `AGENTHOST_CHAOS_SEED`; `make test` runs a smoke size, `make chaos` the
//! full one. Each run appends its row to `target/chaos/report.md`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use serde_json::{json, Value};

use crate::support::fake_model::echo_of;
use crate::support::host::{test_store, Host};
use crate::support::redis::PrivateRedis;
use crate::support::run_log::RunLog;
use crate::support::tcp_proxy::TcpProxy;
use crate::support::{client, workspace, FakeModel, HostBuilder, Reply};

struct Settings {
    items: usize,
    faults: usize,
    seed: u64,
}

impl Settings {
    fn from_env() -> Self {
        let var = |name: &str, default: u64| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        Self {
            items: var("AGENTHOST_CHAOS_ITEMS", 160) as usize,
            faults: var("AGENTHOST_CHAOS_FAULTS", 5) as usize,
            seed: var("AGENTHOST_CHAOS_SEED", 18),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    Kill,
    Pause,
    StoreLocked,
    ConnectionsCut,
    ConnectionsSilent,
    RedisRefuses,
    DiskFull,
}

/// The test's directory as a tmpfs of its own, so that a full disk can be
/// made (and unmade) under the SQLite store; `None` where mounting is not
/// allowed (not root): full-disk faults are then left out, and said so.
struct OwnDisk {
    path: std::path::PathBuf,
}

impl OwnDisk {
    fn mount(path: &std::path::Path) -> Option<Self> {
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1g", "tmpfs"])
            .arg(path)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        mounted.then(|| Self {
            path: path.to_path_buf(),
        })
    }

    /// Fills the disk at `path` for `pause`, then frees it.
    fn fill_for(path: &std::path::Path, pause: Duration) {
        use std::io::Write;
        let filler = path.join("filler");
        if let Ok(mut file) = std::fs::File::create(&filler) {
            let block = vec![0u8; 1 << 20];
            while file.write_all(&block).is_ok() {}
            let _ = file.sync_all();
        }
        std::thread::sleep(pause);
        let _ = std::fs::remove_file(&filler);
    }
}

impl Drop for OwnDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

/// One acknowledged piece of work and what it must end as.
#[derive(Debug, Clone)]
enum Item {
    Instance {
        id: String,
        output: Value,
    },
    Waiter {
        id: String,
        payload: u64,
    },
    Run {
        agent: &'static str,
        id: String,
        message: String,
        session: Option<String>,
    },
}

/// The host (SQLite) or the front and its two workers (PostgreSQL).
struct Cluster {
    builder: HostBuilder,
    front: Host,
    workers: Vec<Host>,
    /// Where requests go: the front's URL (it changes when it restarts).
    base: Arc<RwLock<String>>,
    proxy: Option<TcpProxy>,
    shared: bool,
}

impl Cluster {
    fn base(&self) -> String {
        self.base.read().unwrap().clone()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn chaos_mixed_load_under_seeded_faults_loses_nothing_and_repeats_nothing() {
    let settings = Settings::from_env();
    let mut rng = rand::rngs::StdRng::seed_from_u64(settings.seed);
    let dir = tempfile::tempdir().unwrap();
    let store = test_store();
    let disk = match store {
        None => OwnDisk::mount(dir.path()),
        Some(_) => None,
    };
    if store.is_none() && disk.is_none() {
        println!("full-disk faults left out: a tmpfs cannot be mounted here (root is needed)");
    }
    let model = FakeModel::start().await;
    model.respond_with(Arc::new(|request| {
        let messages = request.messages();
        let last = messages.last().cloned().unwrap_or_default();
        // Slow enough that faults find turns in flight.
        let pace = Duration::from_millis(2 + (request.at_ms % 5) as u64);
        if last["role"] == "tool" {
            Reply::Paced(pace, Box::new(Reply::ToolResult))
        } else if last["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("[tool]"))
        {
            Reply::Delay(
                Duration::from_millis(20),
                Box::new(Reply::ToolCall(
                    "get_weather".into(),
                    json!({"city": "Oslo"}),
                )),
            )
        } else {
            Reply::Paced(pace, Box::new(Reply::Echo))
        }
    }));
    let run_log = RunLog::serve().await;
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::write(
        components.join("orchestration-tests.toml"),
        format!("allowed_hosts = [\"127.0.0.1:{}\"]\n", run_log.port),
    )
    .unwrap();
    let mut redis = PrivateRedis::start().await;
    let proxy = match &store {
        Some(_) => Some(TcpProxy::start("127.0.0.1:5432".parse().unwrap()).await),
        None => None,
    };
    let make = || {
        let builder = HostBuilder::new(dir.path())
            .components(&["writer", "weather", "orchestration-tests"])
            .openai(&model, "sk")
            .env("REDIS_CONNECTION_STRING", &redis.url)
            .arg("--lease")
            .arg("1s");
        match (&store, &proxy) {
            (Some(url), Some(proxy)) => builder.store(&proxy.postgres_url(url)),
            _ => builder,
        }
    };
    let builder = make();
    let shared = store.is_some();
    let (front, workers) = if shared {
        let front = make().arg("--no-worker").start();
        (front, vec![builder.start_worker(), builder.start_worker()])
    } else {
        (builder.start(), Vec::new())
    };
    let base = Arc::new(RwLock::new(front.base.clone()));
    let mut cluster = Cluster {
        builder,
        front,
        workers,
        base,
        proxy,
        shared,
    };
    let kinds: Vec<Fault> = if shared {
        vec![
            Fault::Kill,
            Fault::Pause,
            Fault::ConnectionsCut,
            Fault::ConnectionsSilent,
            Fault::RedisRefuses,
        ]
    } else {
        let mut kinds = vec![
            Fault::Kill,
            Fault::Pause,
            Fault::StoreLocked,
            Fault::RedisRefuses,
        ];
        if disk.is_some() {
            kinds.push(Fault::DiskFull);
        }
        kinds
    };

    let started = Instant::now();
    let mut acknowledged: Vec<Item> = Vec::new();
    let mut refused = 0usize;
    let mut unacknowledged = 0usize;
    let mut injected: BTreeMap<Fault, usize> = BTreeMap::new();
    let mut recoveries: Vec<Duration> = Vec::new();
    let chunks = settings.faults + 1;
    let per_chunk = settings.items.div_ceil(chunks);
    let mut next = 0usize;
    for chunk in 0..chunks {
        let end = (next + per_chunk).min(settings.items);
        let submitting = submit(cluster.base.clone(), run_log.port, (next..end).collect(), 0);
        let faulting = async {
            if chunk < settings.faults {
                tokio::time::sleep(Duration::from_millis(rng.random_range(20..400))).await;
                let kind = kinds[rng.random_range(0..kinds.len())];
                let which = rng.random_range(0..2usize);
                let recovery =
                    inject(&mut cluster, &mut redis, &dir, disk.as_ref(), kind, which).await;
                *injected.entry(kind).or_default() += 1;
                if let Some(recovery) = recovery {
                    recoveries.push(recovery);
                }
            }
        };
        let ((items, mut failed), ()) = tokio::join!(submitting, faulting);
        acknowledged.extend(items);
        refused += failed.len();
        // As a client would: what a fault refused is asked again once it
        // healed (an instance by the same id, a run as a new message).
        for again in 1..=40 {
            if failed.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
            let (items, still) = submit(cluster.base.clone(), run_log.port, failed, again).await;
            acknowledged.extend(items);
            failed = still;
        }
        unacknowledged += failed.len();
        next = end;
    }

    // Healed: what waits for an event gets it, then everything must finish.
    let base = cluster.base();
    for item in &acknowledged {
        if let Item::Waiter { id, payload } = item {
            raise_until_accepted(&base, id, *payload).await;
        }
    }
    let limit = Duration::from_secs(180 + settings.items as u64 / 20);
    let mut lost = Vec::new();
    let mut ended_at: HashMap<String, i64> = HashMap::new();
    let mut streams_failed = 0usize;
    let mut broken_sessions = Vec::new();
    for item in &acknowledged {
        match check(&base, item, limit).await {
            Ok(outcome) => {
                if let Some((message, at)) = outcome.ended {
                    ended_at.insert(message, at);
                }
                streams_failed += usize::from(outcome.stream_failed);
                if let Some(broken) = outcome.broken_session {
                    broken_sessions.push(broken);
                }
            }
            Err(why) => lost.push(why),
        }
    }
    // A model turn asked again after its run had ended was done twice.
    let mut turns_repeated = Vec::new();
    for request in model.requests() {
        let message = request.last_user_message();
        if let Some(at) = ended_at.get(&message) {
            if request.at_ms > *at + 50 && !request.messages().iter().any(|m| m["role"] == "tool") {
                turns_repeated.push(format!(
                    "{message} asked at {} after its run ended at {at}",
                    request.at_ms
                ));
            }
        }
    }
    let activities_repeated = completed_activities_run_again(&run_log.runs());
    recoveries.sort();
    let p99 = recoveries
        .get((recoveries.len() * 99).div_ceil(100).saturating_sub(1))
        .copied();
    let report = Report {
        store: if shared {
            "PostgreSQL, front + 2 workers"
        } else {
            "SQLite, one host"
        },
        seed: settings.seed,
        items: settings.items,
        acknowledged: acknowledged.len(),
        refused,
        unacknowledged,
        injected,
        lost: lost.len(),
        duplicated: activities_repeated.len() + turns_repeated.len(),
        streams_failed,
        broken_sessions: broken_sessions.len(),
        p99_recovery: p99,
        elapsed: started.elapsed(),
    };
    report.write();
    assert!(lost.is_empty(), "lost: {lost:#?}");
    assert_eq!(
        unacknowledged, 0,
        "work refused even 10 s after its fault healed"
    );
    assert!(
        activities_repeated.is_empty(),
        "activities run again: {activities_repeated:#?}"
    );
    assert!(
        turns_repeated.is_empty(),
        "model turns asked again: {turns_repeated:#?}"
    );
    assert!(
        broken_sessions.is_empty(),
        "sessions with a tool result after the answer: {broken_sessions:#?}"
    );
    assert!(report.injected.values().sum::<usize>() >= settings.faults);
    drop(cluster);
    drop(disk);
}

/// Submits items `indices` (up to 24 at once), the `again`-th time;
/// returns those acknowledged and the indices refused (a fault was under
/// way).
async fn submit(
    base: Arc<RwLock<String>>,
    run_log: u16,
    indices: Vec<usize>,
    again: u32,
) -> (Vec<Item>, Vec<usize>) {
    use futures::StreamExt;
    let results: Vec<(usize, Option<Item>)> = futures::stream::iter(indices)
        .map(|i| {
            let base = base.clone();
            async move { (i, submit_one(&base, run_log, i, again).await) }
        })
        .buffer_unordered(24)
        .collect()
        .await;
    let mut items = Vec::new();
    let mut refused = Vec::new();
    for (i, item) in results {
        match item {
            Some(item) => items.push(item),
            None => refused.push(i),
        }
    }
    (items, refused)
}

/// A run asked again is a new message (`… again N`): the refused try may
/// have been stored, and its turns must not count as this one's.
async fn submit_one(base: &RwLock<String>, run_log: u16, i: usize, again: u32) -> Option<Item> {
    let suffix = if again == 0 {
        String::new()
    } else {
        format!(" again {again}")
    };
    let base = base.read().unwrap().clone();
    let id = format!("chaos-{i}");
    let start = |name: &str, input: Value| {
        let url = format!("{base}/api/orchestrators/{name}/{id}");
        let status = format!("{base}/runtime/webhooks/durabletask/instances/{id}");
        async move {
            // Asked again, a client first looks whether the refused try got
            // through: a start with the id of a finished instance would
            // begin it anew (and run its activities again, rightly).
            if again > 0 {
                let known = client()
                    .get(status)
                    .timeout(Duration::from_secs(20))
                    .send()
                    .await
                    .map_err(|e| eprintln!("status: {e:?}"))
                    .ok()?;
                match known.status().as_u16() {
                    // 200 when it finished, 202 while it runs.
                    200 | 202 => return Some(()),
                    404 => {}
                    other => {
                        eprintln!("status: {other} {}", known.text().await.unwrap_or_default());
                        return None;
                    }
                }
            }
            let response = client()
                .post(url)
                .json(&input)
                .timeout(Duration::from_secs(20))
                .send()
                .await
                .map_err(|e| eprintln!("start refused: {e:?}"))
                .ok()?;
            // 409: an earlier try of this very start got through.
            let status = response.status().as_u16();
            if !matches!(status, 202 | 409) {
                eprintln!(
                    "start refused: {status} {}",
                    response.text().await.unwrap_or_default()
                );
                return None;
            }
            Some(())
        }
    };
    match i % 8 {
        0 => {
            let url = format!("http://127.0.0.1:{run_log}/{id}");
            start("counted", json!({"n": 3, "url": url})).await?;
            Some(Item::Instance {
                id,
                output: json!(3),
            })
        }
        1 => {
            start("sequence", json!({"n": 6})).await?;
            Some(Item::Instance {
                id,
                output: json!(15),
            })
        }
        2 => {
            start("fanout", json!({"n": 12})).await?;
            Some(Item::Instance {
                id,
                output: json!(66),
            })
        }
        3 => {
            let message = format!("question {i}");
            start("ask_writer", json!(message)).await?;
            Some(Item::Instance {
                id: id.clone(),
                output: json!(echo_of(&message)),
            })
        }
        4 => {
            start("wait_event", json!(null)).await?;
            Some(Item::Waiter {
                id,
                payload: i as u64,
            })
        }
        5 | 6 => {
            let message = format!("chaos run {i}{suffix}");
            let id = run_async(&base, "writer", &message, None).await?;
            Some(Item::Run {
                agent: "writer",
                id,
                message,
                session: None,
            })
        }
        _ => {
            let message = format!("[tool] weather {i}{suffix}");
            let session = format!("s-{i}-{again}");
            let id = run_async(&base, "weather", &message, Some(&session)).await?;
            Some(Item::Run {
                agent: "weather",
                id,
                message,
                session: Some(session),
            })
        }
    }
}

async fn run_async(
    base: &str,
    agent: &str,
    message: &str,
    session: Option<&str>,
) -> Option<String> {
    let mut body = json!({"message": message, "waitForResponse": false});
    if let Some(session) = session {
        body["sessionId"] = json!(session);
    }
    let response = client()
        .post(format!("{base}/api/agents/{agent}/run"))
        .json(&body)
        .timeout(Duration::from_secs(20))
        .send()
        .await
        .map_err(|e| eprintln!("run refused: {e:?}"))
        .ok()?;
    if response.status() != 202 {
        let status = response.status();
        eprintln!(
            "run refused: {status} {}",
            response.text().await.unwrap_or_default()
        );
        return None;
    }
    let body: Value = response.json().await.ok()?;
    body["correlationId"].as_str().map(str::to_string)
}

async fn raise_until_accepted(base: &str, id: &str, payload: u64) {
    let url = format!("{base}/runtime/webhooks/durabletask/instances/{id}/raiseEvent/go");
    for _ in 0..600 {
        if let Ok(response) = client().post(&url).json(&json!(payload)).send().await {
            if response.status() == 202 {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the event for {id} was never accepted");
}

/// Injects one fault of `kind` and heals it; for a kill, returns how long
/// the killed process took to serve again.
async fn inject(
    cluster: &mut Cluster,
    redis: &mut PrivateRedis,
    dir: &tempfile::TempDir,
    disk: Option<&OwnDisk>,
    kind: Fault,
    which: usize,
) -> Option<Duration> {
    match kind {
        Fault::DiskFull => {
            if let Some(disk) = disk {
                let path = disk.path.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    OwnDisk::fill_for(&path, Duration::from_millis(1500));
                })
                .await;
            }
            None
        }
        Fault::Kill if cluster.shared => {
            let worker = which % cluster.workers.len();
            cluster.workers[worker].kill();
            let restarted = Instant::now();
            cluster.workers[worker] = cluster.builder.start_worker();
            Some(restarted.elapsed())
        }
        Fault::Kill => {
            cluster.front.kill();
            let restarted = Instant::now();
            cluster.front = cluster.builder.start();
            *cluster.base.write().unwrap() = cluster.front.base.clone();
            Some(restarted.elapsed())
        }
        Fault::Pause => {
            let (host, pause) = if cluster.shared {
                (
                    &cluster.workers[which % cluster.workers.len()],
                    Duration::from_millis(1800),
                )
            } else {
                (&cluster.front, Duration::from_millis(800))
            };
            host.pause();
            tokio::time::sleep(pause).await;
            host.resume();
            None
        }
        Fault::StoreLocked => {
            let db = dir.path().join(format!(
                "agenthost.{}.db",
                crate::support::host::hub_for(dir.path())
            ));
            let mut locker = crate::trust::lock_sqlite(&db, 1.2);
            let _ = tokio::task::spawn_blocking(move || locker.wait()).await;
            None
        }
        Fault::ConnectionsCut => {
            if let Some(proxy) = &cluster.proxy {
                proxy.cut_all();
            }
            None
        }
        Fault::ConnectionsSilent => {
            if let Some(proxy) = &cluster.proxy {
                proxy.set_silent(true);
                if which == 0 {
                    proxy.abandon_open_connections();
                }
                tokio::time::sleep(Duration::from_millis(1500)).await;
                proxy.set_silent(false);
            }
            None
        }
        Fault::RedisRefuses => {
            let mut admin = redis::Client::open(redis.url.as_str())
                .ok()?
                .get_multiplexed_async_connection()
                .await
                .ok()?;
            let set = |value: &'static str| {
                let mut command = redis::cmd("CONFIG");
                command.arg("SET").arg("maxmemory").arg(value);
                command
            };
            let _: Result<(), _> = set("1").query_async(&mut admin).await;
            tokio::time::sleep(Duration::from_millis(700)).await;
            let _: Result<(), _> = set("0").query_async(&mut admin).await;
            None
        }
    }
}

/// What checking one item found besides its result.
#[derive(Default)]
struct Checked {
    /// A run's message and when its run ended (ms).
    ended: Option<(String, i64)>,
    stream_failed: bool,
    broken_session: Option<String>,
}

/// Waits for `item` to finish and checks its result; `Err` says how it was
/// lost (not finished, or finished wrong).
async fn check(base: &str, item: &Item, limit: Duration) -> Result<Checked, String> {
    let deadline = Instant::now() + limit;
    match item {
        Item::Instance { id, output } => {
            let at = instance_done(base, id, output, deadline).await?;
            // An agent call's message: `question i` (see `submit_one`).
            let i: usize = id.trim_start_matches("chaos-").parse().unwrap_or(0);
            Ok(Checked {
                ended: (i % 8 == 3).then(|| (format!("question {i}"), at)),
                ..Checked::default()
            })
        }
        Item::Waiter { id, payload } => {
            instance_done(base, id, &json!(payload), deadline).await?;
            Ok(Checked::default())
        }
        Item::Run {
            agent,
            id,
            message,
            session,
        } => run_done(base, agent, id, message, session.as_deref(), deadline).await,
    }
}

/// When the instance completed with `output`.
async fn instance_done(
    base: &str,
    id: &str,
    output: &Value,
    deadline: Instant,
) -> Result<i64, String> {
    let url = format!("{base}/runtime/webhooks/durabletask/instances/{id}");
    loop {
        let body: Value = match client().get(&url).send().await {
            Ok(response) => response.json().await.unwrap_or_default(),
            Err(_) => Value::Null,
        };
        match body["runtimeStatus"].as_str() {
            Some("Completed") if &body["output"] == output => {
                return Ok(body["lastUpdatedTime"]
                    .as_str()
                    .and_then(chrono_ms)
                    .unwrap_or(i64::MAX))
            }
            Some("Completed" | "Failed" | "Terminated") => {
                return Err(format!("{id} ended wrong: {body}"))
            }
            _ if Instant::now() > deadline => return Err(format!("{id} never finished: {body}")),
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn run_done(
    base: &str,
    agent: &str,
    id: &str,
    message: &str,
    session: Option<&str>,
    deadline: Instant,
) -> Result<Checked, String> {
    let url = format!("{base}/api/agents/{agent}/runs/{id}");
    let run = loop {
        let run: Value = match client().get(&url).send().await {
            Ok(response) => response.json().await.unwrap_or_default(),
            Err(_) => Value::Null,
        };
        match run["status"].as_str() {
            Some("completed" | "failed") => break run,
            _ if Instant::now() > deadline => {
                return Err(format!("run {id} never finished: {run}"))
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let answer = run["response"].as_str().unwrap_or_default().to_string();
    let right = match agent {
        "writer" => answer == echo_of(message),
        _ => answer.starts_with("tool said: "),
    };
    if run["status"] != "completed" || !right {
        return Err(format!("run {id} ended wrong: {run}"));
    }
    let mut checked = Checked {
        ended: run["updated_at"]
            .as_str()
            .and_then(chrono_ms)
            .map(|at| (message.to_string(), at)),
        ..Checked::default()
    };
    let stream = client()
        .get(format!("{url}/stream"))
        .header("accept", "text/plain")
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .map_err(|e| format!("stream of {id}: {e:?}"))?;
    match stream.status().as_u16() {
        200 => {
            let text = stream.text().await.unwrap_or_default();
            if text != answer {
                return Err(format!(
                    "stream of {id} reads {text:?}, its answer is {answer:?}"
                ));
            }
        }
        502 => {
            let error: Value = stream.json().await.unwrap_or_default();
            if !error.to_string().contains("lost entries") {
                return Err(format!("stream of {id} failed: {error}"));
            }
            checked.stream_failed = true;
        }
        other => return Err(format!("stream of {id} answered {other}")),
    }
    if let Some(session) = session {
        let conversation: Value = client()
            .get(format!("{base}/api/agents/{agent}/sessions/{session}"))
            .send()
            .await
            .map_err(|e| e.to_string())?
            .json()
            .await
            .unwrap_or_default();
        let roles: Vec<&str> = conversation["messages"]
            .as_array()
            .map(|m| m.iter().filter_map(|m| m["role"].as_str()).collect())
            .unwrap_or_default();
        // One run: the question, tool rounds, then the answer, last.
        let last_answer = roles.iter().rposition(|r| *r == "assistant");
        let tool_after = last_answer.is_some_and(|at| roles[at..].contains(&"tool"));
        if roles.first() != Some(&"user") || roles.last() != Some(&"assistant") || tool_after {
            checked.broken_session = Some(format!("{session}: {roles:?}"));
        }
    }
    Ok(checked)
}

/// Milliseconds of an RFC 3339 time.
fn chrono_ms(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// Runs of `counted` activities, `(tag, step)` in arrival order: step `k`
/// running after step `k + 1` began means step `k`'s committed result was
/// thrown away and it ran again.
fn completed_activities_run_again(runs: &[(String, u32)]) -> Vec<String> {
    let mut highest: HashMap<&str, u32> = HashMap::new();
    let mut again = Vec::new();
    for (tag, step) in runs {
        let top = highest.entry(tag).or_insert(*step);
        if *step < *top {
            again.push(format!("{tag} step {step} after step {top}"));
        }
        *top = (*top).max(*step);
    }
    again
}

struct Report {
    store: &'static str,
    seed: u64,
    items: usize,
    acknowledged: usize,
    refused: usize,
    unacknowledged: usize,
    injected: BTreeMap<Fault, usize>,
    lost: usize,
    duplicated: usize,
    streams_failed: usize,
    broken_sessions: usize,
    p99_recovery: Option<Duration>,
    elapsed: Duration,
}

impl Report {
    fn write(&self) {
        let faults: Vec<String> = self
            .injected
            .iter()
            .map(|(kind, n)| format!("{kind:?} {n}"))
            .collect();
        let row = format!(
            "| {} | {} | {} | {} ({} refused during a fault and asked again, {} never acknowledged) | {} ({}) | {} | {} | {} | {} | {} | {:.0} s |\n",
            self.store,
            self.seed,
            self.items,
            self.acknowledged,
            self.refused,
            self.unacknowledged,
            self.injected.values().sum::<usize>(),
            faults.join(", "),
            self.lost,
            self.duplicated,
            self.streams_failed,
            self.broken_sessions,
            self.p99_recovery
                .map_or("–".to_string(), |d| format!("{} ms", d.as_millis())),
            self.elapsed.as_secs_f64(),
        );
        println!("{row}");
        let dir = workspace().join("target/chaos");
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("report.md");
        let header = "| store | seed | work items | acknowledged | faults injected | lost | done twice | streams marked failed | sessions with a tool result after the answer | p99 recovery after kill -9 | time |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
        let mut text = std::fs::read_to_string(&path).unwrap_or_else(|_| header.to_string());
        text.push_str(&row);
        let _ = std::fs::write(path, text);
    }
}
