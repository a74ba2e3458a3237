//! The agent run path's writes of one batch on PostgreSQL, as parts of the
//! batch's one statement ([`super::statement`]): the runs it
//! queues (their sessions' expiry with them), the runs it ends, and the
//! stream entries of every run, each in one part whatever their number. A
//! statement per run kept the writer's one connection waiting on round
//! trips: a batch of sixteen runs' starts and ends was some thirty of them.
//!
//! Each part is the set form of the statement path's own
//! ([`super::run_tx`]) and answers each write as that path would.
//! The parts see one snapshot, so no session may appear twice among the run
//! writes of a batch (a run queued behind another of its session must see
//! it, an ended run's messages follow its session's last one): a batch that
//! names a session twice, or has a write with no set form (a tool round's
//! messages, an end without a fence), goes statement by statement. The one
//! exception is a held run's start and its end ([`super::whole_runs`]),
//! written together as one run inserted ended.
//!
//! Two forms differ from the statement path without changing what callers
//! see: an expired session is started over in place (its messages deleted,
//! its row kept, `created_at` reset) rather than deleted and inserted again,
//! and the notifications of queued and ended runs are sent by the statement,
//! which alone knows which host took a session and which runs it ended.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::shared_hub::{SharedHub, DB_NOW, PAYLOAD_MAX};
use super::statement::Statement;
use super::whole_runs::add_wholes;
use crate::core::fence::BORN_AT;
use crate::store::error::StoreError;
use crate::store::run_writes::{RunWrite, RunWritten};

/// Whether every write has a set form and no session is named twice, but
/// by a run's start and then its end, fenced at the epoch a session is born
/// at, which go as one where `wholes` allows ([`super::whole_runs`]).
pub(super) fn set_based(writes: &[&RunWrite], wholes: bool) -> bool {
    // Each session named, and the run whose end may still follow its start.
    let mut sessions: HashMap<(&str, &str), Option<&str>> = HashMap::new();
    for write in writes {
        let (session, started) = match write {
            RunWrite::Start { run, .. } => (
                (run.session.agent.as_str(), run.session.session_id.as_str()),
                Some(run.correlation_id.as_str()),
            ),
            RunWrite::End {
                agent,
                session_id,
                fence: Some(_),
                ..
            } => ((agent.as_str(), session_id.as_str()), None),
            RunWrite::Stream { .. } => continue,
            RunWrite::End { fence: None, .. } | RunWrite::Messages { .. } => return false,
        };
        match sessions.entry(session) {
            Entry::Vacant(vacant) => {
                vacant.insert(started);
            }
            Entry::Occupied(mut named) => {
                if !(wholes && ends_whole(write, *named.get())) {
                    return false;
                }
                named.insert(None);
            }
        }
    }
    true
}

/// Whether `write` is the end of the run `started`, as a held run's is.
fn ends_whole(write: &RunWrite, started: Option<&str>) -> bool {
    match write {
        RunWrite::End {
            correlation_id,
            fence: Some(fence),
            ..
        } => started == Some(correlation_id.as_str()) && fence.epoch == BORN_AT,
        _ => false,
    }
}

/// How each write of the batch reads its answer from the statement's.
pub(super) struct RunParts {
    shapes: Vec<Shape>,
}

enum Shape {
    Start,
    End {
        correlation_id: String,
    },
    Stream {
        count: usize,
    },
    /// A start written with its end, as one run inserted ended: both were
    /// written, or the statement was refused.
    WholeStart,
    WholeEnd {
        correlation_id: String,
    },
}

/// Adds the parts of `writes` (all [`set_based`]) to the batch's statement.
pub(super) fn add_runs(
    s: &mut Statement,
    hub: &SharedHub,
    writes: &[&RunWrite],
) -> Result<RunParts, StoreError> {
    // Runs whose start and end are both here (`set_based` made sure each
    // is one start followed by its end).
    let started: HashSet<&str> = writes
        .iter()
        .filter_map(|w| match w {
            RunWrite::Start { run, .. } => Some(run.correlation_id.as_str()),
            _ => None,
        })
        .collect();
    let whole: HashSet<&str> = writes
        .iter()
        .filter_map(|w| match w {
            RunWrite::End { correlation_id, .. } if started.contains(correlation_id.as_str()) => {
                Some(correlation_id.as_str())
            }
            _ => None,
        })
        .collect();
    let mut starts = Vec::new();
    let mut ends = Vec::new();
    let mut streams = Vec::new();
    let mut wholes = Vec::new();
    let mut shapes = Vec::with_capacity(writes.len());
    for write in writes {
        match write {
            RunWrite::Start { run, .. } if whole.contains(run.correlation_id.as_str()) => {
                shapes.push(Shape::WholeStart);
            }
            RunWrite::Start { .. } => {
                starts.push(*write);
                shapes.push(Shape::Start);
            }
            RunWrite::End { correlation_id, .. } if whole.contains(correlation_id.as_str()) => {
                wholes.push(*write);
                shapes.push(Shape::WholeEnd {
                    correlation_id: correlation_id.clone(),
                });
            }
            RunWrite::End { correlation_id, .. } => {
                ends.push(*write);
                shapes.push(Shape::End {
                    correlation_id: correlation_id.clone(),
                });
            }
            RunWrite::Stream { rows, .. } => {
                streams.push(*write);
                shapes.push(Shape::Stream { count: rows.len() });
            }
            RunWrite::Messages { .. } => {
                return Err(StoreError::Write(
                    "a tool round's messages have no set form".into(),
                ))
            }
        }
    }
    #[cfg(test)]
    counts::SET_BASED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let channel = s.bind(hub.channel.clone())? + "::TEXT";
    if !starts.is_empty() {
        add_starts(s, hub, &starts, &channel)?;
    }
    if !ends.is_empty() {
        add_ends(s, hub, &ends, &channel)?;
    }
    if !streams.is_empty() {
        add_streams(s, &streams)?;
    }
    if !wholes.is_empty() {
        let starts: Vec<&RunWrite> = writes
            .iter()
            .filter(|w| matches!(w, RunWrite::Start { run, .. } if whole.contains(run.correlation_id.as_str())))
            .copied()
            .collect();
        add_wholes(s, &starts, &wholes)?;
    }
    Ok(RunParts { shapes })
}

impl RunParts {
    /// Each write's answer, in order, from the statement's answers.
    pub fn answers(&self, answers: Option<&str>) -> Result<Vec<RunWritten>, StoreError> {
        let answers: Value = serde_json::from_str(answers.unwrap_or("{}"))
            .map_err(|e| StoreError::Corrupt(format!("a batch's answers: {e}")))?;
        let list =
            |key: &str| -> Vec<Value> { answers[key].as_array().cloned().unwrap_or_default() };
        let (mut starts, mut ends) = (list("starts").into_iter(), list("ends").into_iter());
        let mut stream_ids = list("streams").into_iter().filter_map(|id| id.as_i64());
        let missing = || StoreError::Corrupt("a batch's answers lack a run's".into());
        self.shapes
            .iter()
            .map(|shape| match shape {
                Shape::Start => {
                    let a = starts.next().ok_or_else(missing)?;
                    let flag = |i: usize| a[i].as_bool().unwrap_or(false);
                    if flag(6) {
                        return Ok(RunWritten::SessionOfAnother);
                    }
                    let run_here = flag(3);
                    Ok(RunWritten::Started {
                        new_session: flag(1),
                        expired: flag(2),
                        run_here,
                        epoch: a[4].as_i64().filter(|_| run_here),
                        next_in_line: !flag(5),
                    })
                }
                Shape::End { correlation_id } => {
                    let a = ends.next().ok_or_else(missing)?;
                    Ok(match a[1].as_bool().unwrap_or(false) {
                        false => RunWritten::Fenced,
                        true => RunWritten::Ended {
                            correlation_id: correlation_id.clone(),
                            changed: a[2].as_bool().unwrap_or(false),
                        },
                    })
                }
                Shape::WholeStart => Ok(RunWritten::Started {
                    new_session: true,
                    expired: false,
                    run_here: true,
                    epoch: Some(BORN_AT),
                    next_in_line: true,
                }),
                Shape::WholeEnd { correlation_id } => Ok(RunWritten::Ended {
                    correlation_id: correlation_id.clone(),
                    changed: true,
                }),
                Shape::Stream { count } => {
                    let ids: Vec<i64> = stream_ids.by_ref().take(*count).collect();
                    match ids.len() == *count {
                        true => Ok(RunWritten::Streamed(ids)),
                        false => Err(missing()),
                    }
                }
            })
            .collect()
    }
}

/// Queues runs: each session created, touched, or started over if it was
/// idle since its run's cutoff with no run holding it, and claimed for this
/// host unless a live host has it (a fresh session is born claimed at
/// epoch 1, as a claim right after its insert would leave it). `busy` reads
/// the runs as they were before these. A run queued for a session this
/// host does not take wakes the hosts that may. A run whose caller may not
/// continue its session (another caller's first message claimed it,
/// [`crate::store::run_tx::continues`]) is refused alone: nothing of it is
/// written, and the batch's other runs are queued.
fn add_starts(
    s: &mut Statement,
    hub: &SharedHub,
    starts: &[&RunWrite],
    channel: &str,
) -> Result<(), StoreError> {
    let (mut agent, mut session, mut correlation, mut message) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut format, mut trace, mut cutoff, mut caller) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for write in starts {
        let RunWrite::Start { run, expire_before } = write else {
            continue;
        };
        agent.push(run.session.agent.clone());
        session.push(run.session.session_id.clone());
        correlation.push(run.correlation_id.clone());
        message.push(run.message.clone());
        format.push(run.response_format.as_ref().map(|f| f.to_string()));
        trace.push(run.traceparent.clone());
        cutoff.push(*expire_before);
        caller.push(run.caller.clone());
    }
    let queued = agent.len();
    let columns = [
        s.bind(agent)? + "::TEXT[]",
        s.bind(session)? + "::TEXT[]",
        s.bind(correlation)? + "::TEXT[]",
        s.bind(message)? + "::TEXT[]",
        s.bind(format)? + "::TEXT[]",
        s.bind(trace)? + "::TEXT[]",
        s.bind(cutoff)? + "::BIGINT[]",
        s.bind(caller)? + "::TEXT[]",
    ]
    .join(", ");
    let (now, me, live) = (s.now().to_string(), s.me()?, SharedHub::live_hosts());
    // A front runs nothing: it gives each session no live host has to a
    // live worker, spread by the run's id, so that the worker is told
    // directly (no claim pass on every worker) and reads only its run.
    let assignee = match hub.owner() {
        Some(_) => "NULL::TEXT".to_string(),
        None => {
            s.part(
                "run_workers",
                format!(
                    "SELECT id, row_number() OVER (ORDER BY id) - 1 AS k, count(*) OVER () AS c \
                     FROM hosts WHERE role <> 'front' AND expires_at > {DB_NOW}"
                ),
            );
            "(SELECT w.id FROM run_workers w \
              WHERE w.k = mod(hashtext(r.corr)::BIGINT + 2147483648, w.c))"
                .to_string()
        }
    };
    s.part(
        "run_input",
        format!(
            "SELECT r.*, COALESCE({me}, {assignee}) AS taker FROM UNNEST({columns}) WITH ORDINALITY \
             AS r(agent, sid, corr, message, format, trace, cutoff, caller, n)"
        ),
    );
    s.part(
        "run_expiring",
        "SELECT i.n, i.agent, i.sid FROM run_input i JOIN sessions s ON s.agent = i.agent AND s.id = i.sid \
         WHERE i.cutoff IS NOT NULL AND s.last_active_at < i.cutoff \
         AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.agent = i.agent AND r.session_id = i.sid \
           AND r.status IN ('pending', 'running', 'awaiting_approval'))"
            .into(),
    );
    s.part(
        "run_wiped",
        "DELETE FROM messages m USING run_expiring e WHERE m.agent = e.agent AND m.session_id = e.sid"
            .into(),
    );
    s.part(
        "run_busy",
        "SELECT i.n, EXISTS (SELECT 1 FROM runs r WHERE r.agent = i.agent AND r.session_id = i.sid \
         AND r.status IN ('pending', 'running')) AS busy FROM run_input i"
            .into(),
    );
    // The parts above read the statement's snapshot; the upsert below
    // waits for the session's row and sees its latest version. Another
    // host's run queued or ended in between changed that row (every queue
    // and end writes it): the upsert then leaves it, the statement is
    // refused whole, and the batch is decided again on a fresh snapshot.
    // Who may go on with each session is read on the same snapshot, and
    // holds: a session's caller is written only with the row's insert (or
    // its start over, which admits anyone), and the upsert below writes a
    // row only at the version read here. A session inserted since (another
    // host's first message) refuses the statement whole, as above, and the
    // runs are decided again on what that host committed.
    s.part(
        "run_seen",
        "SELECT i.n, i.agent, i.sid, s.xmin::TEXT AS version, s.id IS NOT NULL AS found, \
         s.caller FROM run_input i LEFT JOIN sessions s ON s.agent = i.agent AND s.id = i.sid"
            .into(),
    );
    s.part(
        "run_admitted",
        "SELECT v.n FROM run_seen v JOIN run_input i ON i.n = v.n \
         WHERE i.caller IS NULL OR NOT v.found OR v.caller = i.caller \
         OR EXISTS (SELECT 1 FROM run_expiring e WHERE e.n = i.n)"
            .into(),
    );
    s.part(
        "run_refused",
        "SELECT i.n FROM run_input i WHERE i.n NOT IN (SELECT n FROM run_admitted)".into(),
    );
    s.part(
        "run_touched",
        format!(
            "INSERT INTO sessions AS s (agent, id, created_at, last_active_at, owner, epoch, caller) \
             SELECT agent, sid, {now}, {now}, taker, CASE WHEN taker IS NULL THEN 0 ELSE 1 END, caller FROM run_input \
             WHERE n IN (SELECT n FROM run_admitted) \
             ON CONFLICT (agent, id) DO UPDATE SET last_active_at = excluded.last_active_at, \
               created_at = CASE WHEN EXISTS (SELECT 1 FROM run_expiring e WHERE e.agent = s.agent AND e.sid = s.id) \
                 THEN excluded.created_at ELSE s.created_at END, \
               caller = CASE WHEN EXISTS (SELECT 1 FROM run_expiring e WHERE e.agent = s.agent AND e.sid = s.id) \
                 THEN excluded.caller ELSE s.caller END, \
               owner = CASE WHEN excluded.owner IS NOT NULL \
                 AND (s.owner IS NULL OR s.owner = excluded.owner OR s.owner NOT IN ({live})) \
                 THEN excluded.owner ELSE s.owner END, \
               epoch = CASE WHEN excluded.owner IS NOT NULL AND s.owner IS DISTINCT FROM excluded.owner \
                 AND (s.owner IS NULL OR s.owner NOT IN ({live})) THEN s.epoch + 1 ELSE s.epoch END \
             WHERE s.xmin::TEXT IS NOT DISTINCT FROM \
               (SELECT v.version FROM run_seen v WHERE v.agent = s.agent AND v.sid = s.id) \
             RETURNING s.agent, s.id, (xmax = 0) AS new_session, s.owner, s.epoch"
        ),
    );
    s.must_hold(
        queued,
        "(SELECT COUNT(*) FROM run_touched) + (SELECT COUNT(*) FROM run_refused)".into(),
    );
    s.part(
        "run_queued",
        format!(
            "INSERT INTO runs (correlation_id, agent, session_id, message, response_format, traceparent, \
             caller, status, created_at, updated_at) \
             SELECT corr, agent, sid, message, format, trace, caller, 'pending', {now}, {now} FROM run_input \
             WHERE n IN (SELECT n FROM run_admitted) ORDER BY n"
        ),
    );
    s.part(
        "run_started",
        format!(
            "SELECT i.n, EXISTS (SELECT 1 FROM run_expiring e WHERE e.n = i.n) AS expired, t.new_session, \
             ({me} IS NOT NULL AND t.owner IS NOT DISTINCT FROM {me}) AS run_here, t.epoch, b.busy, \
             t.owner, i.corr, i.agent, i.sid \
             FROM run_input i JOIN run_touched t ON t.agent = i.agent AND t.id = i.sid \
             JOIN run_busy b ON b.n = i.n"
        ),
    );
    // Each start's answer, in order; the last element says it was refused.
    s.answer(
        "starts",
        "(SELECT COALESCE(json_agg(a ORDER BY n), '[]'::json) FROM ( \
           SELECT n, json_build_array(n, new_session, expired, run_here, epoch, busy, false) AS a FROM run_started \
           UNION ALL SELECT n, json_build_array(n, false, false, false, NULL, false, true) FROM run_refused \
         ) AS started)"
            .into(),
    );
    // A run for a session another live host owns is told to that host
    // alone, with what it needs to run it; one for a session nobody took
    // (no live worker) wakes every host's claim pass. A payload past
    // PostgreSQL's limit (long ids) falls back to the wake-up.
    let sessions = s.bind(hub.sessions_payload())? + "::TEXT";
    let assigned = s.bind(hub.assigned_prefix())? + "::TEXT";
    s.notify(format!(
        "(SELECT COUNT(pg_notify({channel}, CASE WHEN octet_length(p) <= {max} THEN p ELSE {sessions} END)) FROM \
         (SELECT {assigned} || json_build_array(owner, corr, agent, sid, new_session OR expired, busy)::TEXT AS p \
          FROM run_started WHERE owner IS NOT NULL AND NOT run_here) AS assigned) \
         + (SELECT COUNT(pg_notify({channel}, {sessions})) FROM \
         (SELECT 1 FROM run_started WHERE owner IS NULL LIMIT 1) AS elsewhere)",
        max = PAYLOAD_MAX,
    ));
    Ok(())
}

/// Ends fenced runs: each session's row locked and its fence checked, the
/// run ended if it had not, and the messages not stored yet appended after
/// the session's last one. Whoever waits for a run this batch ended, on
/// any host, is told.
fn add_ends(
    s: &mut Statement,
    hub: &SharedHub,
    ends: &[&RunWrite],
    channel: &str,
) -> Result<(), StoreError> {
    let (mut agent, mut session, mut correlation, mut owner, mut epoch) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut status, mut response, mut error, mut code, mut usage) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut body_of, mut body_k, mut body) = (Vec::new(), Vec::new(), Vec::new());
    for (n, write) in ends.iter().enumerate() {
        let RunWrite::End {
            agent: a,
            session_id,
            correlation_id,
            fence: Some(fence),
            bodies,
            end,
        } = write
        else {
            return Err(StoreError::Write(
                "an end without a fence has no set form".into(),
            ));
        };
        agent.push(a.clone());
        session.push(session_id.clone());
        correlation.push(correlation_id.clone());
        owner.push(fence.owner.clone());
        epoch.push(fence.epoch);
        status.push(end.status);
        response.push(end.response.clone());
        error.push(end.error.clone());
        code.push(end.error_code.clone());
        usage.push(end.usage.clone());
        for (k, b) in bodies.iter().enumerate() {
            body_of.push(i64::try_from(n + 1).unwrap_or(i64::MAX));
            body_k.push(i64::try_from(k + 1).unwrap_or(i64::MAX));
            body.push(b.clone());
        }
    }
    let columns = [
        s.bind(agent)? + "::TEXT[]",
        s.bind(session)? + "::TEXT[]",
        s.bind(correlation)? + "::TEXT[]",
        s.bind(owner)? + "::TEXT[]",
        s.bind(epoch)? + "::BIGINT[]",
        s.bind(status)? + "::TEXT[]",
        s.bind(response)? + "::TEXT[]",
        s.bind(error)? + "::TEXT[]",
        s.bind(code)? + "::TEXT[]",
        s.bind(usage)? + "::TEXT[]",
    ]
    .join(", ");
    let bodies = [
        s.bind(body_of)? + "::BIGINT[]",
        s.bind(body_k)? + "::BIGINT[]",
        s.bind(body)? + "::TEXT[]",
    ]
    .join(", ");
    let now = s.now().to_string();
    s.part(
        "end_input",
        format!(
            "SELECT * FROM UNNEST({columns}) WITH ORDINALITY \
             AS e(agent, sid, corr, owner, epoch, status, response, error, code, usage, n)"
        ),
    );
    s.part(
        "end_bodies",
        format!("SELECT * FROM UNNEST({bodies}) AS b(n, k, body)"),
    );
    // The session's row is taken (a take-over waits for this commit) only
    // if it is still held as the run began, and marked active if the end
    // brings messages: one write where a lock and an update were two.
    // `IS NOT DISTINCT FROM` (the owner is never NULL here): found by its
    // key, never through the index of the owner's sessions, which a plan
    // made without statistics picked and read thousands of.
    s.part(
        "end_held",
        format!(
            "UPDATE sessions s SET last_active_at = CASE WHEN EXISTS (SELECT 1 FROM end_bodies b WHERE b.n = i.n) \
             THEN {now} ELSE s.last_active_at END FROM end_input i \
             WHERE s.agent = i.agent AND s.id = i.sid AND s.owner IS NOT DISTINCT FROM i.owner \
             AND s.epoch = i.epoch RETURNING i.n"
        ),
    );
    s.part(
        "end_ended",
        format!(
            "UPDATE runs r SET status = i.status, response = i.response, error = i.error, \
             error_code = i.code, usage = i.usage, updated_at = {now} FROM end_input i \
             WHERE r.correlation_id = i.corr AND r.status IN ('pending', 'running') \
             AND i.n IN (SELECT n FROM end_held) RETURNING i.n, i.corr, r.agent, r.session_id, r.message, \
             r.response_format, r.status, r.response, r.error, r.error_code, r.usage, r.created_at, \
             r.updated_at, r.traceparent, r.caller"
        ),
    );
    // Each ended run's messages follow its session's last one (looked up
    // once per run, not per message).
    s.part(
        "end_last",
        "SELECT i.n, i.agent, i.sid, i.corr, (SELECT COALESCE(MAX(m.seq), 0) FROM messages m \
         WHERE m.agent = i.agent AND m.session_id = i.sid) AS last FROM end_input i \
         WHERE i.n IN (SELECT n FROM end_ended) AND i.n IN (SELECT n FROM end_bodies)"
            .into(),
    );
    s.part(
        "end_added",
        format!(
            "INSERT INTO messages (agent, session_id, seq, correlation_id, body, created_at) \
             SELECT l.agent, l.sid, l.last + b.k, l.corr, b.body, {now} \
             FROM end_bodies b JOIN end_last l ON l.n = b.n"
        ),
    );
    s.answer(
        "ends",
        "(SELECT COALESCE(json_agg(json_build_array(i.n, \
           EXISTS (SELECT 1 FROM end_held h WHERE h.n = i.n), \
           EXISTS (SELECT 1 FROM end_ended d WHERE d.n = i.n)) ORDER BY i.n), '[]'::json) FROM end_input i)"
            .into(),
    );
    // The ended run's record goes with its notification, so that a waiter
    // on another host (a front) answers without reading it; a record past
    // PostgreSQL's limit is named only, and read. With no other live host
    // nobody else can be waiting (a host whose lease lapsed reads its
    // waited runs once a pass): a `serve` alone on its hub sends nothing,
    // where every end used to go through PostgreSQL's notification queue
    // and back to the host that sent it.
    let finished = s.bind(hub.run_finished_payload(""))? + "::TEXT";
    let ended = s.bind(hub.run_ended_prefix())? + "::TEXT";
    let sender = s.bind(hub.host.clone())? + "::TEXT";
    s.notify(format!(
        "(SELECT COUNT(pg_notify({channel}, CASE WHEN octet_length(p) <= {max} THEN p ELSE {finished} || corr END)) \
         FROM (SELECT d.corr, {ended} || json_build_array(d.corr, d.agent, d.session_id, d.message, \
           d.response_format, d.status, d.response, d.error, d.error_code, d.usage, d.created_at, \
           d.updated_at, d.traceparent, d.caller)::TEXT AS p FROM end_ended d \
           WHERE EXISTS (SELECT 1 FROM hosts h WHERE h.id <> {sender} AND h.expires_at > {DB_NOW})) AS ended)",
        max = PAYLOAD_MAX,
    ));
    Ok(())
}

/// Every stream write's entries in one insert; ids ascend in insertion
/// order, so each write gets its own rows' ids back in order.
fn add_streams(s: &mut Statement, streams: &[&RunWrite]) -> Result<(), StoreError> {
    let (mut correlation, mut kind, mut data, mut expires, mut attempt) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for write in streams {
        let RunWrite::Stream { rows, expires_at } = write else {
            continue;
        };
        for row in rows {
            correlation.push(row.correlation_id.clone());
            kind.push(row.kind);
            data.push(row.data.clone());
            expires.push(*expires_at);
            attempt.push(row.attempt);
        }
    }
    let columns = [
        s.bind(correlation)? + "::TEXT[]",
        s.bind(kind)? + "::TEXT[]",
        s.bind(data)? + "::TEXT[]",
        s.bind(expires)? + "::BIGINT[]",
        s.bind(attempt)? + "::BIGINT[]",
    ]
    .join(", ");
    let now = s.now().to_string();
    s.part(
        "stream_added",
        format!(
            "INSERT INTO stream_entries (correlation_id, kind, data, created_at, expires_at, attempt) \
             SELECT c, k, d, {now}, e, a FROM UNNEST({columns}) WITH ORDINALITY AS r(c, k, d, e, a, n) \
             ORDER BY n RETURNING id"
        ),
    );
    s.answer(
        "streams",
        "(SELECT COALESCE(json_agg(id ORDER BY id), '[]'::json) FROM stream_added)".into(),
    );
    Ok(())
}

/// Batches whose run writes went in their set form, for tests.
#[cfg(test)]
pub(in crate::store) mod counts {
    use std::sync::atomic::AtomicU64;
    pub static SET_BASED: AtomicU64 = AtomicU64::new(0);
}
