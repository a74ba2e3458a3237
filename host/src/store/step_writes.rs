//! The writes of one durable step on both stores: an arrival (a task's
//! result, a raised event) with the episode run on it
//! ([`Write::ArrivalAndEpisode`]), and, on PostgreSQL,
//! episodes written under their fence without a read
//! ([`super::postgres::batch`]) and the careful retry when a fence or a new
//! child's id does not hold. Each test runs on SQLite, and again on
//! PostgreSQL when `AGENTHOST_TEST_STORE` names one (`make test` does).

use std::sync::Arc;

use crate::core::effects::Effect;
use crate::core::instance::RuntimeStatus;
use crate::core::journal::{Call, Entry, Event};
use crate::core::lifecycle::task_done::Attempt;
use crate::core::lifecycle::Operation;
use crate::core::limits::Limits;
use crate::store::durable_records::{ArrivalWritten, Arriving, Write, Written};
use crate::store::test_fixtures::new;
use crate::store::{Store, StoreError, Target, TaskFate};

async fn stores() -> Result<Vec<(Store, Option<tempfile::TempDir>)>, StoreError> {
    crate::store::test_fixtures::both("steps").await
}

fn activity(n: u32) -> Call {
    Call::CallActivity {
        name: format!("step{n}"),
        input: "null".into(),
        retry: None,
    }
}

fn target(id: &str, execution: i64) -> Target {
    Target {
        id: id.into(),
        execution,
        name: "o".into(),
        digest: "d".into(),
    }
}

fn attempt(execution: i64, task: u32, attempt: u32) -> Attempt {
    Attempt {
        execution,
        task,
        attempt,
        retry: None,
    }
}

/// Starts `id` and commits its first episode, which schedules task 0;
/// returns its execution.
async fn running(store: &Store, id: &str) -> Result<i64, StoreError> {
    store.start(new(id)).await?;
    let execution = store.load(id).await?.map_or(0, |l| l.state.execution);
    let first = vec![
        Effect::Append {
            entries: vec![Entry::Call(activity(0))],
            at: 1,
        },
        Effect::ScheduleTask {
            task: 0,
            call: activity(0),
        },
        Effect::SetStatus {
            status: RuntimeStatus::Running,
            output: None,
            custom_status: None,
        },
    ];
    let applied = store
        .commit_episode(target(id, execution), 0, first)
        .await?;
    assert!(applied.is_some(), "the first episode commits");
    Ok(execution)
}

/// The episode that took task 0's result: it journals the result and
/// schedules task 1.
fn next_step(result: &str) -> Vec<Effect> {
    vec![
        Effect::Append {
            entries: vec![
                Entry::Event(Event::TaskCompleted {
                    task: 0,
                    result: result.into(),
                }),
                Entry::Call(activity(1)),
            ],
            at: 2,
        },
        Effect::ScheduleTask {
            task: 1,
            call: activity(1),
        },
        Effect::SetStatus {
            status: RuntimeStatus::Running,
            output: None,
            custom_status: None,
        },
    ]
}

/// (history events, inbox events, due tasks as (execution, task)) of `id`.
async fn seen(store: &Store, id: &str) -> Result<(u64, Vec<Event>, Vec<u32>), StoreError> {
    let image = store
        .image(id)
        .await?
        .ok_or_else(|| StoreError::Write(format!("no instance {id}")))?;
    let mut tasks: Vec<u32> = store
        .due_tasks(i64::MAX, 100, 0)
        .await?
        .into_iter()
        .filter(|t| t.instance_id() == id)
        .map(|t| t.task())
        .collect();
    tasks.sort_unstable();
    Ok((
        image.loaded.state.history.events,
        image.inbox.into_iter().map(|r| r.event).collect(),
        tasks,
    ))
}

async fn result_and_episode(
    store: &Store,
    id: &str,
    execution: i64,
    replayed: u64,
    tried: Attempt,
    effects: Vec<Effect>,
) -> Result<ArrivalWritten, StoreError> {
    let arriving = Arriving::Result {
        attempt: tried,
        result: Ok("\"r0\"".into()),
    };
    store
        .arrival_and_episode(
            arriving,
            target(id, execution),
            replayed,
            effects,
            Arc::new(Limits::default()),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_and_the_episode_run_on_it_are_written_together_never_through_the_inbox(
) -> Result<(), StoreError> {
    for (store, _dir) in stores().await? {
        let execution = running(&store, "a").await?;
        let written = result_and_episode(
            &store,
            "a",
            execution,
            1,
            attempt(execution, 0, 0),
            next_step("\"r0\""),
        )
        .await?;
        let ArrivalWritten::WithEpisode(applied) = written else {
            panic!("{written:?} on {:?}", store.kind());
        };
        assert_eq!(applied.tasks.len(), 1, "task 1 is dispatched");
        assert!(applied.posted.is_empty(), "nothing entered the inbox");
        assert_eq!(seen(&store, "a").await?, (3, Vec::new(), vec![1]));
        store.close().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_whose_attempt_or_instance_moved_on_is_written_alone_as_any_other(
) -> Result<(), StoreError> {
    for (store, _dir) in stores().await? {
        let kind = store.kind();
        // The task waits for attempt 0, not 1: the result is stale.
        let execution = running(&store, "stale").await?;
        let written = result_and_episode(
            &store,
            "stale",
            execution,
            1,
            attempt(execution, 0, 1),
            next_step("\"r0\""),
        )
        .await?;
        assert!(
            matches!(written, ArrivalWritten::Result(TaskFate::Dropped, _)),
            "{written:?} on {kind:?}"
        );
        assert_eq!(seen(&store, "stale").await?, (1, Vec::new(), vec![0]));

        // The episode replayed a journal that is not the stored one: the
        // result is delivered to the inbox, the episode dropped.
        let execution = running(&store, "moved").await?;
        let written = result_and_episode(
            &store,
            "moved",
            execution,
            0,
            attempt(execution, 0, 0),
            next_step("\"r0\""),
        )
        .await?;
        assert!(
            matches!(written, ArrivalWritten::Result(TaskFate::Delivered, _)),
            "{written:?} on {kind:?}"
        );
        let delivered = Event::TaskCompleted {
            task: 0,
            result: "\"r0\"".into(),
        };
        assert_eq!(
            seen(&store, "moved").await?,
            (1, vec![delivered], Vec::new())
        );

        // A suspended instance takes the result into its inbox.
        let execution = running(&store, "held").await?;
        store.manage("held", Operation::Suspend).await?;
        let written = result_and_episode(
            &store,
            "held",
            execution,
            1,
            attempt(execution, 0, 0),
            next_step("\"r0\""),
        )
        .await?;
        assert!(
            matches!(written, ArrivalWritten::Result(TaskFate::Delivered, _)),
            "{written:?} on {kind:?}"
        );
        store.close().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_step_ends_the_instance_and_drops_its_other_pending_work() -> Result<(), StoreError>
{
    for (store, _dir) in stores().await? {
        let execution = running(&store, "end").await?;
        // A second task and a timer are pending besides task 0.
        let more = vec![
            Effect::Append {
                entries: vec![
                    Entry::Call(activity(1)),
                    Entry::Call(Call::StartTimer { fire_at: 10 }),
                ],
                at: 2,
            },
            Effect::ScheduleTask {
                task: 1,
                call: activity(1),
            },
            Effect::ArmTimer {
                task: 2,
                fire_at: i64::MAX,
            },
        ];
        assert!(store
            .commit_episode(target("end", execution), 1, more)
            .await?
            .is_some());
        assert_eq!(seen(&store, "end").await?.2, vec![0, 1]);
        let finish = vec![
            Effect::Append {
                entries: vec![Entry::Event(Event::TaskCompleted {
                    task: 0,
                    result: "\"r0\"".into(),
                })],
                at: 3,
            },
            Effect::SetStatus {
                status: RuntimeStatus::Completed,
                output: Some("\"done\"".into()),
                custom_status: None,
            },
            Effect::DropPending,
        ];
        let written = result_and_episode(
            &store,
            "end",
            execution,
            3,
            attempt(execution, 0, 0),
            finish,
        )
        .await?;
        assert!(
            matches!(written, ArrivalWritten::WithEpisode(_)),
            "{written:?} on {:?}",
            store.kind()
        );
        let image = store.image("end").await?;
        assert_eq!(
            image.as_ref().map(|i| i.loaded.state.status),
            Some(RuntimeStatus::Completed)
        );
        assert_eq!(seen(&store, "end").await?, (4, Vec::new(), Vec::new()));
        store.close().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_episode_whose_instance_moved_on_or_whose_child_exists_is_decided_on_what_is_stored(
) -> Result<(), StoreError> {
    for (store, _dir) in stores().await? {
        let kind = store.kind();
        let fenced_before = counted();
        // Two episodes on one journal: the second's fence no longer holds.
        let execution = running(&store, "twice").await?;
        assert!(store
            .commit_episode(target("twice", execution), 1, next_step("\"a\""))
            .await?
            .is_some());
        let late = store
            .commit_episode(target("twice", execution), 1, next_step("\"b\""))
            .await?;
        assert!(late.is_none(), "refused on {kind:?}");
        assert_eq!(seen(&store, "twice").await?.0, 3, "written once");

        // A terminated instance takes no episode.
        let execution = running(&store, "ended").await?;
        store
            .manage("ended", Operation::terminate_for("stop"))
            .await?;
        assert!(store
            .commit_episode(target("ended", execution), 1, next_step("\"c\""))
            .await?
            .is_none());

        // A child whose id is taken by a running instance: the parent is
        // told (the core's collision rule), on either store.
        let execution = running(&store, "parent").await?;
        let mut taken = new("parent-child");
        taken.name = "other".into();
        store.start(taken).await?;
        let mut child = new("parent-child");
        child.parent = Some(crate::core::instance::ParentRef {
            id: "parent".into(),
            execution,
            task: 1,
        });
        let spawn = vec![
            Effect::Append {
                entries: vec![Entry::Call(Call::CallOrchestration {
                    name: "o".into(),
                    input: "null".into(),
                    id: None,
                })],
                at: 2,
            },
            Effect::Create(child),
        ];
        let applied = store
            .commit_episode(target("parent", execution), 1, spawn)
            .await?;
        assert!(applied.is_some(), "the parent's episode commits");
        let (_, inbox, _) = seen(&store, "parent").await?;
        assert!(
            matches!(inbox.as_slice(), [Event::TaskFailed { task: 1, .. }]),
            "the parent hears the child could not start, on {kind:?}: {inbox:?}"
        );
        if kind == crate::store::Kind::Postgres {
            let fenced = counted() - fenced_before;
            assert!(fenced >= 3, "episodes went under their fence: {fenced}");
        }
        store.close().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entity_batch_decided_before_another_committed_is_refused_and_a_start_keeps_a_held_id(
) -> Result<(), StoreError> {
    use crate::core::sdk_entities;
    for (store, _dir) in stores().await? {
        let kind = store.kind();
        let Some(entity) = sdk_entities::new_instance("@counter@k") else {
            panic!("an entity id");
        };
        store.start(entity.clone()).await?;
        let execution = store
            .load(&entity.id)
            .await?
            .map_or(0, |l| l.state.execution);
        let on = Target {
            id: entity.id.clone(),
            execution,
            name: entity.name.clone(),
            digest: entity.digest.clone(),
        };
        let batch = |state: &str| {
            vec![
                Effect::SetStatus {
                    status: RuntimeStatus::Running,
                    output: Some(state.to_string()),
                    custom_status: None,
                },
                Effect::Stepped,
            ]
        };
        // Two batches decided on one state (no journal row between them):
        // the second, stale, is refused, and the state is the first's.
        assert!(store
            .commit_episode(on.clone(), 0, batch("1"))
            .await?
            .is_some());
        let stale = store.commit_episode(on.clone(), 0, batch("7")).await?;
        assert!(stale.is_none(), "a stale batch is refused on {kind:?}");
        let output = store.instance(&entity.id).await?.and_then(|r| r.output);
        assert_eq!(output.as_deref(), Some("1"), "on {kind:?}");
        assert!(store
            .commit_episode(on.clone(), 1, batch("2"))
            .await?
            .is_some());

        // A start whose id a running instance holds leaves that one be; the
        // batch that asked for it commits.
        running(&store, "held").await?;
        let mut start = new("held");
        start.name = "other".into();
        let mut effects = batch("3");
        effects.push(Effect::Start(start));
        effects.push(Effect::Start(new("fresh")));
        assert!(store.commit_episode(on, 2, effects).await?.is_some());
        let held = store.instance("held").await?.map(|r| r.name);
        assert_eq!(held.as_deref(), Some("o"), "on {kind:?}");
        assert!(store.instance("fresh").await?.is_some(), "on {kind:?}");
        store.close().await;
    }
    Ok(())
}

/// Batches whose fences did not hold so far (PostgreSQL).
fn refused() -> u64 {
    crate::store::postgres::batch::counts::MOVED_ON.load(std::sync::atomic::Ordering::Relaxed)
}

/// Episodes written under their fence so far (PostgreSQL).
fn counted() -> u64 {
    crate::store::postgres::batch::counts::FENCED.load(std::sync::atomic::Ordering::Relaxed)
}

/// An arrival with its episode sent with another write on its instance in
/// the same batch: both decided in order, on what is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_and_a_raise_on_one_instance_in_one_batch_are_decided_in_order(
) -> Result<(), StoreError> {
    for (store, _dir) in stores().await? {
        let execution = running(&store, "both").await?;
        let results = store
            .committer()
            .commit_all(vec![
                Write::Raise {
                    instance: "both".into(),
                    name: "go".into(),
                    payload: "1".into(),
                    limits: Arc::new(Limits::default()),
                    due_at: None,
                },
                Write::ArrivalAndEpisode {
                    arriving: Arriving::Result {
                        attempt: attempt(execution, 0, 0),
                        result: Ok("\"r0\"".into()),
                    },
                    target: target("both", execution),
                    replayed: 1,
                    effects: next_step("\"r0\""),
                    limits: Arc::new(Limits::default()),
                },
            ])
            .await;
        let results: Vec<Written> = results.into_iter().collect::<Result<_, _>>()?;
        assert!(matches!(
            &results[1],
            Written::ArrivalAndEpisode(ArrivalWritten::WithEpisode(_))
        ));
        let raised = Event::EventRaised {
            name: "go".into(),
            payload: "1".into(),
        };
        assert_eq!(seen(&store, "both").await?, (3, vec![raised], vec![1]));
        store.close().await;
    }
    Ok(())
}

/// The episode an event raised at `id` wakes: it journals the event and
/// ends the instance.
fn takes_event(name: &str, payload: &str) -> Vec<Effect> {
    vec![
        Effect::Append {
            entries: vec![Entry::Event(Event::EventRaised {
                name: name.into(),
                payload: payload.into(),
            })],
            at: 2,
        },
        Effect::SetStatus {
            status: RuntimeStatus::Completed,
            output: Some(payload.into()),
            custom_status: None,
        },
        Effect::DropPending,
    ]
}

/// The event `go` in hand at `id`, with the episode that takes it, run on
/// an image whose inbox held `held` rows.
async fn event_and_episode(
    store: &Store,
    id: &str,
    execution: i64,
    replayed: u64,
    held: u64,
    limits: Limits,
) -> Result<ArrivalWritten, StoreError> {
    let arriving = Arriving::Event {
        name: "go".into(),
        payload: "1".into(),
        held,
    };
    store
        .arrival_and_episode(
            arriving,
            target(id, execution),
            replayed,
            takes_event("go", "1"),
            Arc::new(limits),
        )
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_event_is_taken_by_its_episode_or_stored_as_a_raise_would_store_it(
) -> Result<(), StoreError> {
    for (store, _dir) in stores().await? {
        let kind = store.kind();
        // Taken: the instance ends, nothing waits in its inbox.
        let execution = running(&store, "taken").await?;
        let written =
            event_and_episode(&store, "taken", execution, 1, 0, Limits::default()).await?;
        assert!(
            matches!(written, ArrivalWritten::WithEpisode(_)),
            "{written:?} on {kind:?}"
        );
        let (events, inbox, tasks) = seen(&store, "taken").await?;
        assert_eq!((events, inbox.len(), tasks.len()), (2, 0, 0));
        let status = store.image("taken").await?.map(|i| i.loaded.state.status);
        assert_eq!(status, Some(RuntimeStatus::Completed));

        // The episode ran on a journal that moved on: the event waits in
        // the inbox, as a raise leaves it.
        let execution = running(&store, "late").await?;
        let written = event_and_episode(&store, "late", execution, 0, 0, Limits::default()).await?;
        assert!(
            matches!(
                written,
                ArrivalWritten::Event(Ok(crate::core::lifecycle::Change::Done), _)
            ),
            "{written:?} on {kind:?}"
        );
        assert_eq!(seen(&store, "late").await?.1.len(), 1);

        // A finished instance takes no event, with or without an episode.
        let execution = running(&store, "over").await?;
        store
            .manage("over", Operation::terminate_for("stop"))
            .await?;
        let written = event_and_episode(&store, "over", execution, 1, 0, Limits::default()).await?;
        assert!(
            matches!(
                written,
                ArrivalWritten::Event(Ok(crate::core::lifecycle::Change::Finished), _)
            ),
            "{written:?} on {kind:?}"
        );
        store.close().await;
    }
    Ok(())
}

/// An event in hand whose episode did not see a row already in the inbox
/// (another host of the hub raised it) is not taken with its episode: it
/// is stored as a raise would store it, and that row stays first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_in_hand_never_overtakes_an_inbox_row_its_episode_did_not_see(
) -> Result<(), StoreError> {
    for (store, _dir) in stores().await? {
        let kind = store.kind();
        let execution = running(&store, "behind").await?;
        let limits = Arc::new(Limits::default());
        let (raised, _) = store.raise("behind", "go", "0", limits).await?;
        assert!(matches!(raised, Ok(crate::core::lifecycle::Change::Done)));
        // Its episode ran on an image with an empty inbox.
        let written =
            event_and_episode(&store, "behind", execution, 1, 0, Limits::default()).await?;
        assert!(
            matches!(
                written,
                ArrivalWritten::Event(Ok(crate::core::lifecycle::Change::Done), _)
            ),
            "{written:?} on {kind:?}"
        );
        let (events, inbox, _) = seen(&store, "behind").await?;
        let payloads: Vec<&str> = inbox
            .iter()
            .filter_map(|event| {
                let Event::EventRaised { payload, .. } = event else {
                    return None;
                };
                Some(payload.as_str())
            })
            .collect();
        assert_eq!((events, payloads), (1, vec!["0", "1"]), "on {kind:?}");

        // One that saw the row is taken with its episode; on PostgreSQL
        // under its fence, which holds.
        let execution = running(&store, "after").await?;
        let (raised, _) = store
            .raise("after", "other", "0", Arc::new(Limits::default()))
            .await?;
        assert!(matches!(raised, Ok(crate::core::lifecycle::Change::Done)));
        let moved_on = refused();
        let written =
            event_and_episode(&store, "after", execution, 1, 1, Limits::default()).await?;
        assert!(
            matches!(written, ArrivalWritten::WithEpisode(_)),
            "{written:?} on {kind:?}"
        );
        assert_eq!(
            refused(),
            moved_on,
            "a fence that held was refused on {kind:?}"
        );
        store.close().await;
    }
    Ok(())
}

/// A version move (what a replay check proved) is written only on the
/// journal the check read, and an episode the old code decided on that
/// journal before the move is refused after it: the move counts a step, so
/// the old code's decisions never land under the new version. On both
/// stores; the move's statement path on PostgreSQL (a planned batch falls
/// back for it).
#[tokio::test]
async fn a_version_move_lands_only_on_the_journal_it_was_checked_on() -> Result<(), StoreError> {
    for (store, _dir) in stores().await? {
        let execution = running(&store, "moved").await?;
        let upgrade = || {
            vec![Effect::Upgrade {
                digest: "d2".into(),
                activity_set: None,
            }]
        };
        // Checked on an empty journal: the instance has taken a step since.
        let stale = store
            .commit_episode(target("moved", execution), 0, upgrade())
            .await?;
        assert!(stale.is_none(), "a move on a journal that grew is refused");
        let (events, ..) = seen(&store, "moved").await?;
        assert_eq!(events, 1);
        // Checked on the journal as it is: moved, one step counted.
        let moved = store
            .commit_episode(target("moved", execution), 1, upgrade())
            .await?;
        assert!(moved.is_some(), "the move commits");
        let loaded = store
            .load("moved")
            .await?
            .ok_or(StoreError::Write("gone".into()))?;
        assert_eq!(loaded.digest, "d2");
        assert_eq!(loaded.state.history.events, 2);
        // The old code's episode, decided on the journal before the move.
        let late = store
            .commit_episode(target("moved", execution), 1, next_step("\"r0\""))
            .await?;
        assert!(
            late.is_none(),
            "an episode decided before the move is refused"
        );
        let (events, ..) = seen(&store, "moved").await?;
        assert_eq!(events, 2, "nothing of the late episode was written");
    }
    Ok(())
}
