use super::*;
use crate::core::lifecycle::episode_end::Ending;
use crate::core::sdk_actions::{decide, Action, Answer, Completion, Decided};

fn started() -> Started {
    Started {
        name: "seq".into(),
        input: "1".into(),
        instance_id: "i".into(),
        execution: 1,
        parent: None,
        version: None,
    }
}

#[test]
fn an_sdk_digest_carries_the_version_it_was_started_with() {
    assert_eq!(digest_of(None), DIGEST);
    assert_eq!(digest_of(Some("")), DIGEST);
    assert_eq!(digest_of(Some("2.5.0")), "durabletask-sdk@2.5.0");
    assert_eq!(version_of(&digest_of(Some("2.5.0"))), Some("2.5.0"));
    assert_eq!(version_of(DIGEST), None);
    assert!(is_sdk(DIGEST) && is_sdk("durabletask-sdk@1"));
    assert!(!is_sdk("durabletask-sdkx") && !is_sdk("sha256:ab"));
}

fn journal_of(decided: &Decided, arrived: &[Event], at: i64) -> Vec<(Entry, i64)> {
    arrived
        .iter()
        .cloned()
        .map(Entry::Event)
        .chain(decided.calls.iter().cloned().map(Entry::Call))
        .map(|e| (e, at))
        .collect()
}

#[test]
fn an_episode_marker_and_its_actions_replay_as_the_protocol_history() {
    let first = decide(
        &[],
        Answer {
            actions: vec![
                Action::ScheduleTask {
                    id: 1,
                    name: "hello".into(),
                    input: "\"a\"".into(),
                },
                Action::CreateTimer {
                    id: 2,
                    fire_at: 5_000,
                },
            ],
            custom_status: None,
        },
    );
    assert_eq!(first.ending, Ending::Waiting);
    let mut journal = journal_of(&first, &[], 1_000);
    // The activity (task 1: the marker is task 0) completes.
    let done = [Event::TaskCompleted {
        task: 1,
        result: "\"hi\"".into(),
    }];
    let new = new_events(&started(), &journal, &done, 2_000);
    assert_eq!(new.len(), 2);
    assert_eq!(
        new[1].kind,
        Kind::TaskCompleted {
            scheduled: 1,
            result: "\"hi\"".into()
        }
    );
    let second = decide(
        &journal,
        Answer {
            actions: vec![
                Action::CreateSubOrchestration {
                    id: 3,
                    name: "child".into(),
                    input: "null".into(),
                    instance_id: None,
                    version: None,
                    tags: None,
                },
                Action::Complete(Completion::Completed("\"x\"".into())),
            ],
            custom_status: Some("\"s\"".into()),
        },
    );
    assert_eq!(second.ending, Ending::Returned(Ok("\"x\"".into())));
    journal.extend(journal_of(&second, &done, 2_000));
    let history = past(&started(), &journal);
    let kinds: Vec<_> = history
        .iter()
        .map(|e| (e.id, e.at, e.kind.clone()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (-1, 1_000, Kind::OrchestratorStarted),
            (0, 1_000, Kind::ExecutionStarted(started())),
            (
                1,
                1_000,
                Kind::TaskScheduled {
                    name: "hello".into(),
                    input: "\"a\"".into()
                }
            ),
            (2, 1_000, Kind::TimerCreated { fire_at: 5_000 }),
            (-1, 2_000, Kind::OrchestratorStarted),
            (
                -1,
                2_000,
                Kind::TaskCompleted {
                    scheduled: 1,
                    result: "\"hi\"".into()
                }
            ),
            (
                3,
                2_000,
                Kind::SubOrchestrationCreated {
                    // The engine's child id: the fourth call of execution 1.
                    instance_id: "i:1:4".into(),
                    name: "child".into(),
                    input: "null".into()
                }
            ),
        ]
    );
    // The timer's firing names the worker's id and its time.
    let fired = new_events(
        &started(),
        &journal,
        &[Event::TimerFired { task: 2 }],
        6_000,
    );
    assert_eq!(
        fired[1].kind,
        Kind::TimerFired {
            timer: 2,
            fire_at: 5_000
        }
    );
    assert!(
        !fired
            .iter()
            .any(|e| matches!(e.kind, Kind::ExecutionStarted(_))),
        "only the first episode starts the execution"
    );
}

#[test]
fn the_first_episode_starts_the_execution_and_a_retry_reuses_its_id() {
    let new = new_events(&started(), &[], &[], 7);
    assert_eq!(
        new.iter().map(|e| e.kind.clone()).collect::<Vec<_>>(),
        vec![Kind::OrchestratorStarted, Kind::ExecutionStarted(started())]
    );
    // The SDKs schedule a retried activity again under its first id.
    let schedule = || Action::ScheduleTask {
        id: 1,
        name: "flaky".into(),
        input: "null".into(),
    };
    let first = decide(
        &[],
        Answer {
            actions: vec![schedule()],
            custom_status: None,
        },
    );
    let failed = [Event::TaskFailed {
        task: 1,
        error: "no".into(),
        details: None,
    }];
    let mut journal = journal_of(&first, &[], 1);
    let again = decide(
        &journal,
        Answer {
            actions: vec![schedule()],
            custom_status: None,
        },
    );
    journal.extend(journal_of(&again, &failed, 2));
    let later = new_events(
        &started(),
        &journal,
        &[Event::TaskCompleted {
            task: 3,
            result: "1".into(),
        }],
        3,
    );
    assert_eq!(
        later[1].kind,
        Kind::TaskCompleted {
            scheduled: 1,
            result: "1".into()
        }
    );
}
