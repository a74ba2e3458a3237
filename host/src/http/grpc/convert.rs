//! The engine's instances, statuses, times and errors in the contract's
//! terms. Payloads are JSON text on both sides (the SDKs serialize inputs,
//! outputs and event data to JSON themselves), so they pass unchanged.

use prost_types::Timestamp;
use tonic::Status;

use super::proto::{OrchestrationState, OrchestrationStatus, TaskFailureDetails};
use crate::core::failure::FailureDetails;
use crate::core::ids;
use crate::core::instance::RuntimeStatus;
use crate::core::sdk_history;
use crate::durable::{DurableError, InstanceFilter, InstanceRecord, Orchestrator};

pub(super) fn status_of(status: RuntimeStatus) -> OrchestrationStatus {
    match status {
        RuntimeStatus::Pending => OrchestrationStatus::Pending,
        RuntimeStatus::Running => OrchestrationStatus::Running,
        RuntimeStatus::Suspended => OrchestrationStatus::Suspended,
        RuntimeStatus::Completed => OrchestrationStatus::Completed,
        RuntimeStatus::Failed => OrchestrationStatus::Failed,
        RuntimeStatus::Terminated => OrchestrationStatus::Terminated,
        RuntimeStatus::ContinuedAsNew => OrchestrationStatus::ContinuedAsNew,
    }
}

/// The engine's status for a wire value; `Ok(None)` for CANCELED, which no
/// instance here ever has (so a filter on it alone matches nothing).
pub(super) fn runtime_status(wire: i32) -> Result<Option<RuntimeStatus>, Status> {
    let status = OrchestrationStatus::try_from(wire)
        .map_err(|_| Status::invalid_argument(format!("unknown orchestration status {wire}")))?;
    Ok(match status {
        OrchestrationStatus::Pending => Some(RuntimeStatus::Pending),
        OrchestrationStatus::Running => Some(RuntimeStatus::Running),
        OrchestrationStatus::Suspended => Some(RuntimeStatus::Suspended),
        OrchestrationStatus::Completed => Some(RuntimeStatus::Completed),
        OrchestrationStatus::Failed => Some(RuntimeStatus::Failed),
        OrchestrationStatus::Terminated => Some(RuntimeStatus::Terminated),
        OrchestrationStatus::ContinuedAsNew => Some(RuntimeStatus::ContinuedAsNew),
        OrchestrationStatus::Canceled => None,
    })
}

/// The statuses of a filter, `None` when it asks only for statuses no
/// instance can have (the answer is then empty, not everything).
pub(super) fn statuses(wire: &[i32]) -> Result<Option<Vec<RuntimeStatus>>, Status> {
    let mut statuses = Vec::with_capacity(wire.len());
    for status in wire {
        statuses.extend(runtime_status(*status)?);
    }
    Ok((wire.is_empty() || !statuses.is_empty()).then_some(statuses))
}

pub(super) fn timestamp(ms: i64) -> Timestamp {
    Timestamp {
        seconds: ms.div_euclid(1000),
        // In 0..1000, so the product fits.
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

pub(super) fn millis(at: &Timestamp) -> i64 {
    at.seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(at.nanos) / 1_000_000)
}

/// An instance as `OrchestrationState`: payloads with `payloads`; a failed
/// instance's failure details as its SDK worker reported them (`reported`),
/// else its reason (its output, a JSON string).
pub(super) fn state_of(
    instance: &InstanceRecord,
    payloads: bool,
    reported: Option<&FailureDetails>,
) -> OrchestrationState {
    let failed = instance.status == RuntimeStatus::Failed;
    let failure_details = failed.then(|| match reported {
        Some(reported) => details_of(reported),
        None => TaskFailureDetails {
            error_type: "OrchestrationFailed".to_string(),
            error_message: instance.output.as_deref().map(text_of).unwrap_or_default(),
            ..TaskFailureDetails::default()
        },
    });
    OrchestrationState {
        instance_id: instance.id.clone(),
        name: instance.name.clone(),
        version: sdk_history::version_of(&instance.component_digest).map(str::to_string),
        orchestration_status: status_of(instance.status) as i32,
        created_timestamp: Some(timestamp(instance.created_at)),
        scheduled_start_timestamp: instance.start_at.map(timestamp),
        last_updated_timestamp: Some(timestamp(instance.updated_at)),
        completed_timestamp: instance
            .status
            .is_finished()
            .then(|| timestamp(instance.updated_at)),
        input: payloads.then(|| present(&instance.input)).flatten(),
        output: (payloads && !failed)
            .then(|| instance.output.as_deref().and_then(present))
            .flatten(),
        custom_status: instance.custom_status.clone(),
        failure_details,
        execution_id: Some(crate::core::ids::protocol_execution_id(
            &instance.id,
            instance.execution,
        )),
        tags: instance
            .tags
            .as_deref()
            .and_then(|tags| serde_json::from_str(tags).ok())
            .unwrap_or_default(),
        ..OrchestrationState::default()
    }
}

/// Causes kept below a failure: the SDKs nest one or two; a worker's deeper
/// chain is cut there.
const INNER_FAILURES: usize = 8;

/// Bytes of a failure's message, and of its stack, kept at each level: a
/// worker's answer may be 32 MiB, which the journal would carry into every
/// episode's history.
const FAILURE_TEXT: usize = 16 << 10;

/// `text` cut to at most [`FAILURE_TEXT`] bytes, on a character boundary.
fn cut(mut text: String) -> String {
    if text.len() > FAILURE_TEXT {
        let mut end = FAILURE_TEXT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str(" …(cut)");
    }
    text
}

/// A worker's failure details as the journal keeps them.
pub(super) fn failure_of(details: TaskFailureDetails) -> FailureDetails {
    fn kept(details: TaskFailureDetails, depth: usize) -> FailureDetails {
        FailureDetails {
            error_type: cut(details.error_type),
            message: cut(details.error_message),
            stack_trace: details.stack_trace.map(cut),
            inner: details
                .inner_failure
                .filter(|_| depth < INNER_FAILURES)
                .map(|inner| Box::new(kept(*inner, depth + 1))),
            non_retriable: details.is_non_retriable,
        }
    }
    kept(details, 0)
}

/// Failure details kept in the journal, as the worker sent them.
pub(super) fn details_of(failure: &FailureDetails) -> TaskFailureDetails {
    TaskFailureDetails {
        error_type: failure.error_type.clone(),
        error_message: failure.message.clone(),
        stack_trace: failure.stack_trace.clone(),
        inner_failure: failure
            .inner
            .as_deref()
            .map(|inner| Box::new(details_of(inner))),
        is_non_retriable: failure.non_retriable,
        ..TaskFailureDetails::default()
    }
}

/// A payload as the SDKs read it: the engine keeps an absent one as JSON
/// `null`, which the SDKs send as no payload at all and read back as `None`
/// (a `'null'` string would be their input); one sent as JSON `null` is
/// kept apart ([`sdk_history::KEPT_NULL`]) and reads back as `"null"`.
pub(super) fn present(payload: &str) -> Option<String> {
    match payload {
        "null" => None,
        sdk_history::KEPT_NULL => Some("null".to_string()),
        _ => Some(payload.to_string()),
    }
}

/// An instance id a client gives (a start's, an entity's): within the
/// managed scheduler's limit ([`ids::SCHEDULER_ID_CHARS`] characters),
/// else `INVALID_ARGUMENT` as it answers.
pub(super) fn scheduler_id(id: &str) -> Result<(), Status> {
    let chars = id.chars().count();
    match chars > ids::SCHEDULER_ID_CHARS {
        true => Err(Status::invalid_argument(format!(
            "instance id '{id}' is too long: {chars} characters, where the length limit is {} \
             (the Durable Task Scheduler's)",
            ids::SCHEDULER_ID_CHARS
        ))),
        false => Ok(()),
    }
}

/// The caller's deadline from its `grpc-timeout` header (`<digits><unit>`,
/// units H M S m u n).
pub(super) fn timeout_of(header: Option<&str>) -> Option<std::time::Duration> {
    use std::time::Duration;
    let header = header?;
    let digits = header.get(..header.len().checked_sub(1)?)?;
    let amount: u64 = digits.parse().ok()?;
    Some(match header.as_bytes().last()? {
        b'H' => Duration::from_secs(amount.saturating_mul(3600)),
        b'M' => Duration::from_secs(amount.saturating_mul(60)),
        b'S' => Duration::from_secs(amount),
        b'm' => Duration::from_millis(amount),
        b'u' => Duration::from_micros(amount),
        b'n' => Duration::from_nanos(amount),
        _ => return None,
    })
}

/// A JSON string's text; any other JSON as written.
pub(super) fn text_of(json: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(serde_json::Value::String(text)) => text,
        _ => json.to_string(),
    }
}

/// Where a page begins: after `created_at:id`, the last of the previous
/// page, as this host's continuation tokens say; `None` for the first.
pub(super) fn page_after(token: Option<&str>) -> Result<Option<(i64, String)>, Status> {
    match token {
        None | Some("" | "0") => Ok(None),
        Some(token) => token
            .split_once(':')
            .and_then(|(t, id)| Some((t.parse::<i64>().ok()?, id.to_string())))
            .map(Some)
            .ok_or_else(|| {
                Status::invalid_argument("the continuation token is not one this host issued")
            }),
    }
}

/// A page of the instances `filter` matches after the one `token` names:
/// `asked` of them (none or fewer than one: `most`, never more), and
/// whether more match.
pub(super) async fn page_of(
    orchestrator: &Orchestrator,
    filter: &InstanceFilter,
    asked: i64,
    most: usize,
    token: Option<&str>,
) -> Result<(Vec<InstanceRecord>, bool), Status> {
    let top = usize::try_from(asked)
        .ok()
        .filter(|n| *n > 0)
        .map_or(most, |n| n.min(most));
    let after = page_after(token)?;
    let mut page = orchestrator
        .list(filter, top + 1, after)
        .await
        .map_err(refusal)?;
    let more = page.len() > top;
    page.truncate(top);
    Ok((page, more))
}

/// The token of the page after `last` ([`page_after`] reads it).
pub(super) fn token_after(last: &InstanceRecord) -> String {
    format!("{}:{}", last.created_at, last.id)
}

/// A payload as the engine takes it: JSON text, `null` when absent.
pub(super) fn payload(what: &str, value: Option<String>) -> Result<String, Status> {
    let Some(text) = value else {
        return Ok("null".to_string());
    };
    serde_json::from_str::<serde::de::IgnoredAny>(&text)
        .map_err(|e| Status::invalid_argument(format!("the {what} is not JSON: {e}")))?;
    Ok(text)
}

/// The engine's refusal as the gRPC status the SDKs turn into their own
/// exceptions; a store failure is logged here, with its cause.
pub(super) fn refusal(error: DurableError) -> Status {
    let message = error.to_string();
    match error {
        DurableError::UnknownOrchestration { .. } | DurableError::InstanceNotFound(_) => {
            Status::not_found(message)
        }
        DurableError::InputRefused { .. }
        | DurableError::BadInstanceId
        | DurableError::BadName
        | DurableError::ReservedEvent(_) => Status::invalid_argument(message),
        // A payload past its limit, or an inbox full: the JSON API's 413/429.
        DurableError::Limit(_) => Status::resource_exhausted(message),
        DurableError::AlreadyExists(_) => Status::already_exists(message),
        DurableError::InstanceFinished(_)
        | DurableError::InvalidState(_)
        | DurableError::InstanceRunning(_)
        | DurableError::TooManyDescendants(..) => Status::failed_precondition(message),
        DurableError::Store(e) => {
            tracing::error!(error = %e, "a Durable Task call failed on the store");
            Status::unavailable(format!("the store failed: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workers_failure_details_come_back_as_it_sent_them_with_a_bounded_chain_of_causes() {
        let leaf = TaskFailureDetails {
            error_type: "builtins.OSError".into(),
            error_message: "kettle".into(),
            ..TaskFailureDetails::default()
        };
        let sent = TaskFailureDetails {
            error_type: "builtins.ValueError".into(),
            error_message: "no tea today".into(),
            stack_trace: Some("Traceback …".into()),
            inner_failure: Some(Box::new(leaf)),
            is_non_retriable: true,
            ..TaskFailureDetails::default()
        };
        assert_eq!(details_of(&failure_of(sent.clone())), sent);
        let mut deep = TaskFailureDetails::default();
        for i in 0..50 {
            deep = TaskFailureDetails {
                error_message: format!("{i}"),
                inner_failure: Some(Box::new(deep)),
                ..TaskFailureDetails::default()
            };
        }
        let mut kept = failure_of(deep);
        let mut depth = 0;
        while let Some(inner) = kept.inner {
            kept = *inner;
            depth += 1;
        }
        assert_eq!(depth, INNER_FAILURES);
        let huge = TaskFailureDetails {
            error_message: "é".repeat(FAILURE_TEXT),
            stack_trace: Some("s".repeat(4 * FAILURE_TEXT)),
            ..TaskFailureDetails::default()
        };
        let kept = failure_of(huge);
        assert!(kept.message.len() < FAILURE_TEXT + 16 && kept.message.ends_with("(cut)"));
        assert!(kept
            .stack_trace
            .is_some_and(|s| s.len() < FAILURE_TEXT + 16));
    }

    #[test]
    fn times_round_trip_to_the_millisecond_before_and_after_1970() {
        for ms in [0, 1, 999, 1_000, 1_764_000_000_123, -1, -1_001] {
            let at = timestamp(ms);
            assert!((0..1_000_000_000).contains(&at.nanos), "{ms}: {at:?}");
            assert_eq!(millis(&at), ms);
        }
    }

    #[test]
    fn every_status_maps_both_ways_and_canceled_matches_nothing() {
        for status in RuntimeStatus::ALL {
            let wire = status_of(status) as i32;
            assert_eq!(runtime_status(wire).ok().flatten(), Some(status));
        }
        let canceled = OrchestrationStatus::Canceled as i32;
        assert_eq!(statuses(&[canceled]).ok(), Some(None));
        assert_eq!(statuses(&[]).ok(), Some(Some(vec![])));
        assert!(statuses(&[99]).is_err());
    }

    #[test]
    fn grpc_timeouts_are_read_in_every_unit_and_nonsense_is_none() {
        use std::time::Duration;
        assert_eq!(timeout_of(Some("1S")), Some(Duration::from_secs(1)));
        assert_eq!(timeout_of(Some("2H")), Some(Duration::from_secs(7200)));
        assert_eq!(timeout_of(Some("3M")), Some(Duration::from_secs(180)));
        assert_eq!(timeout_of(Some("999m")), Some(Duration::from_millis(999)));
        assert_eq!(timeout_of(Some("5u")), Some(Duration::from_micros(5)));
        assert_eq!(timeout_of(Some("7n")), Some(Duration::from_nanos(7)));
        for nonsense in ["", "S", "1", "1x", "-1S", "1.5S"] {
            assert_eq!(timeout_of(Some(nonsense)), None, "{nonsense}");
        }
        assert_eq!(timeout_of(None), None);
    }

    #[test]
    fn payloads_must_be_json_and_absence_is_null() {
        assert_eq!(payload("input", None).ok().as_deref(), Some("null"));
        assert_eq!(
            payload("input", Some("{\"a\":1}".into())).ok().as_deref(),
            Some("{\"a\":1}")
        );
        let refused = payload("input", Some("not json".into())).err();
        assert!(refused.is_some_and(|s| s.message().starts_with("the input is not JSON")));
        assert_eq!(text_of("\"why\""), "why");
        assert_eq!(text_of("{\"a\":1}"), "{\"a\":1}");
    }
}
