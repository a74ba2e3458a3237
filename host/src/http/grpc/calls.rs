//! The management calls of the sidecar protocol, each one of the engine's
//! own operations (the JSON management API's, with gRPC's statuses).

use std::sync::Arc;
use std::time::Duration;

use tonic::{Request, Response, Status};

use super::convert::{millis, payload, refusal, state_of, statuses, text_of, timeout_of};
use super::proto::purge_instances_request::Request as PurgeTarget;
use super::proto::task_hub_sidecar_service_server::TaskHubSidecarService;
use super::proto::{
    AbandonActivityTaskRequest, AbandonActivityTaskResponse, AbandonEntityTaskRequest,
    AbandonEntityTaskResponse, AbandonOrchestrationTaskRequest, AbandonOrchestrationTaskResponse,
    ActivityResponse, CleanEntityStorageRequest, CleanEntityStorageResponse, CompleteTaskResponse,
    CreateInstanceRequest, CreateInstanceResponse, CreateTaskHubRequest, CreateTaskHubResponse,
    DeleteTaskHubRequest, DeleteTaskHubResponse, EntityBatchResult, GetEntityRequest,
    GetEntityResponse, GetInstanceRequest, GetInstanceResponse, GetWorkItemsRequest, HistoryChunk,
    ListInstanceIdsRequest, ListInstanceIdsResponse, OrchestratorResponse, PurgeInstancesRequest,
    PurgeInstancesResponse, QueryEntitiesRequest, QueryEntitiesResponse, QueryInstancesRequest,
    QueryInstancesResponse, RaiseEventRequest, RaiseEventResponse, RestartInstanceRequest,
    RestartInstanceResponse, ResumeRequest, ResumeResponse, RewindInstanceRequest,
    RewindInstanceResponse, SignalEntityRequest, SignalEntityResponse,
    SkipGracefulOrchestrationTerminationsRequest, SkipGracefulOrchestrationTerminationsResponse,
    StreamInstanceHistoryRequest, SuspendRequest, SuspendResponse, TerminateRequest,
    TerminateResponse,
};
use super::work_items;
use crate::core::instance::RuntimeStatus;
use crate::durable::{DurableError, InstanceFilter, InstanceRecord, Operation, Orchestrator};
use crate::http::AppState;
use crate::sdk_workers::SdkWorkers;
use tonic::codegen::BoxStream;

/// Most instances one `QueryInstances` page holds (the SDKs ask for
/// 2^31 − 1 and follow the continuation token).
const PAGE: usize = 1000;

/// How often a waiting call looks at the instance again: soon at first
/// (most waits are short), then no more than five times a second.
const FIRST_LOOK: Duration = Duration::from_millis(5);
const LAST_LOOK: Duration = Duration::from_millis(200);

/// How long before the caller's deadline a wait answers (half of it for
/// deadlines shorter than twice this).
const AHEAD_OF_DEADLINE: Duration = Duration::from_millis(250);

/// The longest a wait lasts when the caller gives no deadline.
const LONGEST_WAIT: Duration = Duration::from_secs(600);

/// Encoded bytes one `QueryInstances` page stops at (with its token): the
/// SDKs' gRPC clients take at most 4 MiB a message.
const PAGE_BYTES: usize = 3 << 20;

/// Most ids one purge by batch takes (the contract's own bound).
const BATCH: usize = 500;

/// Why a call of the contract is not served: each says what is instead.
const ENTITIES: &str =
    "entities are not served here yet: keep state in an orchestration (or an agent's session)";
const SDK_ORCHESTRATIONS: &str = "orchestrations written with a Durable Task SDK are not run here yet: SDK workers serve activities";
const LIST_IDS: &str = "ListInstanceIds is not served: QueryInstances (get_all_orchestration_states) lists instances with filters and pages";
const REWIND: &str = "rewind is not served: restart the failed instance (RestartInstance) instead";
const TASK_HUBS: &str = "task hubs are created by the host (--taskhub), not over this protocol";
const HISTORY: &str = "the history of this host's instances is its journal: GET /runtime/webhooks/durabletask/instances/{id}?showHistory=true";

pub(crate) struct Sidecar {
    orchestrator: Arc<Orchestrator>,
    workers: Arc<SdkWorkers>,
}

impl Sidecar {
    pub(super) fn new(state: AppState) -> Self {
        Self {
            workers: state.orchestrator.sdk_workers().clone(),
            orchestrator: state.orchestrator,
        }
    }

    /// The instance, `None` when there is none of that id.
    async fn instance(&self, id: &str) -> Result<Option<InstanceRecord>, Status> {
        match self.orchestrator.status(id, false).await {
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
    async fn wait_until(
        &self,
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
        let answer = self.look_until(&request, done);
        let ours = match timeout {
            None => LONGEST_WAIT,
            Some(timeout) => timeout.saturating_sub(AHEAD_OF_DEADLINE.min(timeout / 2)),
        };
        tokio::time::timeout(ours, answer).await.unwrap_or_else(|_| {
            Err(Status::deadline_exceeded(format!(
                "instance '{}' did not get there within the call's deadline (at most {} s without one)",
                request.instance_id,
                LONGEST_WAIT.as_secs()
            )))
        })
    }

    async fn look_until(
        &self,
        request: &GetInstanceRequest,
        done: impl Fn(RuntimeStatus) -> bool,
    ) -> Result<Response<GetInstanceResponse>, Status> {
        let mut pause = FIRST_LOOK;
        loop {
            match self.instance(&request.instance_id).await? {
                None => return Ok(Response::new(GetInstanceResponse::default())),
                Some(instance) if done(instance.status) => {
                    return Ok(Response::new(found(
                        &instance,
                        request.get_inputs_and_outputs,
                    )))
                }
                Some(_) => {}
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LAST_LOOK);
        }
    }

    async fn manage(&self, id: &str, op: Operation) -> Result<(), Status> {
        self.orchestrator.manage(id, op).await.map_err(refusal)
    }
}

fn found(instance: &InstanceRecord, payloads: bool) -> GetInstanceResponse {
    GetInstanceResponse {
        exists: true,
        orchestration_state: Some(state_of(instance, payloads)),
    }
}

/// The created-time bounds of a query or purge, as the engine's filter.
fn created_filter(
    from: Option<&prost_types::Timestamp>,
    to: Option<&prost_types::Timestamp>,
    statuses: Vec<RuntimeStatus>,
) -> InstanceFilter {
    InstanceFilter {
        statuses,
        created_from: from.map(millis),
        created_to: to.map(millis),
        ..InstanceFilter::default()
    }
}

#[tonic::async_trait]
impl TaskHubSidecarService for Sidecar {
    async fn hello(&self, _: Request<()>) -> Result<Response<()>, Status> {
        Ok(Response::new(()))
    }

    async fn get_work_items(
        &self,
        request: Request<GetWorkItemsRequest>,
    ) -> Result<Response<work_items::WorkItems>, Status> {
        if !self.orchestrator.works() {
            return Err(Status::failed_precondition(
                "this host runs no work (--no-worker): connect SDK workers to a host that does",
            ));
        }
        let activities = work_items::activities_of(request.get_ref());
        let connection = self
            .workers
            .connect(activities)
            .ok_or_else(|| Status::unavailable("the host is stopping"))?;
        Ok(Response::new(work_items::stream(connection)))
    }

    async fn complete_activity_task(
        &self,
        request: Request<ActivityResponse>,
    ) -> Result<Response<CompleteTaskResponse>, Status> {
        work_items::complete(&self.workers, request.into_inner());
        Ok(Response::new(CompleteTaskResponse {}))
    }

    async fn abandon_task_activity_work_item(
        &self,
        request: Request<AbandonActivityTaskRequest>,
    ) -> Result<Response<AbandonActivityTaskResponse>, Status> {
        work_items::abandon(&self.workers, &request.into_inner().completion_token);
        Ok(Response::new(AbandonActivityTaskResponse {}))
    }

    async fn complete_orchestrator_task(
        &self,
        _: Request<OrchestratorResponse>,
    ) -> Result<Response<CompleteTaskResponse>, Status> {
        Err(Status::unimplemented(SDK_ORCHESTRATIONS))
    }

    async fn start_instance(
        &self,
        request: Request<CreateInstanceRequest>,
    ) -> Result<Response<CreateInstanceResponse>, Status> {
        let request = request.into_inner();
        if request.scheduled_start_timestamp.is_some() {
            return Err(Status::unimplemented(
                "scheduled starts (start_at) are not served: start the instance when it is due, or wait inside the orchestration with a timer",
            ));
        }
        let input = payload("input", request.input)?;
        let id = (!request.instance_id.is_empty()).then_some(request.instance_id);
        let instance_id = self
            .orchestrator
            .start_instance(&request.name, id, input)
            .await
            .map_err(refusal)?;
        Ok(Response::new(CreateInstanceResponse { instance_id }))
    }

    async fn get_instance(
        &self,
        request: Request<GetInstanceRequest>,
    ) -> Result<Response<GetInstanceResponse>, Status> {
        let request = request.into_inner();
        Ok(Response::new(
            match self.instance(&request.instance_id).await? {
                Some(instance) => found(&instance, request.get_inputs_and_outputs),
                None => GetInstanceResponse::default(),
            },
        ))
    }

    async fn wait_for_instance_start(
        &self,
        request: Request<GetInstanceRequest>,
    ) -> Result<Response<GetInstanceResponse>, Status> {
        self.wait_until(request, |s| s != RuntimeStatus::Pending)
            .await
    }

    async fn wait_for_instance_completion(
        &self,
        request: Request<GetInstanceRequest>,
    ) -> Result<Response<GetInstanceResponse>, Status> {
        self.wait_until(request, RuntimeStatus::is_finished).await
    }

    async fn raise_event(
        &self,
        request: Request<RaiseEventRequest>,
    ) -> Result<Response<RaiseEventResponse>, Status> {
        let request = request.into_inner();
        let data = payload("event data", request.input)?;
        self.orchestrator
            .raise_event(&request.instance_id, &request.name, &data)
            .await
            .map_err(refusal)?;
        Ok(Response::new(RaiseEventResponse {}))
    }

    async fn terminate_instance(
        &self,
        request: Request<TerminateRequest>,
    ) -> Result<Response<TerminateResponse>, Status> {
        let request = request.into_inner();
        // The output is JSON: a JSON string is the reason the instance keeps
        // (as its output, a JSON string again); anything else, as written.
        let reason = request
            .output
            .as_deref()
            .map_or_else(|| "terminated".to_string(), text_of);
        self.manage(&request.instance_id, Operation::Terminate { reason })
            .await?;
        Ok(Response::new(TerminateResponse {}))
    }

    async fn suspend_instance(
        &self,
        request: Request<SuspendRequest>,
    ) -> Result<Response<SuspendResponse>, Status> {
        self.manage(&request.into_inner().instance_id, Operation::Suspend)
            .await?;
        Ok(Response::new(SuspendResponse {}))
    }

    async fn resume_instance(
        &self,
        request: Request<ResumeRequest>,
    ) -> Result<Response<ResumeResponse>, Status> {
        self.manage(&request.into_inner().instance_id, Operation::Resume)
            .await?;
        Ok(Response::new(ResumeResponse {}))
    }

    async fn restart_instance(
        &self,
        request: Request<RestartInstanceRequest>,
    ) -> Result<Response<RestartInstanceResponse>, Status> {
        let request = request.into_inner();
        let Some(instance) = self.instance(&request.instance_id).await? else {
            return Err(Status::not_found(format!(
                "no instance with id '{}'",
                request.instance_id
            )));
        };
        if !instance.status.is_finished() {
            return Err(Status::failed_precondition(format!(
                "instance '{}' has not finished: only a completed, failed or terminated instance restarts",
                instance.id
            )));
        }
        let id = (!request.restart_with_new_instance_id).then_some(instance.id);
        let instance_id = self
            .orchestrator
            .start_instance(&instance.name, id, instance.input)
            .await
            .map_err(refusal)?;
        Ok(Response::new(RestartInstanceResponse { instance_id }))
    }

    async fn query_instances(
        &self,
        request: Request<QueryInstancesRequest>,
    ) -> Result<Response<QueryInstancesResponse>, Status> {
        let query = request.into_inner().query.unwrap_or_default();
        let Some(statuses) = statuses(&query.runtime_status)? else {
            return Ok(Response::new(QueryInstancesResponse::default()));
        };
        let mut filter = created_filter(
            query.created_time_from.as_ref(),
            query.created_time_to.as_ref(),
            statuses,
        );
        filter.id_prefix = query.instance_id_prefix.filter(|p| !p.is_empty());
        let top = usize::try_from(query.max_instance_count)
            .ok()
            .filter(|n| *n > 0)
            .map_or(PAGE, |n| n.min(PAGE));
        let after = match query.continuation_token.as_deref() {
            None | Some("" | "0") => None,
            Some(token) => Some(
                token
                    .split_once(':')
                    .and_then(|(t, id)| Some((t.parse::<i64>().ok()?, id.to_string())))
                    .ok_or_else(|| {
                        Status::invalid_argument(
                            "the continuation token is not one this host issued",
                        )
                    })?,
            ),
        };
        let mut page = self
            .orchestrator
            .list(&filter, top + 1, after)
            .await
            .map_err(refusal)?;
        let mut more = page.len() > top;
        page.truncate(top);
        let mut states = Vec::with_capacity(page.len());
        let mut bytes = 0;
        for instance in &page {
            let state = state_of(instance, query.fetch_inputs_and_outputs);
            bytes += prost::Message::encoded_len(&state);
            if bytes > PAGE_BYTES && !states.is_empty() {
                more = true;
                break;
            }
            states.push(state);
        }
        let continuation_token = more
            .then(|| page.get(states.len().checked_sub(1)?))
            .flatten()
            .map(|last| format!("{}:{}", last.created_at, last.id));
        Ok(Response::new(QueryInstancesResponse {
            orchestration_state: states,
            continuation_token,
        }))
    }

    async fn purge_instances(
        &self,
        request: Request<PurgeInstancesRequest>,
    ) -> Result<Response<PurgeInstancesResponse>, Status> {
        let request = request.into_inner();
        let (deleted, complete) =
            match request.request {
                Some(PurgeTarget::InstanceId(id)) => (self.purge_one(&id).await?, true),
                Some(PurgeTarget::InstanceBatch(batch)) => {
                    if batch.instance_ids.len() > BATCH {
                        return Err(Status::invalid_argument(format!(
                            "a batch names at most {BATCH} instances; this one names {}",
                            batch.instance_ids.len()
                        )));
                    }
                    let mut deleted = 0;
                    for id in &batch.instance_ids {
                        deleted += self.purge_one(id).await?;
                    }
                    (deleted, true)
                }
                Some(PurgeTarget::PurgeInstanceFilter(f)) => {
                    let Some(statuses) = statuses(&f.runtime_status)? else {
                        return Ok(Response::new(PurgeInstancesResponse {
                            deleted_instance_count: 0,
                            is_complete: Some(true),
                        }));
                    };
                    let filter = created_filter(
                        f.created_time_from.as_ref(),
                        f.created_time_to.as_ref(),
                        statuses,
                    );
                    let purged = self
                        .orchestrator
                        .purge_matching(&filter)
                        .await
                        .map_err(refusal)?;
                    (purged.deleted, !purged.more)
                }
                None => return Err(Status::invalid_argument(
                    "name what to purge: an instanceId, an instanceBatch or a purgeInstanceFilter",
                )),
            };
        Ok(Response::new(PurgeInstancesResponse {
            deleted_instance_count: i32::try_from(deleted).unwrap_or(i32::MAX),
            is_complete: Some(complete),
        }))
    }

    async fn complete_entity_task(
        &self,
        _: Request<EntityBatchResult>,
    ) -> Result<Response<CompleteTaskResponse>, Status> {
        Err(Status::unimplemented(ENTITIES))
    }

    async fn abandon_task_entity_work_item(
        &self,
        _: Request<AbandonEntityTaskRequest>,
    ) -> Result<Response<AbandonEntityTaskResponse>, Status> {
        Err(Status::unimplemented(ENTITIES))
    }

    async fn signal_entity(
        &self,
        _: Request<SignalEntityRequest>,
    ) -> Result<Response<SignalEntityResponse>, Status> {
        Err(Status::unimplemented(ENTITIES))
    }

    async fn get_entity(
        &self,
        _: Request<GetEntityRequest>,
    ) -> Result<Response<GetEntityResponse>, Status> {
        Err(Status::unimplemented(ENTITIES))
    }

    async fn query_entities(
        &self,
        _: Request<QueryEntitiesRequest>,
    ) -> Result<Response<QueryEntitiesResponse>, Status> {
        Err(Status::unimplemented(ENTITIES))
    }

    async fn clean_entity_storage(
        &self,
        _: Request<CleanEntityStorageRequest>,
    ) -> Result<Response<CleanEntityStorageResponse>, Status> {
        Err(Status::unimplemented(ENTITIES))
    }

    async fn abandon_task_orchestrator_work_item(
        &self,
        _: Request<AbandonOrchestrationTaskRequest>,
    ) -> Result<Response<AbandonOrchestrationTaskResponse>, Status> {
        Err(Status::unimplemented(SDK_ORCHESTRATIONS))
    }

    async fn skip_graceful_orchestration_terminations(
        &self,
        _: Request<SkipGracefulOrchestrationTerminationsRequest>,
    ) -> Result<Response<SkipGracefulOrchestrationTerminationsResponse>, Status> {
        Err(Status::unimplemented(SDK_ORCHESTRATIONS))
    }

    async fn list_instance_ids(
        &self,
        _: Request<ListInstanceIdsRequest>,
    ) -> Result<Response<ListInstanceIdsResponse>, Status> {
        Err(Status::unimplemented(LIST_IDS))
    }

    async fn rewind_instance(
        &self,
        _: Request<RewindInstanceRequest>,
    ) -> Result<Response<RewindInstanceResponse>, Status> {
        Err(Status::unimplemented(REWIND))
    }

    async fn create_task_hub(
        &self,
        _: Request<CreateTaskHubRequest>,
    ) -> Result<Response<CreateTaskHubResponse>, Status> {
        Err(Status::unimplemented(TASK_HUBS))
    }

    async fn delete_task_hub(
        &self,
        _: Request<DeleteTaskHubRequest>,
    ) -> Result<Response<DeleteTaskHubResponse>, Status> {
        Err(Status::unimplemented(TASK_HUBS))
    }

    async fn stream_instance_history(
        &self,
        _: Request<StreamInstanceHistoryRequest>,
    ) -> Result<Response<BoxStream<HistoryChunk>>, Status> {
        Err(Status::unimplemented(HISTORY))
    }
}

impl Sidecar {
    /// Purges one finished instance: 1, or 0 when there is none of that id
    /// (as the SDKs expect of a purge); a running one is refused.
    async fn purge_one(&self, id: &str) -> Result<u64, Status> {
        match self.orchestrator.manage(id, Operation::Purge).await {
            Ok(()) => Ok(1),
            Err(DurableError::InstanceNotFound(_)) => Ok(0),
            Err(e) => Err(refusal(e)),
        }
    }
}
