//! What a start does with an id another instance holds, under the Durable
//! Task protocol's id-reuse policy (`OrchestrationIdReusePolicy`: the
//! statuses whose instance a start may replace), as the managed Durable
//! Task Scheduler does it: a listed finished instance is replaced, a listed
//! unfinished one is terminated first, any other refuses the start. Without
//! a policy a finished instance is replaced and an unfinished one refuses.

use super::instance::RuntimeStatus;

/// Why a policy is refused, in the managed scheduler's words (the SDKs'
/// suites match them).
pub const TERMINATED_EXCLUDED: &str = "Invalid reusable statuses: cannot exclude 'Terminated' while also allowing reuse of running instances";

/// What a start does about the instance holding its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// No instance holds it, or a finished one the start replaces.
    Start,
    /// An unfinished instance the policy lets the start replace: it is
    /// terminated, then replaced.
    TerminateThenStart,
    /// The instance keeps its id; the start is refused (ALREADY_EXISTS).
    Refuse(RuntimeStatus),
}

/// Whether `replaceable` may be asked for: replacing a running instance
/// terminates it, and a policy that does not let a terminated one be
/// replaced would then refuse the very start that terminated it.
pub fn check(replaceable: &[RuntimeStatus]) -> Result<(), &'static str> {
    let running = replaceable.iter().any(|s| !s.is_finished());
    if running && !replaceable.contains(&RuntimeStatus::Terminated) {
        return Err(TERMINATED_EXCLUDED);
    }
    Ok(())
}

/// What a start does about `existing` (the status of the instance holding
/// its id), under `replaceable` (`None`: the request gave no policy).
pub fn decide(replaceable: Option<&[RuntimeStatus]>, existing: Option<RuntimeStatus>) -> Reuse {
    let Some(status) = existing else {
        return Reuse::Start;
    };
    let listed = match replaceable {
        Some(statuses) => statuses.contains(&status),
        None => status.is_finished(),
    };
    match (listed, status.is_finished()) {
        (false, _) => Reuse::Refuse(status),
        (true, true) => Reuse::Start,
        (true, false) => Reuse::TerminateThenStart,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use RuntimeStatus::*;

    #[test]
    fn a_listed_status_is_replaced_and_a_running_one_terminated_first() {
        let all = [Completed, Failed, Terminated, Pending, Running, Suspended];
        assert_eq!(decide(Some(&all), Some(Running)), Reuse::TerminateThenStart);
        assert_eq!(decide(Some(&all), Some(Completed)), Reuse::Start);
        assert_eq!(decide(Some(&all), None), Reuse::Start);
        let finished = [Completed, Failed, Terminated];
        assert_eq!(
            decide(Some(&finished), Some(Running)),
            Reuse::Refuse(Running)
        );
        assert_eq!(decide(Some(&[]), Some(Completed)), Reuse::Refuse(Completed));
    }

    #[test]
    fn without_a_policy_finished_is_replaced_and_unfinished_refuses() {
        assert_eq!(decide(None, Some(Failed)), Reuse::Start);
        assert_eq!(decide(None, Some(Suspended)), Reuse::Refuse(Suspended));
    }

    #[test]
    fn reusing_running_instances_needs_terminated_reusable_too() {
        assert_eq!(check(&[Completed, Suspended]), Err(TERMINATED_EXCLUDED));
        assert_eq!(check(&[Terminated, Running]), Ok(()));
        assert_eq!(check(&[Completed]), Ok(()));
        assert_eq!(check(&[]), Ok(()));
    }
}
