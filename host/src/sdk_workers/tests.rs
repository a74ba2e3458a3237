//! The dispatch of items to SDK workers, driven without a gRPC server: a
//! worker is a connection whose item stream the test reads.

use super::*;
use std::collections::{HashMap, HashSet};

fn patient(for_a_worker: Duration, for_an_answer: Duration) -> Arc<SdkWorkers> {
    SdkWorkers::new(Patience {
        for_a_worker,
        for_an_answer,
    })
}

fn activity(item: Item) -> Option<ActivityItem> {
    match item {
        Item::Activity(item) => Some(item),
        Item::Episode(_) | Item::Entity(_) => None,
    }
}

fn workers() -> Arc<SdkWorkers> {
    patient(Duration::ZERO, Duration::from_secs(60))
}

fn asking(
    workers: &Arc<SdkWorkers>,
    name: &'static str,
) -> tokio::task::JoinHandle<Option<Answer>> {
    let workers = workers.clone();
    tokio::spawn(async move { workers.run_activity(name, "null", "i", 1, 3).await })
}

#[tokio::test]
async fn an_activity_goes_to_a_connected_worker_and_its_answer_comes_back() {
    let workers = workers();
    assert!(workers.run_activity("a", "1", "i", 1, 1).await.is_none());
    let mut connection = workers.connect(Runs::default()).expect("open");
    let asked = asking(&workers, "greet");
    let item = connection
        .items
        .recv()
        .await
        .and_then(activity)
        .expect("an item");
    assert_eq!((item.name.as_str(), item.task_id), ("greet", 3));
    assert!(workers.answer(&item.token, Reply::Activity(Ok("\"hi\"".into()))));
    assert!(!workers.answer(&item.token, Reply::Activity(Ok("again".into()))));
    let answer = asked.await.expect("joined");
    assert!(matches!(answer, Some(Answer::Done(Ok(ref s))) if s == "\"hi\""));
    assert_eq!(workers.in_flight(), 0);
}

/// A worker that runs one activity at once is sent the next when it
/// answers the first: the second waits here, unsent, however long the
/// first takes (past its patience for a worker and for an answer), and
/// the worker's patience for it starts when it is sent.
#[tokio::test]
async fn a_worker_is_sent_no_more_than_it_runs_at_once() {
    let workers = patient(Duration::from_millis(20), Duration::from_millis(1500));
    let runs = Runs {
        capacity: Capacity {
            activities: Some(1),
            ..Capacity::default()
        },
        ..Runs::default()
    };
    let mut connection = workers.connect(runs).expect("open");
    let first = asking(&workers, "one");
    let second = asking(&workers, "two");
    let item = connection
        .items
        .recv()
        .await
        .and_then(activity)
        .expect("an item");
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(connection.items.try_recv().is_err(), "one at a time");
    assert!(workers.answer(&item.token, Reply::Activity(Ok("1".into()))));
    let next = connection
        .items
        .recv()
        .await
        .and_then(activity)
        .expect("the next once the first is answered");
    assert_ne!(next.token, item.token);
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(workers.answer(&next.token, Reply::Activity(Ok("2".into()))));
    for asked in [first, second] {
        assert!(matches!(
            asked.await.expect("joined"),
            Some(Answer::Done(Ok(_)))
        ));
    }
    // A full kind does not hold another back.
    let _busy = asking(&workers, "three");
    let held = connection.items.recv().await.and_then(activity);
    assert!(held.is_some(), "sent");
    let episode = episode_item();
    let episodes = workers.clone();
    let _episode = tokio::spawn(async move {
        let wait = Duration::from_secs(5);
        episodes.run_episode("o", None, episode, wait, wait).await
    });
    assert!(
        matches!(connection.items.recv().await, Some(Item::Episode(_))),
        "an episode goes to a worker whose activities are full"
    );
}

#[tokio::test]
async fn a_worker_that_goes_away_gives_back_what_it_ran() {
    let workers = workers();
    let mut connection = workers.connect(Runs::default()).expect("open");
    let asked = asking(&workers, "slow");
    let item = connection
        .items
        .recv()
        .await
        .and_then(activity)
        .expect("an item");
    drop(connection);
    assert!(matches!(
        asked.await.expect("joined"),
        Some(Answer::Abandoned)
    ));
    assert!(!workers.answer(&item.token, Reply::Activity(Ok("late".into()))));
    assert!(
        workers.run_activity("b", "null", "i", 1, 2).await.is_none(),
        "none left"
    );
}

#[tokio::test]
async fn an_activity_waits_a_while_for_a_worker_to_connect() {
    let workers = patient(Duration::from_secs(30), Duration::from_secs(60));
    let asked = asking(&workers, "late");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut connection = workers.connect(Runs::default()).expect("open");
    let item = connection
        .items
        .recv()
        .await
        .and_then(activity)
        .expect("an item once connected");
    assert!(workers.answer(&item.token, Reply::Activity(Err("no".into()))));
    assert!(matches!(
        asked.await.expect("joined"),
        Some(Answer::Done(Err(_)))
    ));
    let impatient = patient(Duration::from_millis(20), Duration::from_secs(60));
    assert!(impatient
        .run_activity("x", "null", "i", 1, 1)
        .await
        .is_none());
}

#[tokio::test]
async fn a_worker_that_never_answers_has_the_item_taken_back() {
    let workers = patient(Duration::ZERO, Duration::from_millis(50));
    let mut connection = workers.connect(Runs::default()).expect("open");
    let asked = asking(&workers, "stuck");
    let item = connection
        .items
        .recv()
        .await
        .and_then(activity)
        .expect("an item");
    assert!(matches!(
        asked.await.expect("joined"),
        Some(Answer::Abandoned)
    ));
    assert_eq!(workers.in_flight(), 0, "off the books");
    assert!(!workers.answer(&item.token, Reply::Activity(Ok("1".into()))));
}

#[tokio::test]
async fn an_activity_goes_only_to_a_worker_that_runs_it() {
    let workers = workers();
    let mut greeter = workers
        .connect(Runs {
            activities: Some(HashSet::from(["greet".to_string()])),
            ..Runs::default()
        })
        .expect("open");
    assert!(
        workers
            .run_activity("count", "null", "i", 1, 1)
            .await
            .is_none(),
        "no worker runs it"
    );
    let mut any = workers.connect(Runs::default()).expect("open");
    let asked = asking(&workers, "count");
    let item = any
        .items
        .recv()
        .await
        .and_then(activity)
        .expect("the unfiltered worker's");
    assert!(greeter.items.try_recv().is_err());
    assert!(workers.answer(&item.token, Reply::Activity(Ok("1".into()))));
    assert!(matches!(
        asked.await.expect("joined"),
        Some(Answer::Done(Ok(_)))
    ));
}

#[tokio::test]
async fn closing_ends_every_stream_and_refuses_new_workers() {
    let workers = workers();
    let mut connection = workers.connect(Runs::default()).expect("open");
    let asked = asking(&workers, "slow");
    let _item = connection
        .items
        .recv()
        .await
        .and_then(activity)
        .expect("an item");
    workers.close();
    assert!(connection.items.recv().await.is_none(), "the stream ends");
    assert!(matches!(
        asked.await.expect("joined"),
        Some(Answer::Abandoned)
    ));
    assert!(workers.connect(Runs::default()).is_none());
    let waiting = patient(Duration::from_secs(60), Duration::from_secs(60));
    let asked = asking(&waiting, "nobody_yet");
    tokio::time::sleep(Duration::from_millis(20)).await;
    waiting.close();
    let given_up = tokio::time::timeout(Duration::from_secs(5), asked).await;
    assert!(
        matches!(given_up, Ok(Ok(Some(Answer::Abandoned)))),
        "no minute-long wait at shutdown"
    );
}

#[tokio::test]
async fn episodes_and_entity_batches_go_only_to_workers_that_run_them() {
    let workers = workers();
    let mut orchestrations = workers
        .connect(Runs {
            orchestrations: Some(HashMap::from([("seq".to_string(), Vec::new())])),
            entities: Some(HashSet::from(["counter".to_string()])),
            ..Runs::default()
        })
        .expect("open");
    let episode = |name: &'static str| {
        let workers = workers.clone();
        tokio::spawn(async move {
            let item = episode_item();
            workers
                .run_episode(name, None, item, Duration::ZERO, Duration::from_secs(60))
                .await
        })
    };
    // No worker runs `other`: no wait, the instance is offered again.
    assert!(episode("other").await.expect("joined").is_none());
    let asked = episode("seq");
    let Some(Item::Episode(item)) = orchestrations.items.recv().await else {
        panic!("an episode");
    };
    let answer = crate::core::sdk_actions::Answer::default();
    assert!(workers.answer(&item.token, Reply::Episode(answer)));
    assert!(matches!(
        asked.await.expect("joined"),
        Some(EpisodeAnswer::Done(_))
    ));
    // An entity batch, to the worker that named the entity (in any case).
    let batch = EntityItem {
        token: String::new(),
        instance_id: "@counter@a".into(),
        state: None,
        operations: Vec::new(),
    };
    let entity = {
        let workers = workers.clone();
        tokio::spawn(async move {
            workers
                .run_entity("Counter", batch, Duration::from_secs(60))
                .await
        })
    };
    let Some(Item::Entity(item)) = orchestrations.items.recv().await else {
        panic!("an entity batch");
    };
    // An answer of the wrong kind gives the item back.
    assert!(workers.answer(&item.token, Reply::Activity(Ok("1".into()))));
    assert!(matches!(
        entity.await.expect("joined"),
        Some(EntityAnswer::Abandoned)
    ));
}

#[tokio::test]
async fn a_wait_dropped_midway_leaves_nothing_booked() {
    let workers = workers();
    let mut connection = workers.connect(Runs::default()).expect("open");
    let asked = asking(&workers, "slow");
    let _item = connection
        .items
        .recv()
        .await
        .and_then(activity)
        .expect("an item");
    asked.abort();
    let _ = asked.await;
    assert_eq!(workers.in_flight(), 0);
}

#[tokio::test]
async fn a_filter_that_lists_versions_runs_those_versions_alone() {
    let workers = workers();
    let mut strict = workers
        .connect(Runs {
            orchestrations: Some(HashMap::from([("o".to_string(), vec!["2.0".to_string()])])),
            ..Runs::default()
        })
        .expect("open");
    let episode = |version: Option<&'static str>| {
        let workers = workers.clone();
        tokio::spawn(async move {
            let item = episode_item();
            workers
                .run_episode("o", version, item, Duration::ZERO, Duration::from_secs(60))
                .await
        })
    };
    // Another version, or none: no worker runs it; the instance waits.
    assert!(episode(Some("1.0")).await.expect("joined").is_none());
    assert!(episode(None).await.expect("joined").is_none());
    let asked = episode(Some("2.0"));
    let Some(Item::Episode(item)) = strict.items.recv().await else {
        panic!("an episode");
    };
    let answer = crate::core::sdk_actions::Answer::default();
    assert!(workers.answer(&item.token, Reply::Episode(answer)));
    assert!(matches!(
        asked.await.expect("joined"),
        Some(EpisodeAnswer::Done(_))
    ));
}

/// An episode with no history, of instance `i`.
fn episode_item() -> EpisodeItem {
    EpisodeItem {
        token: String::new(),
        instance_id: "i".into(),
        execution: 1,
        past: Vec::new(),
        new: Vec::new(),
    }
}
