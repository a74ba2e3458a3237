//! Starting an instance: a new id, or a finished id started again (a new
//! execution, its old history purged). A running id is refused.

use super::Change;
use crate::core::effects::Effect;
use crate::core::instance::{InstanceState, NewInstance};

/// `Err(NotApplicable)` when an instance with that id exists and is not over.
/// The new execution's number is allocated by the store when it writes
/// `Create`: numbers are never reused, even after a purge.
pub fn decide(existing: Option<&InstanceState>, new: NewInstance) -> Result<Vec<Effect>, Change> {
    match existing {
        Some(s) if !s.status.is_finished() => Err(Change::NotApplicable),
        Some(_) => Ok(vec![Effect::Purge, Effect::Create(new)]),
        None => Ok(vec![Effect::Create(new)]),
    }
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
            parent: None,
            traceparent: None,
        }
    }

    #[test]
    fn a_new_id_is_created() {
        assert_eq!(decide(None, new()), Ok(vec![Effect::Create(new())]));
    }

    #[test]
    fn a_running_id_is_refused() {
        for status in [
            RuntimeStatus::Pending,
            RuntimeStatus::Running,
            RuntimeStatus::Suspended,
        ] {
            assert_eq!(
                decide(Some(&instance(status)), new()),
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
                decide(Some(&instance(status)), new()),
                Ok(vec![Effect::Purge, Effect::Create(new())])
            );
        }
    }
}
