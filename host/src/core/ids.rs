//! Identifiers the engine derives, so that a restart finds what it already
//! started instead of starting it again. Every one carries the execution:
//! a new execution of an instance (continue-as-new, or a finished id started
//! again) never meets the results of an older one.

/// An instance id given by a caller: 1 to 256 characters, no `/` (it is a
/// path segment of the management API).
pub fn valid_instance_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 256 && !id.contains('/')
}

/// The run of an agent call: one per instance execution, task and attempt.
pub fn agent_call_correlation(instance: &str, execution: i64, task: u32, attempt: u32) -> String {
    format!("{instance}:{execution}:{task}:{attempt}")
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
    fn instance_ids_are_path_segments() {
        assert!(valid_instance_id("order-42"));
        assert!(!valid_instance_id(""));
        assert!(!valid_instance_id("a/b"));
        assert!(!valid_instance_id(&"x".repeat(257)));
    }
}
