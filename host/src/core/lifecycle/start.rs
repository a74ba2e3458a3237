//! Starting an instance: a new id, or a finished id started again (a new
//! execution, its old history purged). A running id is refused.

use super::Change;
use crate::core::instance::{InstanceState, NewInstance, ParentRef};
use crate::core::journal::Event;

/// How an instance starts: on a new id, or on a finished one whose old
/// history is purged first.
#[derive(Debug, Clone, PartialEq)]
pub enum Start {
    Fresh(NewInstance),
    Again(NewInstance),
}

/// `Err(NotApplicable)` when an instance with that id exists and is not over.
/// The new execution's number is allocated by the store when it creates the
/// instance: numbers are never reused, even after a purge.
pub fn plan(existing: Option<&InstanceState>, new: NewInstance) -> Result<Start, Change> {
    match existing {
        Some(s) if !s.status.is_finished() => Err(Change::NotApplicable),
        Some(_) => Ok(Start::Again(new)),
        None => Ok(Start::Fresh(new)),
    }
}

/// Who a finished instance started again belongs to, or
/// `Err(NotApplicable)` when `by` may not start it again: the invoke key
/// that owns it (`owner`) may, and so may a caller who reaches every
/// instance (`by` is `None`: an admin key, the gRPC endpoint, a host without
/// keys), which leaves it its owner; any other caller is refused, as a start
/// of a running id is, and nothing of the instance is touched. For a
/// sub-orchestration, `by` is its parent's caller.
pub fn claim(owner: Option<&str>, by: Option<&str>) -> Result<Option<String>, Change> {
    match by {
        None => Ok(owner.map(str::to_string)),
        Some(by) if owner == Some(by) => Ok(Some(by.to_string())),
        Some(_) => Err(Change::NotApplicable),
    }
}

/// A sub-orchestration whose id is taken by a running instance (only a
/// caller who made the same id by hand can collide with a derived child
/// id): its parent's task fails, with the reason. `None` for an instance
/// without a parent, whose starter is refused instead.
pub fn collision(new: &NewInstance) -> Option<(&ParentRef, Event)> {
    let parent = new.parent.as_ref()?;
    let event = Event::TaskFailed {
        task: parent.task,
        error: format!("instance {} already exists", new.id),
        details: None,
    };
    Some((parent, event))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::instance::RuntimeStatus;
    use crate::core::lifecycle::fixtures::instance;

    fn new() -> NewInstance {
        NewInstance {
            id: "i".into(),
            name: "o".into(),
            input: "1".into(),
            digest: "d".into(),
            activity_set: None,
            parent: None,
            traceparent: None,
            start_at: None,
            caller: None,
        }
    }

    #[test]
    fn a_child_whose_id_is_taken_fails_its_parents_task_and_a_top_level_start_has_no_parent_to_tell(
    ) {
        assert_eq!(collision(&new()), None);
        let parent = crate::core::instance::ParentRef {
            id: "p".into(),
            execution: 2,
            task: 5,
        };
        let child = NewInstance {
            parent: Some(parent.clone()),
            ..new()
        };
        let (to, event) = collision(&child).expect("a child has a parent");
        assert_eq!(to, &parent);
        assert_eq!(
            event,
            Event::TaskFailed {
                task: 5,
                error: "instance i already exists".into(),
                details: None,
            }
        );
    }

    #[test]
    fn a_finished_id_starts_again_for_its_owner_or_a_caller_of_full_reach_and_keeps_its_owner() {
        assert_eq!(
            claim(Some("key:a"), Some("key:a")),
            Ok(Some("key:a".into()))
        );
        assert_eq!(claim(Some("key:a"), None), Ok(Some("key:a".into())));
        assert_eq!(claim(None, None), Ok(None));
        assert_eq!(
            claim(Some("key:a"), Some("key:b")),
            Err(Change::NotApplicable)
        );
        assert_eq!(
            claim(None, Some("key:b")),
            Err(Change::NotApplicable),
            "one an admin started is no invoke key's"
        );
    }

    #[test]
    fn a_new_id_is_created() {
        assert_eq!(plan(None, new()), Ok(Start::Fresh(new())));
    }

    #[test]
    fn a_running_id_is_refused() {
        for status in [
            RuntimeStatus::Pending,
            RuntimeStatus::Running,
            RuntimeStatus::Suspended,
        ] {
            assert_eq!(
                plan(Some(&instance(status)), new()),
                Err(Change::NotApplicable)
            );
        }
    }

    #[test]
    fn restarting_a_finished_id_purges_it_and_begins_a_new_execution() {
        for status in [
            RuntimeStatus::Completed,
            RuntimeStatus::Failed,
            RuntimeStatus::Terminated,
        ] {
            assert_eq!(
                plan(Some(&instance(status)), new()),
                Ok(Start::Again(new()))
            );
        }
    }
}
