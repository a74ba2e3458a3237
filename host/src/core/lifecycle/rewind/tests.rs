use super::*;
use crate::core::lifecycle::fixtures::instance;

fn activity(name: &str) -> Call {
    Call::CallActivity {
        name: name.into(),
        input: "1".into(),
        retry: None,
    }
}

fn failed(task: u32) -> Entry {
    Entry::Event(Event::TaskFailed {
        task,
        error: "boom".into(),
        details: None,
    })
}

#[test]
fn failed_activities_run_again_and_what_succeeded_is_kept() {
    let journal = vec![
        (
            Entry::Call(Call::SdkEpisode {
                ids: vec![0],
                failure: None,
            }),
            10,
        ),
        (Entry::Call(activity("first")), 10),
        (
            Entry::Event(Event::TaskCompleted {
                task: 1,
                result: "\"ok\"".into(),
            }),
            20,
        ),
        (
            Entry::Call(Call::SdkEpisode {
                ids: vec![1],
                failure: None,
            }),
            20,
        ),
        (Entry::Call(activity("second")), 20),
        (failed(3), 30),
        (
            Entry::Call(Call::SdkEpisode {
                ids: Vec::new(),
                failure: Some(Box::new(crate::core::journal::FailureDetails {
                    error_type: "E".into(),
                    message: "boom".into(),
                    stack_trace: None,
                    inner: None,
                    non_retriable: false,
                })),
            }),
            30,
        ),
    ];
    let rewound = decide(
        Some(&instance(RuntimeStatus::Failed)),
        &journal,
        "durabletask-sdk",
        None,
    );
    assert_eq!(rewound.changed.change, Change::Done);
    assert!(rewound.children.is_empty());
    let effects = &rewound.changed.effects;
    assert_eq!(effects[0], Effect::ResetJournal);
    let appended: Vec<(usize, i64)> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Append { entries, at } => Some((entries.len(), *at)),
            _ => None,
        })
        .collect();
    // Each entry keeps its time; the failure and the worker's account of it
    // are gone.
    assert_eq!(appended, vec![(2, 10), (3, 20), (1, 30)]);
    assert!(effects.contains(&Effect::Append {
        entries: vec![Entry::Call(Call::SdkEpisode {
            ids: Vec::new(),
            failure: None
        })],
        at: 30
    }));
    assert!(effects.contains(&Effect::ScheduleTask {
        task: 3,
        call: activity("second")
    }));
    assert!(matches!(
        effects.last(),
        Some(Effect::SetStatus {
            status: RuntimeStatus::Running,
            output: None,
            ..
        })
    ));
}

#[test]
fn a_failed_child_is_named_for_its_own_rewind_or_its_creation_again() {
    let journal = vec![
        (
            Entry::Call(Call::CallOrchestration {
                name: "child".into(),
                input: "2".into(),
                id: None,
            }),
            1,
        ),
        (
            Entry::Call(Call::CallOrchestration {
                name: "named".into(),
                input: "3".into(),
                id: Some("chosen".into()),
            }),
            1,
        ),
        (failed(0), 2),
        (failed(1), 2),
    ];
    let rewound = decide(
        Some(&instance(RuntimeStatus::Failed)),
        &journal,
        "sha256:x",
        Some("set"),
    );
    let ids: Vec<_> = rewound.children.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, vec!["i:7:0", "chosen"]);
    let again = &rewound.children[0].again;
    assert_eq!(
        (
            again.name.as_str(),
            again.digest.as_str(),
            again.activity_set.as_deref()
        ),
        ("child", "sha256:x", Some("set"))
    );
    assert_eq!(
        again.parent.as_ref().map(|p| (p.execution, p.task)),
        Some((7, 0))
    );
    assert!(!rewound
        .changed
        .effects
        .iter()
        .any(|e| matches!(e, Effect::ScheduleTask { .. })));
}

#[test]
fn only_a_failed_instance_is_rewound() {
    let journal = vec![(Entry::Call(activity("a")), 1), (failed(0), 2)];
    for status in [
        RuntimeStatus::Completed,
        RuntimeStatus::Running,
        RuntimeStatus::Terminated,
    ] {
        let rewound = decide(Some(&instance(status)), &journal, "d", None);
        assert_eq!(rewound.changed.change, Change::NotApplicable, "{status:?}");
    }
    assert_eq!(
        decide(None, &journal, "d", None).changed.change,
        Change::NotFound
    );
}

#[test]
fn one_that_failed_in_its_own_code_runs_its_code_again_at_once() {
    let journal = vec![
        (Entry::Call(activity("a")), 1),
        (
            Entry::Event(Event::TaskCompleted {
                task: 0,
                result: "1".into(),
            }),
            2,
        ),
    ];
    let own = decide(Some(&instance(RuntimeStatus::Failed)), &journal, "d", None);
    assert_eq!(own.changed.change, Change::Done);
    let effects = &own.changed.effects;
    // Nothing is scheduled again: what succeeded stays, and the code is
    // offered at once (Pending), as no outcome will wake it.
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::ScheduleTask { .. })),
        "{effects:?}"
    );
    assert!(
        matches!(
            effects.last(),
            Some(Effect::SetStatus {
                status: RuntimeStatus::Pending,
                ..
            })
        ),
        "{effects:?}"
    );
}

#[test]
fn a_caught_failure_stays_and_what_was_under_way_is_scheduled_again() {
    let journal = vec![
        (Entry::Call(activity("a")), 1),
        (failed(0), 2),
        // Caught: the code went on to call b, c and a timer.
        (Entry::Call(activity("b")), 2),
        (Entry::Call(activity("c")), 2),
        (Entry::Call(Call::StartTimer { fire_at: 99 }), 2),
        (failed(1), 3),
    ];
    let rewound = decide(Some(&instance(RuntimeStatus::Failed)), &journal, "d", None);
    let effects = &rewound.changed.effects;
    let kept_failures = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Append { entries, .. } => Some(entries),
            _ => None,
        })
        .flatten()
        .filter(|e| matches!(e, Entry::Event(Event::TaskFailed { .. })))
        .count();
    assert_eq!(
        kept_failures, 1,
        "a's failure is part of the path: {effects:?}"
    );
    let again: Vec<u32> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::ScheduleTask { task, .. } | Effect::ArmTimer { task, .. } => Some(*task),
            _ => None,
        })
        .collect();
    // b failed, c and the timer were under way when it did.
    assert_eq!(again, vec![1, 2, 3]);
}

#[test]
fn a_failure_inside_a_critical_section_is_not_rewound() {
    let lock = Call::LockEntities {
        section: "s".into(),
        entities: vec!["@e@a".into()],
    };
    let unlock = Call::UnlockEntity {
        section: "s".into(),
        entity: "@e@a".into(),
    };
    let inside = vec![
        (Entry::Call(lock.clone()), 1),
        (
            Entry::Event(Event::TaskCompleted {
                task: 0,
                result: "null".into(),
            }),
            2,
        ),
        (Entry::Call(activity("a")), 2),
        (failed(1), 3),
        (Entry::Call(unlock.clone()), 3),
    ];
    let rewound = decide(Some(&instance(RuntimeStatus::Failed)), &inside, "d", None);
    assert_eq!(rewound.changed.change, Change::NotApplicable);
    // Released before the failure: rewound.
    let after = vec![
        (Entry::Call(lock), 1),
        (
            Entry::Event(Event::TaskCompleted {
                task: 0,
                result: "null".into(),
            }),
            2,
        ),
        (Entry::Call(unlock), 2),
        (Entry::Call(activity("a")), 2),
        (failed(2), 3),
    ];
    let rewound = decide(Some(&instance(RuntimeStatus::Failed)), &after, "d", None);
    assert_eq!(rewound.changed.change, Change::Done);
}
