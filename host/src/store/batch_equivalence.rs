//! PostgreSQL decides a batch in memory and writes it in one statement
//! ([`super::postgres::batch`]); SQLite writes statement by statement. The
//! same writes, committed together, must leave the same instances behind.
//! Runs when `AGENTHOST_TEST_STORE` names a PostgreSQL database (`make
//! test` sets it for its PostgreSQL stage).

use std::sync::Arc;

use crate::core::effects::Effect;
use crate::core::instance::RuntimeStatus;
use crate::core::journal::{Call, Entry, Event};
use crate::core::lifecycle::task_done::Attempt;
use crate::core::lifecycle::Operation;
use crate::core::limits::Limits;
use crate::store::durable_records::{Write, Written};
use crate::store::test_fixtures::new;
use crate::store::{Membership, Store, StoreError, Target, TaskHub};

use crate::store::test_fixtures::postgres_url;

fn target(id: &str, execution: i64) -> Target {
    Target {
        id: id.into(),
        execution,
        name: "o".into(),
        digest: "d".into(),
    }
}

fn raise(id: &str, name: &str) -> Write {
    Write::Raise {
        instance: id.into(),
        name: name.into(),
        payload: format!("\"{name}\""),
        limits: Arc::new(Limits::default()),
        due_at: None,
    }
}

fn activity(n: u32) -> Call {
    Call::CallActivity {
        name: format!("step{n}"),
        input: "null".into(),
        retry: None,
    }
}

/// What is compared: status, history size, whether it ran, its inbox's
/// events in order and its pending tasks.
type Seen = (RuntimeStatus, u64, u64, bool, Vec<Event>);

async fn seen(store: &Store, id: &str) -> Result<Option<Seen>, StoreError> {
    Ok(store.image(id).await?.map(|image| {
        let state = &image.loaded.state;
        (
            state.status,
            state.history.events,
            state.history.bytes,
            state.has_run,
            image.inbox.into_iter().map(|row| row.event).collect(),
        )
    }))
}

async fn execution(store: &Store, id: &str) -> Result<i64, StoreError> {
    Ok(store.load(id).await?.map_or(0, |l| l.state.execution))
}

/// Four batches: starts; raises (one on an instance started in the same
/// batch, one on no instance), a start refused, a suspend, an episode that
/// schedules tasks; task results (one twice) and an episode that consumes
/// its inbox and creates a child; then an episode followed by a raise on
/// the same instance and a terminate, which take the statement path.
async fn history(store: &Store) -> Result<Vec<(String, Option<Seen>)>, StoreError> {
    let committer = store.committer();
    let ok = |results: Vec<Result<Written, StoreError>>| -> Result<Vec<Written>, StoreError> {
        results.into_iter().collect()
    };
    ok(committer
        .commit_all(vec![
            Write::Start(new("a")),
            Write::Start(new("b")),
            Write::Start(new("c")),
        ])
        .await)?;
    let c = execution(store, "c").await?;
    let a = execution(store, "a").await?;
    ok(committer
        .commit_all(vec![
            Write::Start(new("d")),
            raise("d", "early"),
            raise("a", "one"),
            raise("a", "two"),
            raise("nobody", "lost"),
            Write::Start(new("a")),
            Write::Manage {
                instance: "b".into(),
                op: Operation::Suspend,
            },
            Write::Episode {
                target: target("c", c),
                replayed: 0,
                effects: vec![
                    Effect::Append {
                        entries: vec![Entry::Call(activity(0)), Entry::Call(activity(1))],
                        at: 1,
                    },
                    Effect::ScheduleTask {
                        task: 0,
                        call: activity(0),
                    },
                    Effect::ScheduleTask {
                        task: 1,
                        call: activity(1),
                    },
                    Effect::SetStatus {
                        status: RuntimeStatus::Running,
                        output: None,
                        custom_status: Some("\"busy\"".into()),
                    },
                ],
            },
        ])
        .await)?;
    // The committer hands posted rows to its sink, not to the writer: the
    // inbox is read back.
    let rows_of = |instance: &'static str| async move {
        Ok::<Vec<i64>, StoreError>(
            store
                .image(instance)
                .await?
                .map(|image| image.inbox.iter().map(|row| row.id).collect())
                .unwrap_or_default(),
        )
    };
    let (a_rows, d_rows) = (rows_of("a").await?, rows_of("d").await?);
    let d = execution(store, "d").await?;
    let done = |task: u32| Write::TaskDone {
        instance: "c".into(),
        attempt: Attempt {
            execution: c,
            task,
            attempt: 0,
            retry: None,
        },
        result: Ok(format!("{task}")),
        limits: Arc::new(Limits::default()),
    };
    ok(committer
        .commit_all(vec![
            done(0),
            done(0),
            done(1),
            Write::Episode {
                target: target("a", a),
                replayed: 0,
                effects: vec![
                    Effect::ConsumeInbox(a_rows),
                    Effect::Append {
                        entries: vec![Entry::Call(Call::Now { value: 7 })],
                        at: 2,
                    },
                    Effect::Create(new("c-child")),
                ],
            },
        ])
        .await)?;
    ok(committer
        .commit_all(vec![
            Write::Episode {
                target: target("d", d),
                replayed: 0,
                effects: vec![
                    Effect::ConsumeInbox(d_rows),
                    Effect::Append {
                        entries: vec![Entry::Call(Call::Now { value: 8 })],
                        at: 3,
                    },
                ],
            },
            raise("d", "late"),
            Write::Manage {
                instance: "b".into(),
                op: Operation::terminate_for("done"),
            },
        ])
        .await)?;
    let mut seen_all = Vec::new();
    for id in ["a", "b", "c", "d", "c-child", "nobody"] {
        seen_all.push((id.to_string(), seen(store, id).await?));
    }
    Ok(seen_all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planned_batch_leaves_what_the_statement_path_leaves() -> Result<(), StoreError> {
    let Some(url) = postgres_url() else {
        eprintln!("skipped: AGENTHOST_TEST_STORE names no PostgreSQL database");
        return Ok(());
    };
    let (_dir, sqlite) = crate::store::test_fixtures::sqlite().await?;
    let expected = history(&sqlite).await?;
    let counted = || {
        use crate::store::postgres::batch::counts;
        use std::sync::atomic::Ordering::Relaxed;
        (
            counts::PLANNED.load(Relaxed),
            counts::STATEMENTS.load(Relaxed),
        )
    };
    // Three batches are planned; the last one takes the statement path.
    // The writer may take a batch's writes in two (they are queued one by
    // one, and a loaded machine lets it wake in between): then no batch
    // needs the statement path, and the history is written again on a
    // fresh hub until one did. Each time it must leave what SQLite left.
    let mut tries = 0;
    loop {
        tries += 1;
        let hub = TaskHub::new(&format!("batch{}", uuid::Uuid::new_v4().simple()))
            .map_err(|e| StoreError::Write(e.to_string()))?;
        let postgres = Store::open(&url, &hub, Membership::default()).await?;
        let before = counted();
        let got = history(&postgres).await?;
        let after = counted();
        postgres.close().await;
        assert_eq!(got, expected);
        assert!(after.0 - before.0 >= 3, "{before:?} → {after:?}");
        if after.1 > before.1 {
            break;
        }
        assert!(
            tries < 10,
            "no batch took the statement path in {tries} tries"
        );
    }
    // Each write did what it should, on both.
    let status = |id: &str| {
        expected
            .iter()
            .find(|(i, _)| i == id)
            .and_then(|(_, seen)| seen.as_ref().map(|s| (s.0, s.1, s.4.len())))
    };
    assert_eq!(status("a"), Some((RuntimeStatus::Pending, 1, 0)));
    assert_eq!(status("b"), Some((RuntimeStatus::Terminated, 0, 0)));
    assert_eq!(status("c"), Some((RuntimeStatus::Running, 2, 2)));
    assert_eq!(status("d"), Some((RuntimeStatus::Pending, 1, 1)));
    assert_eq!(status("c-child"), Some((RuntimeStatus::Pending, 0, 0)));
    assert_eq!(status("nobody"), None);
    Ok(())
}
