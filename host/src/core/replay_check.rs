//! Whether a new version of an orchestration decides as the old one did on
//! an instance's journal: the rule a replay check applies to the code's run.
//!
//! The check runs the new code once over the journal's calls and the events
//! the journal took, and nothing else. The old code, at its last episode,
//! had exactly those events and made exactly those calls; code that makes
//! the same decisions therefore makes every journaled call, in order, and
//! then waits where the old code waited. Anything else is a divergence:
//! another call at some step, a call past the journal's end, a return or a
//! failure where the instance is still running, or a wait before the journal
//! is used up (the journal's remaining calls were never made, so nothing
//! proves the new code would make them). A journal with no call says
//! nothing against code that runs: an instance that never ran starts on
//! whatever code is served, unless that code fails.

use super::lifecycle::episode_end::Ending;
use super::replay::{Divergence, Replay};

/// What the check found for one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The new code makes the journal's decisions: the instance may move.
    Compatible,
    Divergent(Divergence),
}

/// The verdict on code that ended its run with `ending` over `replay`.
pub fn judge(ending: &Ending, replay: &Replay) -> Verdict {
    if let Some(divergence) = replay.divergence() {
        return Verdict::Divergent(divergence.clone());
    }
    let step = replay.steps();
    let here = || replay.journaled(step);
    let diverged = |code: String| {
        Verdict::Divergent(Divergence {
            step,
            journal: here(),
            code,
        })
    };
    let never_ran = replay.journaled_steps() == 0;
    match ending {
        // Code that fails (a trap, its CPU or time spent) would fail the
        // instance, whatever its journal holds.
        Ending::Broken(reason) => diverged(format!("fails: {reason}")),
        Ending::Returned(_) | Ending::Waiting if never_ran => Verdict::Compatible,
        Ending::Returned(Ok(_)) => diverged("returns its output".into()),
        Ending::Returned(Err(error)) => diverged(format!("returns an error: {error}")),
        Ending::Waiting if replay.is_replaying() => {
            diverged("waits for a task the journal has no result for".into())
        }
        Ending::Waiting => match replay.calls_past_the_journal().first() {
            Some(call) => Verdict::Divergent(Divergence {
                step: replay.journaled_steps(),
                journal: None,
                code: call.describe(),
            }),
            None => Verdict::Compatible,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::journal::{Call, Event};

    fn activity(name: &str) -> Call {
        Call::CallActivity {
            name: name.into(),
            input: "null".into(),
            retry: None,
        }
    }

    fn wait(name: &str) -> Call {
        Call::WaitForEvent { name: name.into() }
    }

    /// The journal of an instance that ran `step_a` and now waits for `go`.
    fn waiting_on_go() -> Replay {
        Replay::new(
            vec![(activity("step_a"), 1), (wait("go"), 2)],
            vec![Event::TaskCompleted {
                task: 0,
                result: "null".into(),
            }],
            9,
            0,
        )
    }

    /// Runs `code` (a sequence of calls, each awaited when `await` says so)
    /// over the journal as orchestration code would.
    fn run(mut replay: Replay, code: &[(Call, bool)]) -> (Ending, Replay) {
        for (call, awaited) in code {
            let task = match replay.call(call.clone()) {
                Ok((_, task)) => task,
                Err(e) => return (Ending::Broken(e.to_string()), replay),
            };
            if *awaited && replay.result(task).ok().flatten().is_none() {
                return (Ending::Waiting, replay);
            }
        }
        (Ending::Returned(Ok("\"done\"".into())), replay)
    }

    fn divergent(step: usize, journal: Option<&str>, code: &str) -> Verdict {
        Verdict::Divergent(Divergence {
            step,
            journal: journal.map(str::to_string),
            code: code.into(),
        })
    }

    #[test]
    fn the_same_calls_ending_in_the_same_wait_are_compatible() {
        let (ending, replay) = run(
            waiting_on_go(),
            &[(activity("step_a"), true), (wait("go"), true)],
        );
        assert_eq!(judge(&ending, &replay), Verdict::Compatible);
    }

    #[test]
    fn a_step_inserted_before_the_wait_diverges_where_it_is_made() {
        let (ending, replay) = run(
            waiting_on_go(),
            &[
                (activity("step_a"), true),
                (activity("step_c"), true),
                (wait("go"), true),
            ],
        );
        assert_eq!(
            judge(&ending, &replay),
            divergent(1, Some("wait-for-event(go)"), "call-activity(step_c)")
        );
    }

    #[test]
    fn a_call_past_the_journal_a_return_or_an_early_wait_diverge() {
        // The journal's wait is made, then one more call without waiting.
        let (ending, replay) = run(
            waiting_on_go(),
            &[
                (activity("step_a"), true),
                (wait("go"), false),
                (activity("extra"), true),
            ],
        );
        assert_eq!(
            judge(&ending, &replay),
            divergent(2, None, "call-activity(extra)"),
            "the first call past the journal's two"
        );
        // Returns where the instance runs.
        let (ending, replay) = run(
            waiting_on_go(),
            &[(activity("step_a"), true), (wait("go"), false)],
        );
        assert_eq!(
            judge(&ending, &replay),
            divergent(2, None, "returns its output")
        );
        // Waits on a timer the journal never started: that is a call too.
        let timer = Call::StartTimer { fire_at: 5 };
        let (ending, replay) = run(
            waiting_on_go(),
            &[(activity("step_a"), true), (timer, true)],
        );
        assert_eq!(
            judge(&ending, &replay),
            divergent(1, Some("wait-for-event(go)"), "start-timer(5)")
        );
    }

    #[test]
    fn a_journal_without_calls_is_compatible_with_any_code_that_runs() {
        let (ending, replay) = run(Replay::new(vec![], vec![], 0, 0), &[(activity("x"), true)]);
        assert_eq!(judge(&ending, &replay), Verdict::Compatible);
        // Stopped for its CPU on the first run: it would fail the instance.
        let spent = Ending::Broken("the orchestration code used more than 1s of CPU".into());
        assert_eq!(
            judge(&spent, &Replay::new(vec![], vec![], 0, 0)),
            divergent(
                0,
                None,
                "fails: the orchestration code used more than 1s of CPU"
            )
        );
    }
}
