//! The agent run path's writes of one batch: SQLite writes them statement
//! by statement, PostgreSQL as parts of the batch's one statement
//! ([`super::postgres::runs`]). The same batches must answer the same and
//! leave the same conversations and streams. Runs on SQLite, and again on
//! PostgreSQL when `AGENTHOST_TEST_STORE` names one (`make test` does).

use crate::core::fence::SessionFence;
use crate::store::durable_records::{Write, Written};
use crate::store::run_tx::RunEndRow;
use crate::store::run_writes::{RunWrite, RunWritten};
use crate::store::{
    now_ms, Kind, Membership, NewRun, NewStreamRow, SessionKey, Store, StoreError, TaskHub,
};

async fn stores() -> Result<Vec<(Store, Option<tempfile::TempDir>)>, StoreError> {
    crate::store::test_fixtures::both("runs").await
}

fn session(id: &str) -> SessionKey {
    SessionKey {
        agent: "writer".into(),
        session_id: id.into(),
    }
}

fn start(run: &str, session_id: &str, expire_before: Option<i64>) -> Write {
    Write::Run(RunWrite::Start {
        run: NewRun {
            correlation_id: run.into(),
            session: session(session_id),
            message: format!("question of {run}"),
            response_format: None,
            traceparent: None,
            caller: None,
        },
        expire_before,
    })
}

/// A start by `caller` (an invoke key's id; `None` a caller without one).
fn start_by(
    run: &str,
    session_id: &str,
    caller: Option<&str>,
    expire_before: Option<i64>,
) -> Write {
    Write::Run(RunWrite::Start {
        run: NewRun {
            correlation_id: run.into(),
            session: session(session_id),
            message: format!("question of {run}"),
            response_format: None,
            traceparent: None,
            caller: caller.map(str::to_string),
        },
        expire_before,
    })
}

fn end(run: &str, session_id: &str, fence: Option<SessionFence>) -> Write {
    Write::Run(RunWrite::End {
        agent: "writer".into(),
        session_id: session_id.into(),
        correlation_id: run.into(),
        fence,
        bodies: vec![
            format!("{{\"role\":\"user\",\"content\":\"question of {run}\"}}"),
            format!("{{\"role\":\"assistant\",\"content\":\"answer of {run}\"}}"),
        ],
        end: RunEndRow {
            status: "completed",
            response: Some(format!("answer of {run}")),
            error: None,
            error_code: None,
            usage: "{}".into(),
        },
    })
}

fn chunks(run: &str, n: usize) -> Write {
    Write::Run(RunWrite::Stream {
        rows: (0..n)
            .map(|i| NewStreamRow {
                correlation_id: run.into(),
                attempt: 1,
                kind: "chunk",
                data: format!("{run}-{i}"),
            })
            .collect(),
        expires_at: now_ms() + 3_600_000,
    })
}

async fn batch(store: &Store, writes: Vec<Write>) -> Result<Vec<RunWritten>, StoreError> {
    let mut answers = Vec::new();
    for written in store.committer().commit_all(writes).await {
        match written? {
            Written::Run(answer) => answers.push(answer),
            other => return Err(StoreError::Write(format!("not a run's answer: {other:?}"))),
        }
    }
    Ok(answers)
}

/// `writes` as one job, taken into one batch whole (as a held run's start
/// and the write it goes with are).
async fn together(store: &Store, writes: Vec<Write>) -> Result<Vec<RunWritten>, StoreError> {
    let mut answers = Vec::new();
    for answer in store.committer().send_together(writes) {
        match crate::store::group_commit::answered(answer).await? {
            Written::Run(answer) => answers.push(answer),
            other => return Err(StoreError::Write(format!("not a run's answer: {other:?}"))),
        }
    }
    Ok(answers)
}

/// What a start answered, as its caller uses it: (runs here, next in line,
/// the session has no history).
fn started(answer: &RunWritten) -> Option<(bool, bool, bool)> {
    match answer {
        RunWritten::Started {
            run_here,
            next_in_line,
            new_session,
            expired,
            ..
        } => Some((*run_here, *next_in_line, *new_session || *expired)),
        _ => None,
    }
}

/// The fence this host holds of a session, as its start answered it.
fn fence(store: &Store, answer: &RunWritten) -> Option<SessionFence> {
    let RunWritten::Started {
        epoch: Some(epoch), ..
    } = answer
    else {
        return None;
    };
    store.owner_id().map(|owner| SessionFence {
        owner: owner.to_string(),
        epoch: *epoch,
        taken_at: now_ms(),
    })
}

async fn contents(store: &Store, id: &str) -> Result<Vec<String>, StoreError> {
    Ok(store
        .history(&session(id))
        .await?
        .into_iter()
        .map(|m| format!("{}: {:?}", m.correlation_id, m.message.content))
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_runs_answers_and_leaves_the_same_on_both_stores() -> Result<(), StoreError> {
    let mut seen = Vec::new();
    for (store, _dir) in stores().await? {
        let kind = store.kind();
        let set_before = counted();
        // Two new sessions; a stream written beside them.
        let first = batch(
            &store,
            vec![
                start("r1", "s1", None),
                start("r2", "s2", None),
                chunks("r1", 3),
            ],
        )
        .await?;
        assert_eq!(started(&first[0]), Some((true, true, true)), "{kind:?}");
        assert_eq!(started(&first[1]), Some((true, true, true)), "{kind:?}");
        let RunWritten::Streamed(ids) = &first[2] else {
            panic!("{:?}", first[2]);
        };
        assert_eq!(ids.len(), 3);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids in order: {ids:?}");
        let (f1, f2) = (fence(&store, &first[0]), fence(&store, &first[1]));

        // r1 ends with its messages; r3 queues behind r2, still pending.
        let second = batch(
            &store,
            vec![end("r1", "s1", f1.clone()), start("r3", "s2", None)],
        )
        .await?;
        assert!(
            matches!(&second[0], RunWritten::Ended { changed: true, .. }),
            "{:?} on {kind:?}",
            second[0]
        );
        assert_eq!(started(&second[1]), Some((true, false, false)), "{kind:?}");

        // Ending r1 again changes nothing; r2 ends.
        let third = batch(
            &store,
            vec![end("r1", "s1", f1), end("r2", "s2", f2.clone())],
        )
        .await?;
        assert!(matches!(
            &third[0],
            RunWritten::Ended { changed: false, .. }
        ));
        assert!(matches!(&third[1], RunWritten::Ended { changed: true, .. }));

        // s1 has been idle since before this cutoff and nothing holds it:
        // it starts over, its conversation forgotten.
        let history = contents(&store, "s1").await?;
        assert_eq!(history.len(), 2, "{history:?} on {kind:?}");
        let fourth = batch(&store, vec![start("r4", "s1", Some(now_ms() + 1_000))]).await?;
        assert_eq!(started(&fourth[0]), Some((true, true, true)), "{kind:?}");
        assert!(contents(&store, "s1").await?.is_empty(), "{kind:?}");

        if kind == Kind::Postgres {
            // A fence from before the session changed hands is refused.
            let stale = f2.map(|f| SessionFence {
                epoch: f.epoch + 1,
                ..f
            });
            let refused = batch(&store, vec![end("r3", "s2", stale)]).await?;
            assert!(matches!(&refused[0], RunWritten::Fenced), "{refused:?}");
            assert!(
                counted() - set_before >= 4,
                "the batches went as one statement each"
            );
        }
        seen.push((
            contents(&store, "s2").await?,
            store.run("r1").await?.map(|r| r.status),
        ));
        store.close().await;
    }
    // Both stores hold the same conversations and outcomes.
    if let [sqlite, postgres] = seen.as_slice() {
        assert_eq!(sqlite, postgres);
    }
    Ok(())
}

/// A batch naming one session twice goes statement by statement, in order:
/// the second run queued sees the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_of_one_session_in_one_batch_queue_in_order() -> Result<(), StoreError> {
    for (store, _dir) in stores().await? {
        let answers = batch(
            &store,
            vec![start("a", "same", None), start("b", "same", None)],
        )
        .await?;
        assert_eq!(started(&answers[0]).map(|s| s.1), Some(true));
        assert_eq!(
            started(&answers[1]).map(|s| s.1),
            Some(false),
            "b is behind a on {:?}",
            store.kind()
        );
        store.close().await;
    }
    Ok(())
}

/// Batches written as one statement (PostgreSQL).
fn counted() -> u64 {
    crate::store::postgres::runs::counts::SET_BASED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Another host queues a run for a session after this batch's statement
/// took its snapshot, and commits while the statement waits for the
/// session's row: the run this batch queues is behind it, not next in line
/// (two runs of one conversation at once, out of order). PostgreSQL only:
/// its statement reads on a snapshot, SQLite's writer is the only one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_queued_by_another_host_meanwhile_is_ahead_of_this_batchs() -> Result<(), StoreError>
{
    use sqlx::Connection;
    let Some(url) = crate::store::test_fixtures::postgres_url() else {
        return Ok(());
    };
    let hub = TaskHub::new(&format!("runs{}", uuid::Uuid::new_v4().simple()))
        .map_err(|e| StoreError::Write(e.to_string()))?;
    let store = Store::open(&url, &hub, Membership::default()).await?;
    let first = batch(&store, vec![start("r0", "s", None)]).await?;
    let ended = batch(&store, vec![end("r0", "s", fence(&store, &first[0]))]).await?;
    assert!(matches!(&ended[0], RunWritten::Ended { changed: true, .. }));

    // The other host's enqueue, open: the session's row written, its run
    // inserted, not committed yet.
    let mut other = sqlx::PgConnection::connect(&url).await?;
    sqlx::query(&format!("SET search_path TO {}", hub.postgres_schema()))
        .execute(&mut other)
        .await?;
    let mut tx = other.begin().await?;
    let now = now_ms();
    sqlx::query("UPDATE sessions SET last_active_at = $1 WHERE agent = 'writer' AND id = 's'")
        .bind(now)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO runs (correlation_id, agent, session_id, message, status, created_at, updated_at) \
         VALUES ('theirs', 'writer', 's', 'their question', 'pending', $1, $1)",
    )
    .bind(now)
    .execute(&mut *tx)
    .await?;

    let committer = store.committer().clone();
    let mine =
        tokio::spawn(async move { committer.commit_all(vec![start("mine", "s", None)]).await });
    // Until this batch's statement waits for the session's row (its text
    // as PostgreSQL shows it: the first kilobyte, `run_input` its first
    // part; the upsert that waits comes later).
    let mut watcher = sqlx::PgConnection::connect(&url).await?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
             AND query LIKE '%run_input%'",
        )
        .fetch_one(&mut watcher)
        .await?;
        if waiting > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the batch never waited for the row"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    tx.commit().await?;
    let answers = mine.await.map_err(|e| StoreError::Write(e.to_string()))?;
    let answer = match answers.into_iter().next() {
        Some(written) => written?,
        None => return Err(StoreError::Write("no answer".into())),
    };
    let Written::Run(answer) = answer else {
        return Err(StoreError::Write(format!("not a run's answer: {answer:?}")));
    };
    assert_eq!(
        started(&answer).map(|s| s.1),
        Some(false),
        "queued behind the other host's run: {answer:?}"
    );
    store.close().await;
    Ok(())
}

/// A session is the caller's whose first message the store took first:
/// another key's start on it is refused in the writing transaction, alone
/// (nothing of it stored, the rest of its batch written), in a batch of
/// distinct sessions (PostgreSQL's one statement) and in one naming a
/// session twice (statement by statement). Callers without a key continue
/// any session, and a session they started is no key's; a session
/// forgotten for idleness is claimed anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_callers_start_on_a_claimed_session_is_refused_alone() -> Result<(), StoreError> {
    let (a, b) = (Some("key:a"), Some("key:b"));
    let refused = |answer: &RunWritten| matches!(answer, RunWritten::SessionOfAnother);
    for (store, _dir) in stores().await? {
        let kind = store.kind();
        let first = batch(
            &store,
            vec![
                start_by("a1", "s1", a, None),
                start_by("n1", "s2", None, None),
            ],
        )
        .await?;
        assert!(first.iter().all(|w| started(w).is_some()), "{first:?}");

        let second = batch(
            &store,
            vec![
                start_by("b1", "s1", b, None),
                start_by("b2", "s2", b, None),
                start_by("b3", "s3", b, None),
                chunks("b3", 2),
            ],
        )
        .await?;
        assert!(
            refused(&second[0]) && refused(&second[1]),
            "{second:?} on {kind:?}"
        );
        assert_eq!(started(&second[2]), Some((true, true, true)), "{kind:?}");
        assert!(matches!(&second[3], RunWritten::Streamed(ids) if ids.len() == 2));
        for run in ["b1", "b2"] {
            assert!(store.run(run).await?.is_none(), "{run} stored on {kind:?}");
        }

        // One session twice: the keyless caller and its owner go on.
        let third = batch(
            &store,
            vec![
                start_by("n2", "s1", None, None),
                start_by("a2", "s1", a, None),
                start_by("b4", "s1", b, None),
            ],
        )
        .await?;
        assert_eq!(started(&third[0]).map(|s| s.1), Some(false), "{kind:?}");
        assert_eq!(started(&third[1]).map(|s| s.1), Some(false), "{kind:?}");
        assert!(refused(&third[2]), "{third:?} on {kind:?}");
        assert!(store.run("b4").await?.is_none());

        // Forgotten for idleness, a session is the next caller's.
        let opened = batch(&store, vec![start_by("a4", "s4", a, None)]).await?;
        let ended = batch(&store, vec![end("a4", "s4", fence(&store, &opened[0]))]).await?;
        assert!(matches!(&ended[0], RunWritten::Ended { changed: true, .. }));
        let taken = batch(
            &store,
            vec![start_by("b5", "s4", b, Some(now_ms() + 1_000))],
        )
        .await?;
        assert_eq!(started(&taken[0]), Some((true, true, true)), "{kind:?}");
        let after = batch(&store, vec![start_by("a5", "s4", a, None)]).await?;
        assert!(refused(&after[0]), "{after:?} on {kind:?}");
        store.close().await;
    }
    Ok(())
}

/// A held run's start and its end in one batch ([`crate::store::held_runs`]):
/// one run inserted ended: on PostgreSQL its session born this host's at
/// epoch 1, in the batch's one statement; the same as two batches leave on
/// either store. A session that was there after all refuses that form, and
/// the pair goes as any other: the run continues the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_runs_start_and_end_in_one_batch_store_the_run_whole() -> Result<(), StoreError> {
    let moved_on = || {
        crate::store::postgres::batch::counts::MOVED_ON.load(std::sync::atomic::Ordering::Relaxed)
    };
    let sqlite_wholes =
        || crate::store::sqlite::whole_counts::WHOLE.load(std::sync::atomic::Ordering::Relaxed);
    let sqlite_refusals =
        || crate::store::sqlite::whole_counts::REFUSED.load(std::sync::atomic::Ordering::Relaxed);
    let mut seen = Vec::new();
    for (store, _dir) in stores().await? {
        let kind = store.kind();
        let born = store.owner_id().map(|owner| SessionFence {
            owner: owner.to_string(),
            epoch: 1,
            taken_at: now_ms(),
        });
        let (set_before, moved_before) = (counted(), moved_on());
        let (wholes_before, refused_before) = (sqlite_wholes(), sqlite_refusals());
        let first = together(
            &store,
            vec![
                start("h1", "minted", None),
                chunks("o1", 2),
                end("h1", "minted", born.clone()),
                start("o1", "other", None),
            ],
        )
        .await?;
        assert_eq!(started(&first[0]), Some((true, true, true)), "{kind:?}");
        assert!(matches!(&first[1], RunWritten::Streamed(ids) if ids.len() == 2));
        assert!(
            matches!(&first[2], RunWritten::Ended { changed: true, .. }),
            "{first:?} on {kind:?}"
        );
        assert_eq!(started(&first[3]), Some((true, true, true)), "{kind:?}");
        if kind == Kind::Postgres {
            assert_eq!(counted() - set_before, 1, "not one statement");
            assert_eq!(moved_on(), moved_before, "the whole form was refused");
        } else {
            assert_eq!(sqlite_wholes() - wholes_before, 1, "not inserted whole");
        }
        let stored = store.run("h1").await?.map(|r| (r.status, r.response));
        assert_eq!(
            stored,
            Some((
                crate::store::RunStatus::Completed,
                Some("answer of h1".into())
            )),
            "{kind:?}"
        );

        // The session is this host's at the fence the start was held by:
        // its next run continues it, and ends under that fence.
        let next = batch(&store, vec![start("h2", "minted", None)]).await?;
        assert_eq!(started(&next[0]), Some((true, true, false)), "{kind:?}");
        assert_eq!(
            fence(&store, &next[0]).map(|f| f.epoch),
            born.as_ref().map(|f| f.epoch)
        );
        let ended = batch(&store, vec![end("h2", "minted", born.clone())]).await?;
        assert!(matches!(&ended[0], RunWritten::Ended { changed: true, .. }));

        // The same pair on a session that is there: refused whole, then
        // written as any start and end, continuing it.
        let again = together(
            &store,
            vec![
                start("h3", "minted", None),
                end("h3", "minted", born.clone()),
            ],
        )
        .await?;
        assert_eq!(started(&again[0]), Some((true, true, false)), "{kind:?}");
        assert!(
            matches!(&again[1], RunWritten::Ended { changed: true, .. }),
            "{again:?} on {kind:?}"
        );
        if kind == Kind::Postgres {
            assert!(moved_on() > moved_before, "the whole form was not refused");
        } else {
            assert_eq!(
                sqlite_wholes() - wholes_before,
                1,
                "inserted whole on a stored session"
            );
            assert!(
                sqlite_refusals() > refused_before,
                "the whole form was not refused"
            );
        }
        let history = contents(&store, "minted").await?;
        assert_eq!(history.len(), 6, "{history:?} on {kind:?}");
        seen.push((history, contents(&store, "other").await?));
        store.close().await;
    }
    if let [sqlite, postgres] = seen.as_slice() {
        assert_eq!(sqlite, postgres);
    }
    Ok(())
}
