//! Continue-as-new: the execution ends and a new one begins with a fresh
//! journal and the given input. Raised events no wait took are carried into
//! it, in arrival order; results of the old execution's tasks are not.

use crate::core::effects::Effect;
use crate::core::instance::RuntimeStatus;
use crate::core::journal::Event;

/// `digest` is the version the new execution runs on (the one served now), if
/// the shell wants it moved: with no journal to replay, that is safe.
/// `digest`: the version the new execution moves to (with `activity_set`,
/// the set served now: a fresh execution pins what a fresh start would).
pub fn decide(
    input: String,
    digest: Option<String>,
    activity_set: Option<String>,
    carried: Vec<Event>,
) -> Vec<Effect> {
    let activity_set = digest.as_ref().and(activity_set);
    vec![
        Effect::SetStatus {
            status: RuntimeStatus::ContinuedAsNew,
            output: None,
            custom_status: None,
        },
        Effect::NewExecution {
            input,
            digest,
            activity_set,
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
        let effects = decide(
            "2".into(),
            Some("d2".into()),
            Some("s".into()),
            carried.clone(),
        );
        assert_eq!(
            effects[1],
            Effect::NewExecution {
                input: "2".into(),
                digest: Some("d2".into()),
                activity_set: Some("s".into()),
                carried
            }
        );
        // Not moving, it keeps its pins too.
        let effects = decide("2".into(), None, Some("s".into()), Vec::new());
        assert!(matches!(
            &effects[1],
            Effect::NewExecution {
                digest: None,
                activity_set: None,
                ..
            }
        ));
    }
}
