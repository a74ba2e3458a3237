//! Identifiers the engine derives, so that a restart finds what it already
//! started instead of starting it again. Every one carries the execution:
//! a new execution of an instance (continue-as-new, or a finished id started
//! again) never meets the results of an older one.

/// An instance id given by a caller: 1 to 256 characters, no `/` (it is a
/// path segment of the management API), no NUL (PostgreSQL's text refuses
/// it, and a write holding one would fail again and again).
pub fn valid_instance_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 256 && !id.contains(['/', '\0'])
}

/// Most characters an instance id has over the Durable Task protocol, as
/// the managed Durable Task Scheduler allows (its SDKs keep the ids they
/// derive within it): a start, an entity's id, a sub-orchestration's.
pub const SCHEDULER_ID_CHARS: usize = 100;

/// An instance id a Durable Task client or worker may give: a valid one
/// ([`valid_instance_id`]) within [`SCHEDULER_ID_CHARS`].
pub fn valid_scheduler_id(id: &str) -> bool {
    valid_instance_id(id) && id.chars().count() <= SCHEDULER_ID_CHARS
}

/// The execution id the Durable Task protocol carries for `instance`'s
/// `execution`: 32 hex digits, as the managed scheduler mints them (a GUID
/// without dashes). The SDKs build on it: the JavaScript SDK derives a
/// sub-orchestration's id as `{execution id}:{task:04x}`, so it must be
/// new for each execution (a continue-as-new, a restart) and differ
/// between instances; the host's execution number is never reused, and the
/// instance id goes in too, so it is derived rather than stored.
pub fn protocol_execution_id(instance: &str, execution: i64) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(instance.as_bytes());
    hash.update([0]);
    hash.update(execution.to_be_bytes());
    hash.finalize()[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A name a caller gives (an orchestration's, one it starts or calls):
/// 1 to 256 characters, no NUL.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 256 && !name.contains('\0')
}

/// The run of an agent call: one per instance execution, task and attempt.
pub fn agent_call_correlation(instance: &str, execution: i64, task: u32, attempt: u32) -> String {
    format!("{instance}:{execution}:{task}:{attempt}")
}

/// Whether `correlation` is the run of an agent call of `instance`'s
/// `execution`. Instance ids may hold `:`, so the prefix alone would also
/// take the runs of instance `a:1` (and of `a`'s children) for `a`'s
/// execution 1: what follows it must be exactly `task:attempt`.
pub fn is_agent_call_of(instance: &str, execution: i64, correlation: &str) -> bool {
    let Some(rest) = correlation
        .strip_prefix(instance)
        .and_then(|rest| rest.strip_prefix(':'))
        .and_then(|rest| rest.strip_prefix(execution.to_string().as_str()))
        .and_then(|rest| rest.strip_prefix(':'))
    else {
        return false;
    };
    let mut parts = rest.split(':');
    let number = |part: Option<&str>| {
        part.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    };
    number(parts.next()) && number(parts.next()) && parts.next().is_none()
}

/// The instance id of a sub-orchestration.
pub fn child_instance(parent: &str, execution: i64, task: u32) -> String {
    format!("{parent}:{execution}:{task}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_ids_differ_between_executions() {
        assert_ne!(
            agent_call_correlation("a", 1, 0, 0),
            agent_call_correlation("a", 2, 0, 0)
        );
        assert_ne!(child_instance("a", 1, 3), child_instance("a", 2, 3));
    }

    #[test]
    fn the_agent_calls_of_an_execution_are_its_own_whatever_the_ids_hold() {
        let own = agent_call_correlation("a", 1, 5, 0);
        assert!(is_agent_call_of("a", 1, &own));
        assert!(!is_agent_call_of("a", 2, &own));
        // Instance `a:1`, and `a`'s child `a:1:0`, begin with `a:1:` too.
        assert!(!is_agent_call_of(
            "a",
            1,
            &agent_call_correlation("a:1", 5, 0, 0)
        ));
        let child = child_instance("a", 1, 0);
        assert!(!is_agent_call_of(
            "a",
            1,
            &agent_call_correlation(&child, 7, 0, 0)
        ));
        assert!(is_agent_call_of(
            "a:1",
            5,
            &agent_call_correlation("a:1", 5, 0, 0)
        ));
        assert!(!is_agent_call_of("a", 1, "a:1:"));
        assert!(!is_agent_call_of("a", 1, "a:1:x:0"));
    }

    #[test]
    fn instance_ids_are_path_segments() {
        assert!(valid_instance_id("order-42"));
        assert!(!valid_instance_id(""));
        assert!(!valid_instance_id("a/b"));
        assert!(!valid_instance_id(&"x".repeat(257)));
        assert!(valid_scheduler_id(&"é".repeat(100)));
        assert!(!valid_scheduler_id(&"x".repeat(101)));
    }

    #[test]
    fn protocol_execution_ids_are_32_hex_and_new_for_each_execution() {
        let id = protocol_execution_id("a", 7);
        assert_eq!(id.len(), 32);
        assert!(id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
        assert_eq!(id, protocol_execution_id("a", 7));
        assert_ne!(id, protocol_execution_id("a", 8));
        assert_ne!(id, protocol_execution_id("b", 7));
    }
}
