//! Replay: matching the calls of orchestration code against its journal and
//! deciding what each call answers. Pure: no wasm, no database, no clock.
//!
//! A task is the index of its call among the instance's calls. Results come
//! from the events in the journal (and those just taken from the inbox), in
//! arrival order. An event wait takes the oldest raised event of its name that
//! no earlier wait took, at the moment it is awaited; `await-any` picks the
//! candidate that arrived first. Both orders are journaled, so every replay
//! decides the same way.

use std::collections::HashMap;

use super::journal::{Call, Event};

/// The code made a call that differs from the journal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("non-deterministic behavior detected: {0}")]
pub struct NonDeterminism(pub String);

/// The guest asked for something this replay cannot answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    NonDeterminism(#[from] NonDeterminism),
    #[error("task {0} was never scheduled by this instance")]
    UnknownTask(u32),
    #[error("await-any needs at least one task")]
    EmptyAwaitAny,
}

/// A task's outcome as the code sees it.
pub type TaskResult = Result<String, String>;

pub struct Replay {
    history: Vec<(Call, i64)>,
    calls: Vec<Call>,
    /// Calls made in this episode, to be journaled.
    new_calls: Vec<Call>,
    episode_time: i64,
    step_time: i64,
    /// Every event, in arrival order.
    events: Vec<Event>,
    /// Index into `events` of each raised event taken by a wait.
    taken: HashMap<u32, usize>,
    taken_events: Vec<bool>,
    /// Event waits that lost an `await-any`: they take nothing, ever.
    cancelled: Vec<u32>,
}

impl Replay {
    /// `history` is the journaled calls with the time each was first made;
    /// `events` every event so far, in arrival order (journaled ones first,
    /// then those just taken from the inbox).
    pub fn new(
        history: Vec<(Call, i64)>,
        events: Vec<Event>,
        episode_time: i64,
        start_time: i64,
    ) -> Self {
        let taken_events = vec![false; events.len()];
        Self {
            history,
            calls: Vec::new(),
            new_calls: Vec::new(),
            episode_time,
            step_time: start_time,
            events,
            taken: HashMap::new(),
            taken_events,
            cancelled: Vec::new(),
        }
    }

    /// The time the code sees: when the last call it replayed was first made,
    /// or this episode's time once it runs past the journal.
    pub fn step_time(&self) -> i64 {
        self.step_time
    }

    pub fn is_replaying(&self) -> bool {
        self.calls.len() < self.history.len()
    }

    pub fn new_calls(&self) -> &[Call] {
        &self.new_calls
    }

    /// Index of the first call of this episode (new calls are numbered from here).
    pub fn first_new_task(&self) -> u32 {
        u32::try_from(self.history.len()).unwrap_or(u32::MAX)
    }

    /// Records (or replays) a call. Returns the call as journaled — with the
    /// recorded value for value calls — and its task number.
    pub fn call(&mut self, call: Call) -> Result<(Call, u32), NonDeterminism> {
        let index = self.calls.len();
        let task = u32::try_from(index).map_err(|_| NonDeterminism("too many calls".into()))?;
        let answered = match self.history.get(index) {
            Some((journaled, at)) => {
                if !call.matches(journaled) {
                    return Err(NonDeterminism(format!(
                        "at step {index} the journal has {} but the code called {}",
                        journaled.describe(),
                        call.describe()
                    )));
                }
                self.step_time = *at;
                journaled.clone()
            }
            None => {
                self.step_time = self.episode_time;
                self.new_calls.push(call.clone());
                call
            }
        };
        self.calls.push(answered.clone());
        Ok((answered, task))
    }

    /// The journal has more calls than the code made: it stopped early or
    /// took another path.
    pub fn check_complete(&self) -> Result<(), NonDeterminism> {
        match self.history.get(self.calls.len()) {
            Some((next, _)) => Err(NonDeterminism(format!(
                "the code finished after {} steps but the journal continues with {}",
                self.calls.len(),
                next.describe()
            ))),
            None => Ok(()),
        }
    }

    fn task_call(&self, task: u32) -> Result<&Call, ReplayError> {
        self.calls
            .get(task as usize)
            .filter(|c| c.is_task())
            .ok_or(ReplayError::UnknownTask(task))
    }

    /// When (arrival index) and how the task finished, without taking anything.
    fn peek(&self, task: u32) -> Result<Option<(usize, TaskResult)>, ReplayError> {
        if let Some(&at) = self.taken.get(&task) {
            return Ok(Some((at, Ok(raised_payload(&self.events[at])))));
        }
        let found = match self.task_call(task)? {
            Call::WaitForEvent { name } if !self.cancelled.contains(&task) => {
                self.events.iter().enumerate().find_map(|(i, e)| match e {
                    Event::EventRaised { name: n, payload }
                        if n == name && !self.taken_events[i] =>
                    {
                        Some((i, Ok(payload.clone())))
                    }
                    _ => None,
                })
            }
            Call::WaitForEvent { .. } => None,
            _ => self.events.iter().enumerate().find_map(|(i, e)| match e {
                Event::TaskCompleted { task: t, result } if *t == task => {
                    Some((i, Ok(result.clone())))
                }
                Event::TaskFailed { task: t, error } if *t == task => Some((i, Err(error.clone()))),
                Event::TimerFired { task: t } if *t == task => Some((i, Ok("null".to_string()))),
                _ => None,
            }),
        };
        Ok(found)
    }

    /// Marks an event wait's event as taken, so later waits see the next one.
    fn take(&mut self, task: u32, at: usize) {
        if matches!(self.events.get(at), Some(Event::EventRaised { .. }))
            && !self.taken.contains_key(&task)
        {
            self.taken.insert(task, at);
            self.taken_events[at] = true;
        }
    }

    /// The task's result, or `None` when the code must wait.
    pub fn result(&mut self, task: u32) -> Result<Option<TaskResult>, ReplayError> {
        let found = self.peek(task)?;
        if let Some((at, _)) = &found {
            self.take(task, *at);
        }
        Ok(found.map(|(_, r)| r))
    }

    /// Every task's result, or `None` while any is unfinished.
    pub fn results(&mut self, tasks: &[u32]) -> Result<Option<Vec<TaskResult>>, ReplayError> {
        let mut peeked = Vec::with_capacity(tasks.len());
        for &task in tasks {
            match self.peek(task)? {
                Some(found) => peeked.push(found),
                None => return Ok(None),
            }
        }
        for (&task, (at, _)) in tasks.iter().zip(&peeked) {
            self.take(task, *at);
        }
        Ok(Some(peeked.into_iter().map(|(_, r)| r).collect()))
    }

    /// The task that finished first (its position in `tasks`) and its result;
    /// event waits among the others are cancelled.
    pub fn first_of(&mut self, tasks: &[u32]) -> Result<Option<(u32, TaskResult)>, ReplayError> {
        if tasks.is_empty() {
            return Err(ReplayError::EmptyAwaitAny);
        }
        let mut best: Option<(usize, usize, TaskResult)> = None;
        for (position, &task) in tasks.iter().enumerate() {
            if let Some((at, result)) = self.peek(task)? {
                if best.as_ref().is_none_or(|(b, _, _)| at < *b) {
                    best = Some((at, position, result));
                }
            }
        }
        let Some((at, position, result)) = best else {
            return Ok(None);
        };
        self.take(tasks[position], at);
        for (i, &task) in tasks.iter().enumerate() {
            if i != position
                && matches!(self.task_call(task)?, Call::WaitForEvent { .. })
                && !self.taken.contains_key(&task)
            {
                self.cancelled.push(task);
            }
        }
        Ok(Some((u32::try_from(position).unwrap_or(u32::MAX), result)))
    }

    /// Raised events no wait has taken: carried over by continue-as-new.
    pub fn untaken_events(&self) -> Vec<Event> {
        self.events
            .iter()
            .enumerate()
            .filter(|(i, e)| matches!(e, Event::EventRaised { .. }) && !self.taken_events[*i])
            .map(|(_, e)| e.clone())
            .collect()
    }
}

fn raised_payload(event: &Event) -> String {
    match event {
        Event::EventRaised { payload, .. } => payload.clone(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn activity(name: &str) -> Call {
        Call::CallActivity {
            name: name.into(),
            input: "{}".into(),
            retry: None,
        }
    }

    fn wait(name: &str) -> Call {
        Call::WaitForEvent { name: name.into() }
    }

    fn raised(name: &str, payload: &str) -> Event {
        Event::EventRaised {
            name: name.into(),
            payload: payload.into(),
        }
    }

    #[test]
    fn first_run_records_calls_and_waits_for_results() -> Result<(), ReplayError> {
        let mut r = Replay::new(vec![], vec![], 1000, 0);
        let (_, task) = r.call(activity("a"))?;
        assert_eq!(task, 0);
        assert!(!r.is_replaying());
        assert_eq!(r.result(task)?, None);
        assert_eq!(r.new_calls(), &[activity("a")]);
        assert_eq!(r.step_time(), 1000);
        Ok(())
    }

    #[test]
    fn replay_answers_from_the_journal_and_records_only_new_calls() -> Result<(), ReplayError> {
        let history = vec![(activity("a"), 10), (Call::Now { value: 10 }, 10)];
        let events = vec![Event::TaskCompleted {
            task: 0,
            result: "\"A\"".into(),
        }];
        let mut r = Replay::new(history, events, 99, 0);
        assert!(r.is_replaying());
        let (_, a) = r.call(activity("a"))?;
        assert_eq!(r.result(a)?, Some(Ok("\"A\"".into())));
        assert_eq!(
            r.call(Call::Now { value: 99 })?.0,
            Call::Now { value: 10 },
            "the recorded time"
        );
        assert_eq!(r.step_time(), 10);
        r.call(activity("b"))?;
        assert_eq!(r.new_calls(), &[activity("b")]);
        assert_eq!(r.step_time(), 99);
        Ok(())
    }

    #[test]
    fn a_different_call_is_non_determinism_naming_both() {
        let mut r = Replay::new(vec![(activity("a"), 0)], vec![], 0, 0);
        let err = r.call(activity("b")).unwrap_err().to_string();
        assert!(
            err.starts_with("non-deterministic behavior detected:"),
            "{err}"
        );
        assert!(
            err.contains("call-activity(a)") && err.contains("call-activity(b)"),
            "{err}"
        );
        let r = Replay::new(vec![(activity("a"), 0)], vec![], 0, 0);
        assert!(
            r.check_complete().is_err(),
            "stopping short of the journal is non-deterministic too"
        );
    }

    #[test]
    fn events_raised_before_the_wait_are_buffered_and_delivered_in_order() -> Result<(), ReplayError>
    {
        let events = vec![raised("go", "1"), raised("other", "x"), raised("go", "2")];
        let mut r = Replay::new(vec![], events, 0, 0);
        let (_, first) = r.call(wait("go"))?;
        let (_, second) = r.call(wait("go"))?;
        let (_, third) = r.call(wait("go"))?;
        assert_eq!(r.result(first)?, Some(Ok("1".into())));
        assert_eq!(r.result(second)?, Some(Ok("2".into())));
        assert_eq!(r.result(third)?, None);
        assert_eq!(
            r.result(first)?,
            Some(Ok("1".into())),
            "awaiting again gives the same event"
        );
        Ok(())
    }

    #[test]
    fn await_any_picks_what_arrived_first_and_cancels_the_losing_wait() -> Result<(), ReplayError> {
        let timer = Call::StartTimer { fire_at: 5 };
        // The timer fired before the event arrived: the timer wins, and the
        // event stays for a later wait.
        let events = vec![Event::TimerFired { task: 1 }, raised("approval", "true")];
        let mut r = Replay::new(vec![], events, 0, 0);
        let (_, event) = r.call(wait("approval"))?;
        let (_, t) = r.call(timer.clone())?;
        assert_eq!(r.first_of(&[event, t])?, Some((1, Ok("null".into()))));
        assert_eq!(r.result(event)?, None, "the losing wait is cancelled");
        let (_, later) = r.call(wait("approval"))?;
        assert_eq!(r.result(later)?, Some(Ok("true".into())));

        let events = vec![raised("approval", "true"), Event::TimerFired { task: 1 }];
        let mut r = Replay::new(vec![], events, 0, 0);
        let (_, event) = r.call(wait("approval"))?;
        let (_, t) = r.call(timer)?;
        assert_eq!(r.first_of(&[event, t])?, Some((0, Ok("true".into()))));
        Ok(())
    }

    #[test]
    fn await_all_waits_for_every_task_and_keeps_order() -> Result<(), ReplayError> {
        let events = vec![
            Event::TaskCompleted {
                task: 1,
                result: "b".into(),
            },
            Event::TaskFailed {
                task: 0,
                error: "boom".into(),
            },
        ];
        let mut r = Replay::new(vec![], events, 0, 0);
        let (_, a) = r.call(activity("a"))?;
        let (_, b) = r.call(activity("b"))?;
        let (_, c) = r.call(activity("c"))?;
        assert_eq!(
            r.results(&[a, b])?,
            Some(vec![Err("boom".into()), Ok("b".into())])
        );
        assert_eq!(r.results(&[a, c])?, None);
        assert_eq!(r.result(7), Err(ReplayError::UnknownTask(7)));
        Ok(())
    }

    #[test]
    fn untaken_events_are_carried_over() -> Result<(), ReplayError> {
        let mut r = Replay::new(vec![], vec![raised("a", "1"), raised("b", "2")], 0, 0);
        let (_, w) = r.call(wait("a"))?;
        r.result(w)?;
        assert_eq!(r.untaken_events(), vec![raised("b", "2")]);
        Ok(())
    }
}
