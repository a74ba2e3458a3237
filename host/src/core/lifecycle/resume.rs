//! Resuming a suspended instance. One that never ran goes back to Pending so
//! its first episode runs; the others to Running, and consume what their
//! inbox gathered meanwhile.

use super::{refuse_missing_or_finished, Change, Changed};
use crate::core::effects::Effect;
use crate::core::instance::{InstanceState, RuntimeStatus};

pub fn decide(state: Option<&InstanceState>) -> Changed {
    let state = match refuse_missing_or_finished(state) {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    if state.status != RuntimeStatus::Suspended {
        return Changed::only(Change::NotApplicable);
    }
    let status = if state.has_run {
        RuntimeStatus::Running
    } else {
        RuntimeStatus::Pending
    };
    Changed::done(vec![Effect::SetStatus {
        status,
        output: None,
        custom_status: None,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lifecycle::fixtures::instance;

    #[test]
    fn a_suspended_instance_that_never_ran_resumes_as_pending() {
        let never_ran = crate::core::instance::InstanceState {
            has_run: false,
            ..instance(RuntimeStatus::Suspended)
        };
        let decision = decide(Some(&never_ran));
        assert!(matches!(
            decision.effects.as_slice(),
            [Effect::SetStatus {
                status: RuntimeStatus::Pending,
                ..
            }]
        ));
        let decision = decide(Some(&instance(RuntimeStatus::Suspended)));
        assert!(matches!(
            decision.effects.as_slice(),
            [Effect::SetStatus {
                status: RuntimeStatus::Running,
                ..
            }]
        ));
    }

    #[test]
    fn resuming_a_running_instance_does_not_apply() {
        assert_eq!(
            decide(Some(&instance(RuntimeStatus::Running))).change,
            Change::NotApplicable
        );
        assert_eq!(
            decide(Some(&instance(RuntimeStatus::Completed))).change,
            Change::Finished
        );
    }
}
