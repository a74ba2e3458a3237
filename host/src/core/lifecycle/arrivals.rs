//! Sorting an instance's inbox rows at the start of an episode: those of the
//! current execution are taken; those addressed to an older one (a task that
//! finished after continue-as-new, a timer of a terminated incarnation) are
//! stale and dropped.

use crate::core::instance::InstanceState;
use crate::core::journal::Event;

/// One inbox row: its id, the execution it is addressed to, its event.
pub type Arrival = (i64, i64, Event);

#[derive(Debug, Default, PartialEq)]
pub struct Sorted {
    pub taken: Vec<(i64, Event)>,
    pub stale: Vec<i64>,
}

pub fn decide(state: &InstanceState, rows: Vec<Arrival>) -> Sorted {
    let mut sorted = Sorted::default();
    for (row, execution, event) in rows {
        if execution == state.execution {
            sorted.taken.push((row, event));
        } else {
            sorted.stale.push(row);
        }
    }
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::instance::RuntimeStatus;
    use crate::core::lifecycle::fixtures::instance;

    #[test]
    fn a_result_from_an_older_execution_is_dropped() {
        let state = instance(RuntimeStatus::Running);
        let done = |task| Event::TaskCompleted {
            task,
            result: "1".into(),
        };
        let sorted = decide(
            &state,
            vec![(1, 6, done(0)), (2, 7, done(0)), (3, 5, done(1))],
        );
        assert_eq!(sorted.taken, vec![(2, done(0))]);
        assert_eq!(sorted.stale, vec![1, 3]);
    }
}
