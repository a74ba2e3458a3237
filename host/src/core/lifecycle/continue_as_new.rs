//! Continue-as-new: the execution ends and a new one begins with a fresh
//! journal and the given input. Raised events no wait took are carried into
//! it, in arrival order; results of the old execution's tasks are not.

use crate::core::effects::Effect;
use crate::core::instance::RuntimeStatus;
use crate::core::journal::Event;

/// `digest` is the version the new execution runs on (the one served now), if
/// the shell wants it moved: with no journal to replay, that is safe.
pub fn decide(input: String, digest: Option<String>, carried: Vec<Event>) -> Vec<Effect> {
    vec![
        Effect::SetStatus {
            status: RuntimeStatus::ContinuedAsNew,
            output: None,
            custom_status: None,
        },
        Effect::NewExecution {
            input,
            digest,
            carried,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_as_new_carries_untaken_events_into_the_new_execution() {
        let carried = vec![Event::EventRaised {
            name: "go".into(),
            payload: "1".into(),
        }];
        let effects = decide("2".into(), Some("d2".into()), carried.clone());
        assert_eq!(
            effects[1],
            Effect::NewExecution {
                input: "2".into(),
                digest: Some("d2".into()),
                carried
            }
        );
    }
}
