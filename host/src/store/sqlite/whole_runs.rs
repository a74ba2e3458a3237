//! A held run's start and its end in one batch ([`crate::store::held_runs`]),
//! written as one run inserted ended: its session inserted, its messages the
//! session's first. The run path inserts a pending run and then updates it
//! (its two partial indexes of unfinished runs written and emptied again),
//! touches its session twice and reads the session's last message: ten
//! pages in the WAL for a one-turn run. This writes each row once: eight.
//!
//! Only a held run's start and end meet in one SQLite batch: any other
//! start is committed and answered before its run executes. The session
//! was minted for the run, so it cannot be there; if it is all the same,
//! nothing is written here and the two go as the run path writes any run.

use rusqlite::{params, Connection};

use crate::store::durable_records::{Write, Written};
use crate::store::error::StoreError;
use crate::store::records::NewRun;
use crate::store::run_tx::RunEndRow;
use crate::store::run_writes::{RunWrite, RunWritten};

/// A held run's start and its end, as found in a batch.
pub(super) struct Whole<'a> {
    run: &'a NewRun,
    bodies: &'a [String],
    end: &'a RunEndRow,
}

/// For each write of `writes`, the index of the end a start is written with
/// whole: a start that forgets nothing (a held start) and the unfenced end
/// of the same run further on, with no write of the same session between.
pub(super) fn pairs(writes: &[Write]) -> Vec<Option<usize>> {
    let mut pairs = vec![None; writes.len()];
    for (at, write) in writes.iter().enumerate() {
        let Write::Run(RunWrite::Start {
            run,
            expire_before: None,
        }) = write
        else {
            continue;
        };
        let session = (&run.session.agent, &run.session.session_id);
        for (later, other) in writes.iter().enumerate().skip(at + 1) {
            match other {
                Write::Run(RunWrite::End {
                    correlation_id,
                    fence: None,
                    ..
                }) if *correlation_id == run.correlation_id => {
                    pairs[at] = Some(later);
                    break;
                }
                Write::Run(RunWrite::Start { run: other, .. })
                    if (&other.session.agent, &other.session.session_id) == session =>
                {
                    break
                }
                Write::Run(
                    RunWrite::Messages {
                        agent, session_id, ..
                    }
                    | RunWrite::End {
                        agent, session_id, ..
                    },
                ) if (agent, session_id) == session => break,
                _ => {}
            }
        }
    }
    pairs
}

/// The start at `start` and the end at `end` of `writes`, as [`pairs`]
/// paired them.
pub(super) fn whole(writes: &[Write], start: usize, end: usize) -> Option<Whole<'_>> {
    match (writes.get(start), writes.get(end)) {
        (
            Some(Write::Run(RunWrite::Start { run, .. })),
            Some(Write::Run(RunWrite::End { bodies, end, .. })),
        ) => Some(Whole { run, bodies, end }),
        _ => None,
    }
}

/// Inserts the run whole, in the caller's transaction: what its start and
/// its end answer, or `None` (nothing written) if its session is there.
pub(super) fn insert(
    connection: &Connection,
    whole: &Whole<'_>,
    now: i64,
) -> Result<Option<(Written, Written)>, StoreError> {
    let Whole { run, bodies, end } = whole;
    let (agent, id) = (&run.session.agent, &run.session.session_id);
    let inserted = connection
        .prepare_cached(
            "INSERT INTO sessions (agent, id, created_at, last_active_at, caller) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        )?
        .execute(params![agent, id, now, now, run.caller])?;
    if inserted == 0 {
        #[cfg(test)]
        counts::REFUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        return Ok(None);
    }
    let format = run.response_format.as_ref().map(|f| f.to_string());
    connection
        .prepare_cached(
            "INSERT INTO runs (correlation_id, agent, session_id, message, response_format, traceparent, \
             caller, status, response, error, error_code, usage, created_at, updated_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )?
        .execute(params![
            run.correlation_id,
            agent,
            id,
            run.message,
            format,
            run.traceparent,
            run.caller,
            end.status,
            end.response,
            end.error,
            end.error_code,
            end.usage,
            now,
            now
        ])?;
    let mut message = connection.prepare_cached(
        "INSERT INTO messages (agent, session_id, seq, correlation_id, body, created_at) \
         VALUES (?, ?, ?, ?, ?, ?)",
    )?;
    for (seq, body) in (1_i64..).zip(bodies.iter()) {
        message.execute(params![agent, id, seq, run.correlation_id, body, now])?;
    }
    #[cfg(test)]
    counts::WHOLE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let started = RunWritten::Started {
        expired: false,
        new_session: true,
        run_here: true,
        epoch: None,
        next_in_line: true,
    };
    let ended = RunWritten::Ended {
        correlation_id: run.correlation_id.clone(),
        changed: true,
    };
    Ok(Some((Written::Run(started), Written::Run(ended))))
}

#[cfg(test)]
pub(in crate::store) mod counts {
    use std::sync::atomic::AtomicU64;
    /// Runs inserted whole.
    pub static WHOLE: AtomicU64 = AtomicU64::new(0);
    /// Pairs whose session was there: written as any start and end.
    pub static REFUSED: AtomicU64 = AtomicU64::new(0);
}
