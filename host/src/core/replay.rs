//! Replay: matching the calls of orchestration code against its journal and
//! deciding what each call answers. Pure: no wasm, no database, no clock.
//!
//! A task is the index of its call among the execution's calls. Results come
//! from the events in the journal (and those just taken from the inbox), in
//! arrival order. An event wait takes the oldest raised event of its name that
//! no earlier wait took, at the moment it is awaited; `await-all` over several
//! waits of one name takes one event for each, or none while any is missing;
//! `await-any` picks the candidate that arrived first. Both orders are
//! journaled, so every replay decides the same way.
//!
//! Outcomes are indexed by task and raised events queued by name when the
//! replay is built, so an await costs the same for the 7,000th task of a
//! fan-out as for the first.

use std::collections::{HashMap, VecDeque};

use super::journal::{Call, Entry, Event};

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
    /// Each id of an await is answered with its own copy of the result,
    /// made by the host: a result named thousands of times in one await
    /// was copied as often, outside the guest's memory limit.
    #[error("task {0} is named more than once in one await: await each task once")]
    RepeatedTask(u32),
}

/// `tasks`, if no task is named twice.
fn each_once(tasks: &[u32]) -> Result<(), ReplayError> {
    let mut seen = std::collections::HashSet::with_capacity(tasks.len());
    match tasks.iter().find(|&&task| !seen.insert(task)) {
        Some(&task) => Err(ReplayError::RepeatedTask(task)),
        None => Ok(()),
    }
}

/// A journal as a replay takes it: its calls, each with the time it was
/// first made, and its events, in order.
pub fn split_journal(journal: &[(Entry, i64)]) -> (Vec<(Call, i64)>, Vec<Event>) {
    let mut calls = Vec::with_capacity(journal.len());
    let mut events = Vec::with_capacity(journal.len());
    for (entry, at) in journal {
        match entry {
            Entry::Call(call) => calls.push((call.clone(), *at)),
            Entry::Event(event) => events.push(event.clone()),
        }
    }
    (calls, events)
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
    /// Arrival index of the first outcome (completion, failure, timer) of each task.
    outcomes: HashMap<u32, usize>,
    /// Arrival indexes of raised events no wait has taken, oldest first, by name.
    untaken: HashMap<String, VecDeque<usize>>,
    /// Arrival index of the raised event each wait took.
    taken: HashMap<u32, usize>,
    /// Event waits that lost an `await-any`: they take nothing, ever.
    cancelled: Vec<u32>,
    /// The first call that differed from the journal, as a replay check
    /// reports it.
    diverged: Option<Divergence>,
}

/// Where code first departs from a journal: the step (0-based, counted over
/// the execution's calls), what the journal holds there (`None`: the journal
/// had ended) and what the code did instead.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Divergence {
    pub step: usize,
    pub journal: Option<String>,
    pub code: String,
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
        let mut outcomes = HashMap::new();
        let mut untaken: HashMap<String, VecDeque<usize>> = HashMap::new();
        for (at, event) in events.iter().enumerate() {
            match event {
                Event::TaskCompleted { task, .. }
                | Event::TaskFailed { task, .. }
                | Event::TimerFired { task } => {
                    outcomes.entry(*task).or_insert(at);
                }
                Event::EventRaised { name, .. } => {
                    untaken.entry(name.clone()).or_default().push_back(at)
                }
            }
        }
        Self {
            history,
            calls: Vec::new(),
            new_calls: Vec::new(),
            episode_time,
            step_time: start_time,
            events,
            outcomes,
            untaken,
            taken: HashMap::new(),
            cancelled: Vec::new(),
            diverged: None,
        }
    }

    /// The first call that differed from the journal, if one did.
    pub fn divergence(&self) -> Option<&Divergence> {
        self.diverged.as_ref()
    }

    /// How many calls the code has made so far.
    pub fn steps(&self) -> usize {
        self.calls.len()
    }

    /// How many calls the journal holds.
    pub fn journaled_steps(&self) -> usize {
        self.history.len()
    }

    /// The journal's call at `step`, described, if it holds one there.
    pub fn journaled(&self, step: usize) -> Option<String> {
        self.history.get(step).map(|(call, _)| call.describe())
    }

    /// The calls made past the journal so far (what an episode would journal).
    pub fn calls_past_the_journal(&self) -> &[Call] {
        &self.new_calls
    }

    /// The time the code sees: when the last call it replayed was first made,
    /// or this episode's time once it runs past the journal.
    pub fn step_time(&self) -> i64 {
        self.step_time
    }

    pub fn is_replaying(&self) -> bool {
        self.calls.len() < self.history.len()
    }

    /// Consumes the replay, keeping only the calls to journal.
    pub fn into_new_calls(self) -> Vec<Call> {
        self.new_calls
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
                    self.diverged.get_or_insert_with(|| Divergence {
                        step: index,
                        journal: Some(journaled.describe()),
                        code: call.describe(),
                    });
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

    /// The name a task waits for, when it is an event wait.
    fn waits_for(&self, task: u32) -> Result<Option<&str>, ReplayError> {
        Ok(match self.task_call(task)? {
            Call::WaitForEvent { name } => Some(name.as_str()),
            _ => None,
        })
    }

    /// When (arrival index) the task finished, without taking anything.
    fn peek(&self, task: u32) -> Result<Option<usize>, ReplayError> {
        if let Some(&at) = self.taken.get(&task) {
            return Ok(Some(at));
        }
        Ok(match self.waits_for(task)? {
            Some(_) if self.cancelled.contains(&task) => None,
            Some(name) => self.untaken.get(name).and_then(|q| q.front().copied()),
            None => self.outcomes.get(&task).copied(),
        })
    }

    /// Takes what the task waits for, if it has arrived; an event wait takes
    /// the oldest untaken event of its name. Returns the arrival index.
    fn take(&mut self, task: u32) -> Result<Option<usize>, ReplayError> {
        if let Some(&at) = self.taken.get(&task) {
            return Ok(Some(at));
        }
        let name = match self.waits_for(task)? {
            None => return Ok(self.outcomes.get(&task).copied()),
            Some(_) if self.cancelled.contains(&task) => return Ok(None),
            Some(name) => name.to_string(),
        };
        let at = self.untaken.get_mut(&name).and_then(VecDeque::pop_front);
        if let Some(at) = at {
            self.taken.insert(task, at);
        }
        Ok(at)
    }

    /// Gives back an event taken by `take` (newest first), as if never taken.
    fn untake(&mut self, task: u32, at: usize) {
        if let Some(Event::EventRaised { name, .. }) = self.events.get(at) {
            self.taken.remove(&task);
            self.untaken.entry(name.clone()).or_default().push_front(at);
        }
    }

    fn outcome(&self, at: usize) -> TaskResult {
        match &self.events[at] {
            Event::TaskCompleted { result, .. } => Ok(result.clone()),
            Event::TaskFailed { error, .. } => Err(error.clone()),
            Event::TimerFired { .. } => Ok("null".to_string()),
            Event::EventRaised { payload, .. } => Ok(payload.clone()),
        }
    }

    /// The task's result, or `None` when the code must wait.
    pub fn result(&mut self, task: u32) -> Result<Option<TaskResult>, ReplayError> {
        Ok(self.take(task)?.map(|at| self.outcome(at)))
    }

    /// Every task's result, or `None` (and nothing taken) while any is
    /// unfinished. Waits for one event name take one event each.
    pub fn results(&mut self, tasks: &[u32]) -> Result<Option<Vec<TaskResult>>, ReplayError> {
        each_once(tasks)?;
        let mut arrived = Vec::with_capacity(tasks.len());
        let mut newly_taken = Vec::new();
        for &task in tasks {
            let was_taken = self.taken.contains_key(&task);
            match self.take(task) {
                Ok(Some(at)) => {
                    if !was_taken && self.taken.contains_key(&task) {
                        newly_taken.push((task, at));
                    }
                    arrived.push(at);
                }
                found => {
                    for (task, at) in newly_taken.into_iter().rev() {
                        self.untake(task, at);
                    }
                    return found.map(|_| None);
                }
            }
        }
        Ok(Some(
            arrived.into_iter().map(|at| self.outcome(at)).collect(),
        ))
    }

    /// The task that finished first (its position in `tasks`) and its result;
    /// event waits among the others are cancelled.
    pub fn first_of(&mut self, tasks: &[u32]) -> Result<Option<(u32, TaskResult)>, ReplayError> {
        if tasks.is_empty() {
            return Err(ReplayError::EmptyAwaitAny);
        }
        each_once(tasks)?;
        let mut best: Option<(usize, usize)> = None;
        for (position, &task) in tasks.iter().enumerate() {
            if let Some(at) = self.peek(task)? {
                if best.is_none_or(|(b, _)| at < b) {
                    best = Some((at, position));
                }
            }
        }
        let Some((_, position)) = best else {
            return Ok(None);
        };
        let Some(at) = self.take(tasks[position])? else {
            return Ok(None);
        };
        for (i, &task) in tasks.iter().enumerate() {
            if i != position && self.waits_for(task)?.is_some() && !self.taken.contains_key(&task) {
                self.cancelled.push(task);
            }
        }
        let result = self.outcome(at);
        Ok(Some((u32::try_from(position).unwrap_or(u32::MAX), result)))
    }

    /// Arrival indexes of the raised events no wait has taken, ascending.
    pub fn untaken_arrivals(&self) -> Vec<usize> {
        let mut left: Vec<usize> = self.untaken.values().flatten().copied().collect();
        left.sort_unstable();
        left
    }

    /// Raised events no wait has taken, in arrival order: carried over by
    /// continue-as-new.
    pub fn untaken_events(&self) -> Vec<Event> {
        let mut left: Vec<usize> = self.untaken.values().flatten().copied().collect();
        left.sort_unstable();
        left.into_iter().map(|at| self.events[at].clone()).collect()
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
        assert_eq!(r.calls_past_the_journal(), &[activity("a")]);
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
        assert_eq!(r.calls_past_the_journal(), &[activity("b")]);
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
                details: None,
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
        // One task named twice in one await is refused, before any copy.
        assert_eq!(r.results(&[a, b, a]), Err(ReplayError::RepeatedTask(a)));
        assert_eq!(r.first_of(&[b, b]), Err(ReplayError::RepeatedTask(b)));
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

    #[test]
    fn two_waits_for_one_event_name_need_two_events() -> Result<(), ReplayError> {
        let mut r = Replay::new(vec![], vec![raised("go", "1")], 0, 0);
        let (_, a) = r.call(wait("go"))?;
        let (_, b) = r.call(wait("go"))?;
        assert_eq!(
            r.results(&[a, b])?,
            None,
            "one event cannot satisfy two waits"
        );
        assert_eq!(
            r.result(a)?,
            Some(Ok("1".into())),
            "the failed await-all took nothing"
        );

        let mut r = Replay::new(vec![], vec![raised("go", "1"), raised("go", "2")], 0, 0);
        let (_, a) = r.call(wait("go"))?;
        let (_, b) = r.call(wait("go"))?;
        assert_eq!(
            r.results(&[a, b])?,
            Some(vec![Ok("1".into()), Ok("2".into())]),
            "in arrival order"
        );
        assert!(r.untaken_events().is_empty());
        Ok(())
    }

    #[test]
    fn a_huge_fan_out_resolves_every_task() -> Result<(), ReplayError> {
        let n = 7_000u32;
        let events: Vec<Event> = (0..n)
            .rev()
            .map(|task| Event::TaskCompleted {
                task,
                result: task.to_string(),
            })
            .collect();
        let mut r = Replay::new(vec![], events, 0, 0);
        let tasks: Vec<u32> = (0..n)
            .map(|_| r.call(activity("a")).map(|(_, t)| t))
            .collect::<Result<_, _>>()?;
        let results = r.results(&tasks)?.unwrap_or_default();
        assert_eq!(results.len(), n as usize);
        assert_eq!(results[6_999], Ok("6999".to_string()));
        Ok(())
    }
}
