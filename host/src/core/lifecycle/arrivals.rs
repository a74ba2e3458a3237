//! Sorting an instance's inbox rows at the start of an episode: those of the
//! current execution are taken; those addressed to an older one (a task that
//! finished after continue-as-new, a timer of a terminated incarnation) are
//! stale and dropped. A row not yet visible (a durable timer not due) is
//! left for a later episode; a row the code saw before and left waiting
//! (parked) is offered again but is no news by itself.

use crate::core::instance::InstanceState;
use crate::core::journal::Event;

/// One inbox row as an episode finds it.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrival {
    pub row: i64,
    /// The execution it is addressed to.
    pub execution: i64,
    pub event: Event,
    /// When it becomes visible (ms): a timer's due time, else its arrival.
    pub visible_at: i64,
    /// Offered to the code before, which did not wait for it yet.
    pub parked: bool,
}

#[derive(Debug, Default, PartialEq)]
pub struct Sorted {
    pub taken: Vec<(i64, Event)>,
    pub stale: Vec<i64>,
    /// Whether anything taken is new to the code (not parked): without
    /// news, running the code again would decide nothing new.
    pub news: bool,
}

/// Sorts the rows visible at `now`.
pub fn decide(state: &InstanceState, rows: Vec<Arrival>, now: i64) -> Sorted {
    let mut sorted = Sorted::default();
    for arrival in rows.into_iter().filter(|a| a.visible_at <= now) {
        if arrival.execution == state.execution {
            sorted.news |= !arrival.parked;
            sorted.taken.push((arrival.row, arrival.event));
        } else {
            sorted.stale.push(arrival.row);
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
            vec![
                arrival(1, 6, done(0)),
                arrival(2, 7, done(0)),
                arrival(3, 5, done(1)),
            ],
            0,
        );
        assert_eq!(sorted.taken, vec![(2, done(0))]);
        assert_eq!(sorted.stale, vec![1, 3]);
        assert!(sorted.news);
    }

    fn arrival(row: i64, execution: i64, event: Event) -> Arrival {
        Arrival {
            row,
            execution,
            event,
            visible_at: 0,
            parked: false,
        }
    }

    #[test]
    fn a_timer_not_yet_due_is_left_for_later_even_from_an_older_execution() {
        let state = instance(RuntimeStatus::Running);
        let fired = |task| Event::TimerFired { task };
        let due_later = |row, execution| Arrival {
            visible_at: 100,
            ..arrival(row, execution, fired(row as u32))
        };
        let early = decide(&state, vec![due_later(1, 7), due_later(2, 6)], 99);
        assert_eq!(early, Sorted::default());
        let due = decide(&state, vec![due_later(1, 7), due_later(2, 6)], 100);
        assert_eq!(due.taken, vec![(1, fired(1))]);
        assert_eq!(due.stale, vec![2]);
    }

    #[test]
    fn parked_rows_alone_are_no_news() {
        let state = instance(RuntimeStatus::Running);
        let raised = Event::EventRaised {
            name: "go".into(),
            payload: "1".into(),
        };
        let parked = Arrival {
            parked: true,
            ..arrival(1, 7, raised.clone())
        };
        let sorted = decide(&state, vec![parked.clone()], 0);
        assert_eq!(sorted.taken, vec![(1, raised.clone())]);
        assert!(!sorted.news);
        let with_new = decide(&state, vec![parked, arrival(2, 7, raised)], 0);
        assert!(with_new.news);
    }
}
