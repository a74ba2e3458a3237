//! Terminating an instance: it ends now with the output it is given; its
//! pending tasks and timers are dropped and its parent is told.

use super::{refuse_missing_or_finished, Changed};
use crate::core::effects::Effect;
use crate::core::instance::{InstanceState, RuntimeStatus};

pub fn decide(state: Option<&InstanceState>, output: &str) -> Changed {
    let state = match refuse_missing_or_finished(state) {
        Ok(s) => s,
        Err(refused) => return refused,
    };
    let output = output.to_string();
    let mut effects = vec![
        Effect::SetStatus {
            status: RuntimeStatus::Terminated,
            output: Some(output.clone()),
            custom_status: None,
        },
        Effect::DropPending,
    ];
    if let Some(parent) = &state.parent {
        effects.push(Effect::child_ended(
            parent.clone(),
            &state.id,
            RuntimeStatus::Terminated,
            Some(&output),
        ));
    }
    Changed::done(effects)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::journal::Event;
    use crate::core::lifecycle::fixtures::{child, instance};
    use crate::core::lifecycle::Change;

    #[test]
    fn terminate_ends_the_instance_and_tells_its_parent() {
        let decision = decide(Some(&child(RuntimeStatus::Running)), "\"enough\"");
        assert_eq!(decision.change, Change::Done);
        let [Effect::SetStatus { status, output, .. }, Effect::DropPending, Effect::NotifyParent { parent, event }] =
            decision.effects.as_slice()
        else {
            panic!("unexpected effects {:?}", decision.effects);
        };
        assert_eq!(*status, RuntimeStatus::Terminated);
        assert_eq!(output.as_deref(), Some("\"enough\""));
        assert_eq!(
            (parent.id.as_str(), parent.execution, parent.task),
            ("p", 3, 2)
        );
        assert!(
            matches!(event, Event::TaskFailed { task: 2, error, .. } if error.contains("terminated"))
        );
    }

    #[test]
    fn terminating_a_finished_instance_changes_nothing() {
        let decision = decide(Some(&instance(RuntimeStatus::Completed)), "late");
        assert_eq!(decision.change, Change::Finished);
        assert!(decision.effects.is_empty());
    }
}
