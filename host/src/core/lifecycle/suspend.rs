//! Suspending an instance: its code stops running; events and task results
//! keep arriving in its inbox and are consumed after resume.

use super::{refuse_missing_or_finished, Change, Changed};
use crate::core::effects::Effect;
use crate::core::instance::{InstanceState, RuntimeStatus};

pub fn decide(state: Option<&InstanceState>) -> Changed {
    let state = match refuse_missing_or_finished(state) {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    if !state.status.is_active() {
        return Changed::only(Change::NotApplicable);
    }
    Changed::done(vec![Effect::SetStatus {
        status: RuntimeStatus::Suspended,
        output: None,
        custom_status: None,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::lifecycle::fixtures::instance;

    #[test]
    fn only_an_active_instance_is_suspended() {
        assert_eq!(
            decide(Some(&instance(RuntimeStatus::Running))).change,
            Change::Done
        );
        assert_eq!(
            decide(Some(&instance(RuntimeStatus::Suspended))).change,
            Change::NotApplicable
        );
        assert_eq!(
            decide(Some(&instance(RuntimeStatus::Failed))).change,
            Change::Finished
        );
        assert_eq!(decide(None).change, Change::NotFound);
    }
}
