//! An external event raised at an instance: queued in its inbox for the
//! current execution, unless the instance is over or its inbox is full.

use super::{refuse_missing_or_finished, Changed};
use crate::core::effects::Effect;
use crate::core::instance::{InstanceState, Size};
use crate::core::journal::Event;
use crate::core::limits::{LimitError, Limits};

/// `waiting` is what the inbox holds now. A full inbox is an error the caller
/// answers with 429: nothing is written. `due_at`: the event is unseen
/// until then (ms).
pub fn decide(
    state: Option<&InstanceState>,
    name: &str,
    payload: &str,
    waiting: Size,
    limits: &Limits,
    due_at: Option<i64>,
) -> Result<Changed, LimitError> {
    let state = match refuse_missing_or_finished(state) {
        Ok(s) => s,
        Err(refused) => return Ok(refused),
    };
    limits.check_payload("event payload", payload)?;
    let event = Event::EventRaised {
        name: name.to_string(),
        payload: payload.to_string(),
    };
    limits.check_inbox(waiting, event.payload_len() as u64)?;
    Ok(Changed::done(vec![Effect::Deliver {
        instance: state.id.clone(),
        execution: state.execution,
        event,
        visible_at: due_at,
    }]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::instance::RuntimeStatus;
    use crate::core::lifecycle::fixtures::instance;
    use crate::core::lifecycle::Change;

    #[test]
    fn an_event_is_addressed_to_the_current_execution() -> Result<(), LimitError> {
        let state = instance(RuntimeStatus::Suspended);
        let decision = decide(
            Some(&state),
            "go",
            "1",
            Size::default(),
            &Limits::default(),
            None,
        )?;
        assert_eq!(decision.change, Change::Done);
        assert!(matches!(
            decision.effects.as_slice(),
            [Effect::Deliver { execution: 7, .. }]
        ));
        Ok(())
    }

    #[test]
    fn a_finished_or_missing_instance_takes_no_event() -> Result<(), LimitError> {
        let done = instance(RuntimeStatus::Completed);
        let limits = Limits::default();
        assert_eq!(
            decide(Some(&done), "go", "1", Size::default(), &limits, None)?.change,
            Change::Finished
        );
        assert_eq!(
            decide(None, "go", "1", Size::default(), &limits, None)?.change,
            Change::NotFound
        );
        Ok(())
    }

    #[test]
    fn a_full_inbox_refuses_the_event() {
        let limits = Limits {
            max_inbox_events: 3,
            ..Limits::default()
        };
        let state = instance(RuntimeStatus::Running);
        let full = Size {
            events: 3,
            bytes: 3,
        };
        assert!(matches!(
            decide(Some(&state), "go", "1", full, &limits, None),
            Err(LimitError::Inbox { .. })
        ));
    }
}
