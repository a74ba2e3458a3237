use super::*;

fn caller(id: &str, task: u32) -> Caller {
    Caller {
        id: id.into(),
        execution: 1,
        task,
    }
}

fn call(from: &str, operation: &str) -> Event {
    sdk_entities::operation_event(&Operation {
        request_id: format!("{from}-{operation}"),
        operation: operation.into(),
        input: None,
        caller: Some(caller(from, 9)),
    })
}

fn signal(operation: &str) -> Event {
    sdk_entities::operation_event(&Operation {
        request_id: operation.into(),
        operation: operation.into(),
        input: None,
        caller: None,
    })
}

fn lock(owner: &str, section: &str, set: &[&str], position: usize) -> Event {
    lock_event(&LockRequest {
        section: section.into(),
        lock_set: set.iter().map(|s| s.to_string()).collect(),
        position,
        owner: caller(owner, 3),
    })
}

fn unlock(owner: &str, section: &str) -> Event {
    unlock_event(&Unlock {
        section: section.into(),
        owner: owner.into(),
    })
}

fn held_by(owner: &str, section: &str) -> Option<Lock> {
    Some(Lock {
        owner: owner.into(),
        section: section.into(),
        execution: 1,
    })
}

fn rows(events: Vec<Event>) -> Vec<(i64, Event)> {
    events
        .into_iter()
        .enumerate()
        .map(|(i, e)| (i as i64 + 1, e))
        .collect()
}

fn take_all(_: &Operation) -> Admit {
    Admit::Take
}

fn ops(sorted: &Sorted) -> Vec<&str> {
    sorted
        .operations
        .iter()
        .map(|o| o.request_id.as_str())
        .collect()
}

#[test]
fn a_request_passes_along_the_set_and_the_last_entity_grants_it() {
    let set = ["@e@a", "@e@b"];
    let first = sort(
        "@e@a",
        None,
        rows(vec![lock("o", "s", &set, 0)]),
        &HashSet::new(),
        take_all,
    );
    assert_eq!(first.lock, held_by("o", "s"));
    assert!(first.lock_changed);
    assert_eq!(first.consumed, vec![1]);
    let [Effect::EntityOperation { entity, event, .. }] = first.effects.as_slice() else {
        panic!("passed on: {:?}", first.effects)
    };
    assert_eq!(entity.id, "@e@b");
    assert!(matches!(message_of(event), Message::Lock(r) if r.position == 1 && r.section == "s"));
    let last = sort(
        "@e@b",
        None,
        rows(vec![lock("o", "s", &set, 1)]),
        &HashSet::new(),
        take_all,
    );
    assert!(last.effects.is_empty());
    let [granted] = last.granted.as_slice() else {
        panic!("granted: {last:?}")
    };
    assert!(matches!(
        grant(granted.clone()),
        Effect::NotifyParent { parent, event: Event::TaskCompleted { task: 3, .. } } if parent.id == "o"
    ));
    // An owner gone before its grant: the whole set is released.
    let released = abandon(granted.clone());
    let targets: Vec<_> = released
        .iter()
        .map(|e| match e {
            Effect::EntityOperation { entity, event, .. } => (entity.id.clone(), message_of(event)),
            other => panic!("a release: {other:?}"),
        })
        .collect();
    let unlock = || {
        Message::Unlock(Unlock {
            section: "s".into(),
            owner: "o".into(),
        })
    };
    assert_eq!(
        targets,
        vec![("@e@a".into(), unlock()), ("@e@b".into(), unlock())]
    );
}

#[test]
fn a_held_entity_runs_its_owners_calls_and_keeps_the_rest_waiting_in_order() {
    let sorted = sort(
        "@e@a",
        held_by("o", "s"),
        rows(vec![
            call("x", "first"),
            signal("second"),
            call("o", "mine"),
            lock("y", "t", &["@e@a"], 0),
        ]),
        &HashSet::from([1]),
        take_all,
    );
    assert_eq!(ops(&sorted), vec!["o-mine"]);
    assert_eq!(sorted.consumed, vec![3]);
    // Row 1 waits parked already; the others are parked now.
    assert_eq!(sorted.park, vec![2, 4]);
    assert!(!sorted.lock_changed);
    assert!(sorted.effects.is_empty(), "{:?}", sorted.effects);
}

#[test]
fn a_release_lets_what_waited_run_first_then_the_next_section_take_the_lock() {
    let sorted = sort(
        "@e@a",
        held_by("o", "s"),
        rows(vec![
            call("x", "first"),
            lock("y", "t", &["@e@a"], 0),
            signal("second"),
            call("o", "mine"),
            unlock("o", "s"),
            signal("after"),
        ]),
        &HashSet::from([1, 2, 3]),
        take_all,
    );
    // x's call ran, then y took the lock: the signals wait for y's release.
    assert_eq!(ops(&sorted), vec!["o-mine", "x-first"]);
    assert_eq!(sorted.lock, held_by("y", "t"));
    assert_eq!(sorted.consumed, vec![4, 5, 1, 2]);
    assert_eq!(sorted.park, vec![6], "row 3 is parked already");
    assert!(matches!(sorted.granted.as_slice(), [granted] if granted.owner.id == "y"));
}

#[test]
fn a_late_or_foreign_release_changes_nothing() {
    for release in [unlock("o", "old"), unlock("x", "s")] {
        let sorted = sort(
            "@e@a",
            held_by("o", "s"),
            rows(vec![release, signal("waits")]),
            &HashSet::new(),
            take_all,
        );
        assert_eq!(sorted.lock, held_by("o", "s"));
        assert_eq!(
            (sorted.consumed.clone(), sorted.park.clone()),
            (vec![1], vec![2])
        );
    }
    let free = sort(
        "@e@a",
        None,
        rows(vec![unlock("o", "s")]),
        &HashSet::new(),
        take_all,
    );
    assert_eq!(
        (free.lock, free.lock_changed, free.consumed),
        (None, false, vec![1])
    );
}

#[test]
fn a_full_batch_leaves_the_rest_and_wakes_the_entity_for_parked_rows() {
    let mut taken = 0;
    let sorted = sort(
        "@e@a",
        held_by("o", "s"),
        rows(vec![call("x", "one"), call("x", "two"), unlock("o", "s")]),
        &HashSet::from([1, 2]),
        |_| {
            taken += 1;
            if taken == 1 {
                Admit::Take
            } else {
                Admit::Stop
            }
        },
    );
    assert_eq!(ops(&sorted), vec!["x-one"]);
    assert_eq!(sorted.consumed, vec![3, 1]);
    assert!(sorted.park.is_empty());
    let [Effect::EntityOperation { entity, event, .. }] = sorted.effects.as_slice() else {
        panic!("a wake: {:?}", sorted.effects)
    };
    assert_eq!(
        (entity.id.as_str(), message_of(event)),
        ("@e@a", Message::Wake)
    );
}

#[test]
fn an_ending_orchestration_releases_what_it_still_holds() {
    let calls = [
        Call::LockEntities {
            section: "s".into(),
            entities: vec!["@e@a".into(), "@e@b".into()],
        },
        Call::UnlockEntity {
            section: "s".into(),
            entity: "@e@a".into(),
        },
    ];
    let held = held(&calls);
    assert_eq!(held, vec![("s".to_string(), "@e@b".to_string())]);
    let released = releases("o", held);
    let [Effect::EntityOperation { entity, event, .. }] = released.as_slice() else {
        panic!("one release: {released:?}")
    };
    assert_eq!(entity.id, "@e@b");
    assert_eq!(
        message_of(event),
        Message::Unlock(Unlock {
            section: "s".into(),
            owner: "o".into()
        })
    );
    assert_eq!(
        lock_of(Some(&status_of(held_by("o", "s").as_ref()))),
        held_by("o", "s")
    );
    assert_eq!(lock_of(Some(&status_of(None))), None);
}
