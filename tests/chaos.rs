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
use crate::support::host::test_store;
use crate::support::redis::PrivateRedis;
use crate::support::run_log::{completed_activities_run_again, RunLog};
use crate::support::tcp_proxy::TcpProxy;
use crate::support::{client, FakeModel, HostBuilder, Reply};

mod checks;
mod faults;
mod report;

use checks::check;
use faults::{inject, Cluster, Fault, OwnDisk};
use report::Report;

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
    run_log.grant(dir.path());
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
