//! Purging an instance: a finished one is deleted with its history; a running
//! one must be terminated first.

use super::{Change, Changed};
use crate::core::effects::Effect;
use crate::core::instance::InstanceState;

pub fn decide(state: Option<&InstanceState>) -> Changed {
    match state {
        None => Changed::only(Change::NotFound),
        Some(s) if s.status.is_finished() => Changed::done(vec![Effect::Purge]),
        Some(_) => Changed::only(Change::NotApplicable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::instance::RuntimeStatus;
    use crate::core::lifecycle::fixtures::instance;

    #[test]
    fn only_a_finished_instance_is_purged() {
        assert_eq!(
            decide(Some(&instance(RuntimeStatus::Failed))).effects,
            vec![Effect::Purge]
        );
        assert_eq!(
            decide(Some(&instance(RuntimeStatus::Running))).change,
            Change::NotApplicable
        );
        assert_eq!(decide(None).change, Change::NotFound);
    }
}
