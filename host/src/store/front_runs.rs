//! Runs queued through a front (`serve --no-worker`) on a shared hub: the
//! statement that queues a run gives its session to a live worker and
//! tells that worker alone, with what it needs; the statement that ends it
//! tells the front the run's record. What does not fit a notification
//! falls back to a plain wake-up and a read. PostgreSQL only
//! (`AGENTHOST_TEST_STORE`; `make test` names one).

use std::time::Duration;

use tokio::sync::broadcast;

use crate::core::fence::SessionFence;
use crate::store::durable_records::{Write, Written};
use crate::store::run_tx::RunEndRow;
use crate::store::run_writes::{RunWrite, RunWritten};
use crate::store::{
    Assigned, Membership, NewRun, Role, RunStatus, SessionKey, Store, StoreError, TaskHub, Wake,
};

fn start(run: &str, session_id: &str, message: &str) -> Write {
    Write::Run(RunWrite::Start {
        run: NewRun {
            correlation_id: run.into(),
            session: SessionKey {
                agent: "writer".into(),
                session_id: session_id.into(),
            },
            message: message.into(),
            response_format: None,
            traceparent: None,
            caller: None,
        },
        expire_before: None,
    })
}

fn end(run: &str, session_id: &str, fence: SessionFence) -> Write {
    Write::Run(RunWrite::End {
        agent: "writer".into(),
        session_id: session_id.into(),
        correlation_id: run.into(),
        fence: Some(fence),
        bodies: vec![format!(
            "{{\"role\":\"assistant\",\"content\":\"answer of {run}\"}}"
        )],
        end: RunEndRow {
            status: "completed",
            response: Some(format!("answer of {run}")),
            error: None,
            error_code: None,
            usage: "{\"prompt_tokens\":3,\"completion_tokens\":4,\"total_tokens\":7}".into(),
        },
    })
}

async fn one(store: &Store, write: Write) -> Result<RunWritten, StoreError> {
    match store.committer().commit(write).await? {
        Written::Run(answer) => Ok(answer),
        other => Err(StoreError::Write(format!("not a run's answer: {other:?}"))),
    }
}

/// The next wake-up `wanted` keeps, within 10 s.
async fn heard<T>(
    wakes: &mut broadcast::Receiver<Wake>,
    wanted: impl Fn(Wake) -> Option<T>,
) -> Result<T, StoreError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, wakes.recv()).await {
            Ok(Ok(wake)) => {
                if let Some(found) = wanted(wake) {
                    return Ok(found);
                }
            }
            Ok(Err(e)) => return Err(StoreError::Write(format!("wake-ups lost: {e}"))),
            Err(_) => return Err(StoreError::Write("not heard within 10 s".into())),
        }
    }
}

async fn owner(store: &Store, session_id: &str) -> Result<Option<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT owner FROM sessions WHERE agent = 'writer' AND id = $1")
            .bind(session_id)
            .fetch_one(store.pool())
            .await?,
    )
}

async fn host(url: &str, hub: &TaskHub, role: Role) -> Result<Store, StoreError> {
    let membership = Membership {
        role,
        lease: Duration::from_secs(5),
    };
    Store::open(url, hub, membership).await
}

/// The next end of `run` the front hears: the record it carried, if any.
async fn end_of(
    answers: &mut broadcast::Receiver<Wake>,
    run: &str,
) -> Result<Option<std::sync::Arc<crate::store::RunRecord>>, StoreError> {
    heard(answers, |wake| match wake {
        Wake::RunFinished(id, record) if id == run => Some(record),
        _ => None,
    })
    .await
}

fn assigned(wake: Wake) -> Option<Assigned> {
    match wake {
        Wake::Assigned(assigned) => Some(assigned),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_queued_by_a_front_goes_to_a_live_worker_which_alone_is_told_and_the_front_hears_its_record(
) -> Result<(), StoreError> {
    let Some(url) = crate::store::test_fixtures::postgres_url() else {
        return Ok(());
    };
    let hub = TaskHub::new(&format!("fronts{}", uuid::Uuid::new_v4().simple()))
        .map_err(|e| StoreError::Write(e.to_string()))?;
    let worker = host(&url, &hub, Role::Worker).await?;
    let front = host(&url, &hub, Role::Front).await?;
    let me = worker.owner_id().map(str::to_string);
    let (Some(mut told), Some(mut answers)) = (worker.wakes(), front.wakes()) else {
        return Err(StoreError::Write("a shared hub has wake-ups".into()));
    };

    // Queued by the front: the session is the worker's, and the worker is
    // told the run, the session's first.
    let queued = one(&front, start("r1", "s 1", "hello")).await?;
    assert!(
        matches!(
            queued,
            RunWritten::Started {
                run_here: false,
                ..
            }
        ),
        "{queued:?}"
    );
    assert_eq!(owner(&front, "s 1").await?, me);
    let first = heard(&mut told, assigned).await?;
    assert_eq!(
        first,
        Assigned {
            correlation_id: "r1".into(),
            agent: "writer".into(),
            session_id: "s 1".into(),
            new_session: true,
            next_in_line: true,
        }
    );
    // One read gives the worker the run and its fence.
    let Some((run, fence, has_messages)) = worker.assigned_run("r1").await? else {
        return Err(StoreError::Write("the assigned run is not there".into()));
    };
    assert_eq!(
        (run.message.as_str(), run.status, has_messages),
        ("hello", RunStatus::Pending, false)
    );
    assert_eq!((Some(fence.owner.clone()), fence.epoch), (me.clone(), 1));

    // A second run of the session waits behind the first.
    one(&front, start("r2", "s 1", "again")).await?;
    let second = heard(&mut told, assigned).await?;
    assert_eq!(
        (
            second.correlation_id.as_str(),
            second.next_in_line,
            second.new_session
        ),
        ("r2", false, false)
    );

    // The worker ends the first: the front hears its record whole.
    let ended = one(&worker, end("r1", "s 1", fence.clone())).await?;
    assert!(
        matches!(ended, RunWritten::Ended { changed: true, .. }),
        "{ended:?}"
    );
    let Some(record) = end_of(&mut answers, "r1").await? else {
        return Err(StoreError::Write(
            "the record did not come with the end".into(),
        ));
    };
    let stored = front.run("r1").await?;
    assert_eq!(Some(&*record), stored.as_ref(), "the record as stored");
    assert_eq!(record.response.as_deref(), Some("answer of r1"));
    assert_eq!(record.usage.map(|u| u.total_tokens), Some(7));

    // Past a notification's limit: a message too long to carry is read
    // (the end still commits), an id too long to name wakes every worker.
    let long = "x".repeat(10_000);
    one(&front, start("r3", "s2", &long)).await?;
    let third = heard(&mut told, assigned).await?;
    assert_eq!(third.correlation_id, "r3");
    let Some((_, fence, _)) = worker.assigned_run("r3").await? else {
        return Err(StoreError::Write("r3 is not there".into()));
    };
    let ended = one(&worker, end("r3", "s2", fence)).await?;
    assert!(
        matches!(ended, RunWritten::Ended { changed: true, .. }),
        "{ended:?}"
    );
    assert_eq!(
        end_of(&mut answers, "r3").await?,
        None,
        "too long to carry: named only"
    );
    let long_id = "s".repeat(7_900);
    one(&front, start("r4", &long_id, "hi")).await?;
    heard(&mut told, |wake| {
        matches!(wake, Wake::Sessions).then_some(())
    })
    .await?;
    assert_eq!(owner(&front, &long_id).await?, me, "given all the same");
    let claimed = worker.claim_sessions(64).await?;
    assert!(
        claimed.iter().any(|(s, _)| s.session_id == long_id),
        "found by the worker's pass"
    );

    // Once the worker is gone, a front gives sessions to nobody: a pass
    // of the next worker takes them.
    worker.close().await;
    one(&front, start("r5", "s3", "anyone?")).await?;
    assert_eq!(owner(&front, "s3").await?, None);
    front.close().await;
    Ok(())
}

/// A session's deletion through one host racing a run's enqueue through
/// another: the run is never left pending on a session that is gone (the
/// deletion either comes second and finds the run, answering busy, or
/// comes first, and the run begins the session again).
///
/// Failed before the deletion locked the session's row before looking for
/// its runs: under read committed, a DELETE that waited on the enqueue's
/// row lock re-checked the row, but its `NOT EXISTS` kept the snapshot
/// taken before the enqueue committed, and deleted the session under it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_racing_an_enqueue_never_leaves_a_run_without_its_session(
) -> Result<(), StoreError> {
    let Some(url) = crate::store::test_fixtures::postgres_url() else {
        return Ok(());
    };
    let hub = TaskHub::new(&format!("deletes{}", uuid::Uuid::new_v4().simple()))
        .map_err(|e| StoreError::Write(e.to_string()))?;
    let first = host(&url, &hub, Role::Front).await?;
    let second = host(&url, &hub, Role::Front).await?;
    let mut orphans = Vec::new();
    for i in 0..150 {
        let session_id = format!("s{i}");
        let earlier = format!("earlier{i}");
        one(&first, start(&earlier, &session_id, "hello")).await?;
        // The earlier run ended: the session may be deleted.
        sqlx::query("UPDATE runs SET status = 'completed' WHERE correlation_id = $1")
            .bind(&earlier)
            .execute(first.pool())
            .await?;
        let key = SessionKey {
            agent: "writer".into(),
            session_id: session_id.clone(),
        };
        let (queued, deleted) = tokio::join!(
            one(&first, start(&format!("later{i}"), &session_id, "again")),
            second.delete_session(&key),
        );
        queued?;
        deleted?;
        let orphaned: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM runs r WHERE r.agent = 'writer' AND r.session_id = $1 \
             AND r.status = 'pending' AND NOT EXISTS \
             (SELECT 1 FROM sessions s WHERE s.agent = r.agent AND s.id = r.session_id)",
        )
        .bind(&session_id)
        .fetch_one(first.pool())
        .await?;
        if orphaned > 0 {
            orphans.push(session_id);
        }
    }
    if orphans.is_empty() {
        Ok(())
    } else {
        Err(StoreError::Write(format!(
            "runs pending on deleted sessions: {orphans:?}"
        )))
    }
}
