//! Reading one instance for the protocol's calls, and waiting for it to
//! start or end (`WaitForInstanceStart`, `WaitForInstanceCompletion`).

use std::time::Duration;

use tonic::{Request, Response, Status};

use super::convert::{refusal, state_of, timeout_of};
use super::proto::{GetInstanceRequest, GetInstanceResponse};
use crate::core::instance::RuntimeStatus;
use crate::durable::{DurableError, InstanceRecord, Orchestrator};

/// How often a waiting call looks at the instance again: soon at first
/// (most waits are short), then no more than five times a second.
const FIRST_LOOK: Duration = Duration::from_millis(5);
const LAST_LOOK: Duration = Duration::from_millis(200);

/// How long before the caller's deadline a wait answers (half of it for
/// deadlines shorter than twice this).
const AHEAD_OF_DEADLINE: Duration = Duration::from_millis(250);

/// The longest a wait lasts when the caller gives no deadline.
const LONGEST_WAIT: Duration = Duration::from_secs(600);

/// The instance, `None` when there is none of that id.
pub(super) async fn instance(
    orchestrator: &Orchestrator,
    id: &str,
) -> Result<Option<InstanceRecord>, Status> {
    match orchestrator.status(id, false).await {
        Ok(view) => Ok(Some(view.instance)),
        Err(DurableError::InstanceNotFound(_)) => Ok(None),
        Err(e) => Err(refusal(e)),
    }
}

/// Answers once `done` holds for the instance (or it does not exist),
/// looking again with a growing pause. Just before the caller's
/// deadline it answers DEADLINE_EXCEEDED itself, which the SDKs turn into
/// their timeout error: tonic's own expiry would answer CANCELLED, and a
/// caller whose clock runs late would see that instead.
pub(super) async fn wait_until(
    orchestrator: &Orchestrator,
    request: Request<GetInstanceRequest>,
    done: impl Fn(RuntimeStatus) -> bool,
) -> Result<Response<GetInstanceResponse>, Status> {
    let timeout = timeout_of(
        request
            .metadata()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok()),
    );
    let request = request.into_inner();
    let answer = look_until(orchestrator, &request, done);
    let ours = match timeout {
        None => LONGEST_WAIT,
        Some(timeout) => timeout.saturating_sub(AHEAD_OF_DEADLINE.min(timeout / 2)),
    };
    tokio::time::timeout(ours, answer)
        .await
        .unwrap_or_else(|_| {
            Err(Status::deadline_exceeded(format!(
            "instance '{}' did not get there within the call's deadline (at most {} s without one)",
            request.instance_id,
            LONGEST_WAIT.as_secs()
        )))
        })
}

async fn look_until(
    orchestrator: &Orchestrator,
    request: &GetInstanceRequest,
    done: impl Fn(RuntimeStatus) -> bool,
) -> Result<Response<GetInstanceResponse>, Status> {
    let mut pause = FIRST_LOOK;
    loop {
        match instance(orchestrator, &request.instance_id).await? {
            None => return Ok(Response::new(GetInstanceResponse::default())),
            Some(instance) if done(instance.status) => {
                return Ok(Response::new(
                    found(orchestrator, &instance, request.get_inputs_and_outputs).await?,
                ))
            }
            Some(_) => {}
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LAST_LOOK);
    }
}

pub(super) async fn found(
    orchestrator: &Orchestrator,
    instance: &InstanceRecord,
    payloads: bool,
) -> Result<GetInstanceResponse, Status> {
    let reported = orchestrator
        .reported_failure(instance)
        .await
        .map_err(refusal)?;
    Ok(GetInstanceResponse {
        exists: true,
        orchestration_state: Some(state_of(instance, payloads, reported.as_ref())),
    })
}
