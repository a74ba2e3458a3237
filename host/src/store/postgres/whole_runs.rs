//! A held run's start and its end in one batch ([`crate::store::held_runs`]):
//! written as one run inserted ended, its session inserted this host's at
//! the epoch a claim at its insert would leave ([`BORN_AT`]), its messages
//! the session's first. Where the run path writes a pending run and then
//! updates it (a second version of the row, every one of its indexes
//! written again, two of them partial ones it leaves at once), the session
//! twice and the statement's parts twice, this writes each row once.
//!
//! The session was minted for the run, so nobody else can have it. If it
//! is there all the same, nothing of the statement is written (the
//! inserted sessions are counted with the batch's fences) and the batch is
//! decided again without this form: the start and the end then go as the
//! statement path writes any run ([`super::run_tx`]), in one transaction.
//! Nobody else knows the run, so no other host waits for its end: nothing
//! is notified.

use std::collections::HashMap;

use super::statement::Statement;
use crate::core::fence::BORN_AT;
use crate::store::error::StoreError;
use crate::store::run_writes::RunWrite;

/// Adds the part that writes each run of `starts` whole with its end in
/// `ends` (one each, by correlation id).
pub(super) fn add_wholes(
    s: &mut Statement,
    starts: &[&RunWrite],
    ends: &[&RunWrite],
) -> Result<(), StoreError> {
    let by_run: HashMap<&str, &RunWrite> = ends
        .iter()
        .filter_map(|w| match w {
            RunWrite::End { correlation_id, .. } => Some((correlation_id.as_str(), *w)),
            _ => None,
        })
        .collect();
    let (mut agent, mut session, mut correlation, mut message) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut format, mut trace, mut caller, mut owner) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut status, mut response, mut error, mut code, mut usage) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut body_of, mut body_k, mut body) = (Vec::new(), Vec::new(), Vec::new());
    for start in starts {
        let RunWrite::Start { run, .. } = start else {
            continue;
        };
        let Some(RunWrite::End {
            fence: Some(fence),
            bodies,
            end,
            ..
        }) = by_run.get(run.correlation_id.as_str())
        else {
            return Err(StoreError::Write(format!(
                "the run {} has no fenced end in its batch",
                run.correlation_id
            )));
        };
        agent.push(run.session.agent.clone());
        session.push(run.session.session_id.clone());
        correlation.push(run.correlation_id.clone());
        message.push(run.message.clone());
        format.push(run.response_format.as_ref().map(|f| f.to_string()));
        trace.push(run.traceparent.clone());
        caller.push(run.caller.clone());
        owner.push(fence.owner.clone());
        status.push(end.status);
        response.push(end.response.clone());
        error.push(end.error.clone());
        code.push(end.error_code.clone());
        usage.push(end.usage.clone());
        let n = i64::try_from(agent.len()).unwrap_or(i64::MAX);
        for (k, b) in bodies.iter().enumerate() {
            body_of.push(n);
            body_k.push(i64::try_from(k + 1).unwrap_or(i64::MAX));
            body.push(b.clone());
        }
    }
    let written = agent.len();
    let columns = [
        s.bind(agent)? + "::TEXT[]",
        s.bind(session)? + "::TEXT[]",
        s.bind(correlation)? + "::TEXT[]",
        s.bind(message)? + "::TEXT[]",
        s.bind(format)? + "::TEXT[]",
        s.bind(trace)? + "::TEXT[]",
        s.bind(caller)? + "::TEXT[]",
        s.bind(owner)? + "::TEXT[]",
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
    let (now, me) = (s.now().to_string(), s.me()?);
    s.part(
        "whole_input",
        format!(
            "SELECT * FROM UNNEST({columns}) WITH ORDINALITY AS w(agent, sid, corr, message, format, \
             trace, caller, owner, status, response, error, code, usage, n)"
        ),
    );
    s.part(
        "whole_bodies",
        format!("SELECT * FROM UNNEST({bodies}) AS b(n, k, body)"),
    );
    // Only this host's: a fence of another's is refused with the rest.
    s.part(
        "whole_sessions",
        format!(
            "INSERT INTO sessions (agent, id, created_at, last_active_at, owner, epoch, caller) \
             SELECT agent, sid, {now}, {now}, owner, {BORN_AT}, caller FROM whole_input \
             WHERE owner = {me} ON CONFLICT (agent, id) DO NOTHING RETURNING agent, id"
        ),
    );
    s.must_hold(written, "(SELECT COUNT(*) FROM whole_sessions)".into());
    s.part(
        "whole_runs",
        format!(
            "INSERT INTO runs (correlation_id, agent, session_id, message, response_format, traceparent, \
             caller, status, response, error, error_code, usage, created_at, updated_at) \
             SELECT corr, agent, sid, message, format, trace, caller, status, response, error, code, \
             usage, {now}, {now} FROM whole_input w \
             WHERE EXISTS (SELECT 1 FROM whole_sessions s WHERE s.agent = w.agent AND s.id = w.sid) \
             ORDER BY n"
        ),
    );
    s.part(
        "whole_messages",
        format!(
            "INSERT INTO messages (agent, session_id, seq, correlation_id, body, created_at) \
             SELECT w.agent, w.sid, b.k, w.corr, b.body, {now} \
             FROM whole_bodies b JOIN whole_input w ON w.n = b.n \
             WHERE EXISTS (SELECT 1 FROM whole_sessions s WHERE s.agent = w.agent AND s.id = w.sid)"
        ),
    );
    Ok(())
}
