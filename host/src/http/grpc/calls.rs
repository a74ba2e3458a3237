//! The management calls of the sidecar protocol, each one of the engine's
//! own operations (the JSON management API's, with gRPC's statuses).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::convert::{millis, payload, refusal, runtime_status};
use super::proto::task_hub_sidecar_service_server::TaskHubSidecarService;
use super::proto::{
    AbandonActivityTaskRequest, AbandonActivityTaskResponse, AbandonEntityTaskRequest,
    AbandonEntityTaskResponse, AbandonOrchestrationTaskRequest, AbandonOrchestrationTaskResponse,
    ActivityResponse, CleanEntityStorageRequest, CleanEntityStorageResponse, CompleteTaskResponse,
    CreateInstanceRequest, CreateInstanceResponse, CreateTaskHubRequest, CreateTaskHubResponse,
    DeleteTaskHubRequest, DeleteTaskHubResponse, EntityBatchResult, GetEntityRequest,
    GetEntityResponse, GetInstanceRequest, GetInstanceResponse, GetWorkItemsRequest, HistoryChunk,
    ListInstanceIdsRequest, ListInstanceIdsResponse, OrchestrationIdReusePolicy,
    OrchestratorResponse, PurgeInstancesRequest, PurgeInstancesResponse, QueryEntitiesRequest,
    QueryEntitiesResponse, QueryInstancesRequest, QueryInstancesResponse, RaiseEventRequest,
    RaiseEventResponse, RestartInstanceRequest, RestartInstanceResponse, ResumeRequest,
    ResumeResponse, RewindInstanceRequest, RewindInstanceResponse, SignalEntityRequest,
    SignalEntityResponse, SkipGracefulOrchestrationTerminationsRequest,
    SkipGracefulOrchestrationTerminationsResponse, StreamInstanceHistoryRequest, SuspendRequest,
    SuspendResponse, TerminateRequest, TerminateResponse,
};
use super::{entities, instance_history, listing, waits, work_items};
use crate::core::id_reuse::{self, Reuse};
use crate::core::instance::RuntimeStatus;
use crate::core::sdk_history;
use crate::durable::{DurableError, Operation, Orchestrator};
use crate::http::AppState;
use crate::sdk_workers::SdkWorkers;
use tonic::codegen::BoxStream;

/// Why a call of the contract is not served: each says what is instead.
const GRACEFUL_TERMINATIONS: &str =
    "graceful terminations are not served: TerminateInstance ends an instance at once";
const TASK_HUBS: &str = "task hubs are created by the host (--taskhub), not over this protocol";

pub(crate) struct Sidecar {
    orchestrator: Arc<Orchestrator>,
    workers: Arc<SdkWorkers>,
    /// Which orchestrations a component serves (their payloads are JSON).
    registry: Arc<crate::registry::Registry>,
}

impl Sidecar {
    pub(super) fn new(state: AppState) -> Self {
        Self {
            workers: state.orchestrator.sdk_workers().clone(),
            orchestrator: state.orchestrator.clone(),
            registry: state.registry.clone(),
        }
    }

    async fn manage(&self, id: &str, op: Operation) -> Result<(), Status> {
        self.orchestrator.manage(id, op).await.map_err(refusal)
    }

    /// Frees `id` for a start under the request's id-reuse policy
    /// (`replaceable`): an instance holding it with a status the policy
    /// does not list refuses the start (ALREADY_EXISTS, as the managed
    /// scheduler answers), an unfinished one it lists is terminated (the
    /// start then replaces it, as it replaces a finished one).
    async fn make_room(&self, id: &str, replaceable: &[RuntimeStatus]) -> Result<(), Status> {
        let existing = waits::instance(&self.orchestrator, id).await?;
        match id_reuse::decide(Some(replaceable), existing.map(|i| i.status)) {
            Reuse::Start => Ok(()),
            Reuse::Refuse(status) => Err(Status::already_exists(format!(
                "an orchestration instance with id '{id}' already exists ({}), and the request's \
                 id-reuse policy does not let a start replace one in that status",
                status.as_str()
            ))),
            Reuse::TerminateThenStart => {
                let reason = format!(
                    "a new instance was started with id '{id}', whose id-reuse policy lets it replace this one"
                );
                let output = serde_json::Value::String(reason).to_string();
                match self
                    .orchestrator
                    .manage(id, Operation::Terminate { output })
                    .await
                {
                    // Ended meanwhile: the start replaces it as it is.
                    Ok(()) | Err(DurableError::InstanceFinished(_)) => Ok(()),
                    Err(e) => Err(refusal(e)),
                }
            }
        }
    }

    /// Gives a started instance its tags (kept as a JSON object).
    async fn tag(&self, id: &str, tags: Option<String>) -> Result<(), Status> {
        match tags {
            Some(tags) => self.orchestrator.tag(id, &tags).await.map_err(refusal),
            None => Ok(()),
        }
    }
}

/// The statuses a start's id-reuse policy lets it replace (`None`: it gave
/// none), refused as the managed scheduler refuses them.
fn reusable_statuses(
    policy: Option<&OrchestrationIdReusePolicy>,
) -> Result<Option<Vec<RuntimeStatus>>, Status> {
    let Some(policy) = policy else {
        return Ok(None);
    };
    let mut statuses = Vec::with_capacity(policy.replaceable_status.len());
    for wire in &policy.replaceable_status {
        // Canceled, which no instance here has, replaces nothing.
        statuses.extend(runtime_status(*wire)?);
    }
    id_reuse::check(&statuses).map_err(Status::invalid_argument)?;
    Ok(Some(statuses))
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
        let runs = work_items::runs_of(request.get_ref());
        let connection = self
            .workers
            .connect(runs)
            .ok_or_else(|| Status::unavailable("the host is stopping"))?;
        // SDK instances waiting for a worker are offered again now.
        self.orchestrator.notify();
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
        request: Request<OrchestratorResponse>,
    ) -> Result<Response<CompleteTaskResponse>, Status> {
        work_items::complete_episode(&self.workers, request.into_inner());
        Ok(Response::new(CompleteTaskResponse {}))
    }

    async fn start_instance(
        &self,
        request: Request<CreateInstanceRequest>,
    ) -> Result<Response<CreateInstanceResponse>, Status> {
        let request = request.into_inner();
        let replaceable = reusable_statuses(request.orchestration_id_reuse_policy.as_ref())?;
        // A component reads its input as JSON; an SDK worker's is its own.
        let input = match self.registry.orchestration(&request.name) {
            Some(_) => payload("input", request.input)?,
            None => super::history::kept(request.input),
        };
        let id = (!request.instance_id.is_empty()).then_some(request.instance_id);
        if let Some(id) = &id {
            super::convert::scheduler_id(id)?;
        }
        if let (Some(id), Some(replaceable)) = (&id, &replaceable) {
            self.make_room(id, replaceable).await?;
        }
        let start_at = request.scheduled_start_timestamp.as_ref().map(millis);
        let version = request.version.as_deref();
        let instance_id = self
            .orchestrator
            .start_instance_or_sdk(&request.name, id, input, version, start_at)
            .await
            .map_err(refusal)?;
        self.tag(&instance_id, super::history::tags_of(&request.tags))
            .await?;
        Ok(Response::new(CreateInstanceResponse { instance_id }))
    }

    async fn get_instance(
        &self,
        request: Request<GetInstanceRequest>,
    ) -> Result<Response<GetInstanceResponse>, Status> {
        let request = request.into_inner();
        Ok(Response::new(
            match waits::instance(&self.orchestrator, &request.instance_id).await? {
                Some(instance) => {
                    waits::found(
                        &self.orchestrator,
                        &instance,
                        request.get_inputs_and_outputs,
                    )
                    .await?
                }
                None => GetInstanceResponse::default(),
            },
        ))
    }

    async fn wait_for_instance_start(
        &self,
        request: Request<GetInstanceRequest>,
    ) -> Result<Response<GetInstanceResponse>, Status> {
        waits::wait_until(&self.orchestrator, request, |s| s != RuntimeStatus::Pending).await
    }

    async fn wait_for_instance_completion(
        &self,
        request: Request<GetInstanceRequest>,
    ) -> Result<Response<GetInstanceResponse>, Status> {
        waits::wait_until(&self.orchestrator, request, RuntimeStatus::is_finished).await
    }

    async fn raise_event(
        &self,
        request: Request<RaiseEventRequest>,
    ) -> Result<Response<RaiseEventResponse>, Status> {
        let request = request.into_inner();
        // A component reads its events as JSON; an SDK instance's are its
        // own (its large-payload store's token, say).
        let data = match payload("event data", request.input.clone()) {
            Ok(data) => data,
            Err(not_json) => match waits::instance(&self.orchestrator, &request.instance_id).await?
            {
                Some(instance) if sdk_history::is_sdk(&instance.component_digest) => {
                    super::history::sent(request.input)
                }
                _ => return Err(not_json),
            },
        };
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
        // The output as the client sent it (JSON, or its large-payload
        // store's token), read back as given; without one, "terminated".
        let output = match request.output.filter(|text| !text.is_empty()) {
            Some(output) => output,
            None => serde_json::Value::String("terminated".into()).to_string(),
        };
        if request.recursive {
            // The SDKs' default: the sub-orchestrations under it stop too.
            self.orchestrator
                .terminate_tree(&request.instance_id, &output)
                .await
                .map_err(refusal)?;
        } else {
            self.manage(&request.instance_id, Operation::Terminate { output })
                .await?;
        }
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
        let Some(instance) = waits::instance(&self.orchestrator, &request.instance_id).await?
        else {
            return Err(Status::not_found(format!(
                "no instance with id '{}'",
                request.instance_id
            )));
        };
        // Under a new id the instance it copies goes on, whatever its
        // status (the managed scheduler allows it); under its own id it
        // must be over.
        if !request.restart_with_new_instance_id && !instance.status.is_finished() {
            return Err(Status::failed_precondition(format!(
                "instance '{}' has not finished: only a completed, failed or terminated instance restarts under its own id (restart it under a new id instead)",
                instance.id
            )));
        }
        let id = (!request.restart_with_new_instance_id).then(|| instance.id.clone());
        let instance_id = self
            .orchestrator
            .start_instance_or_sdk(
                &instance.name,
                id,
                instance.input,
                sdk_history::version_of(&instance.component_digest),
                None,
            )
            .await
            .map_err(refusal)?;
        self.tag(&instance_id, instance.tags).await?;
        tracing::info!(instance_id = %instance.id, new_instance_id = %instance_id, "instance restarted");
        Ok(Response::new(RestartInstanceResponse { instance_id }))
    }

    async fn query_instances(
        &self,
        request: Request<QueryInstancesRequest>,
    ) -> Result<Response<QueryInstancesResponse>, Status> {
        listing::query(&self.orchestrator, request.into_inner()).await
    }

    async fn purge_instances(
        &self,
        request: Request<PurgeInstancesRequest>,
    ) -> Result<Response<PurgeInstancesResponse>, Status> {
        listing::purge(&self.orchestrator, request.into_inner()).await
    }

    async fn complete_entity_task(
        &self,
        request: Request<EntityBatchResult>,
    ) -> Result<Response<CompleteTaskResponse>, Status> {
        work_items::complete_entities(&self.workers, request.into_inner());
        Ok(Response::new(CompleteTaskResponse {}))
    }

    async fn abandon_task_entity_work_item(
        &self,
        request: Request<AbandonEntityTaskRequest>,
    ) -> Result<Response<AbandonEntityTaskResponse>, Status> {
        work_items::abandon(&self.workers, &request.into_inner().completion_token);
        Ok(Response::new(AbandonEntityTaskResponse {}))
    }

    async fn signal_entity(
        &self,
        request: Request<SignalEntityRequest>,
    ) -> Result<Response<SignalEntityResponse>, Status> {
        entities::signal(&self.orchestrator, request.into_inner()).await
    }

    async fn get_entity(
        &self,
        request: Request<GetEntityRequest>,
    ) -> Result<Response<GetEntityResponse>, Status> {
        entities::get(&self.orchestrator, request.into_inner()).await
    }

    async fn query_entities(
        &self,
        request: Request<QueryEntitiesRequest>,
    ) -> Result<Response<QueryEntitiesResponse>, Status> {
        entities::query(&self.orchestrator, request.into_inner()).await
    }

    async fn clean_entity_storage(
        &self,
        request: Request<CleanEntityStorageRequest>,
    ) -> Result<Response<CleanEntityStorageResponse>, Status> {
        entities::clean(&self.orchestrator, request.into_inner()).await
    }

    async fn abandon_task_orchestrator_work_item(
        &self,
        request: Request<AbandonOrchestrationTaskRequest>,
    ) -> Result<Response<AbandonOrchestrationTaskResponse>, Status> {
        work_items::abandon(&self.workers, &request.into_inner().completion_token);
        Ok(Response::new(AbandonOrchestrationTaskResponse {}))
    }

    async fn skip_graceful_orchestration_terminations(
        &self,
        _: Request<SkipGracefulOrchestrationTerminationsRequest>,
    ) -> Result<Response<SkipGracefulOrchestrationTerminationsResponse>, Status> {
        Err(Status::unimplemented(GRACEFUL_TERMINATIONS))
    }

    async fn list_instance_ids(
        &self,
        request: Request<ListInstanceIdsRequest>,
    ) -> Result<Response<ListInstanceIdsResponse>, Status> {
        listing::instance_ids(&self.orchestrator, request.into_inner()).await
    }

    async fn rewind_instance(
        &self,
        request: Request<RewindInstanceRequest>,
    ) -> Result<Response<RewindInstanceResponse>, Status> {
        let request = request.into_inner();
        let reason = request.reason.filter(|r| !r.is_empty());
        let rewind = Operation::Rewind {
            reason: reason.clone(),
        };
        match self.orchestrator.manage(&request.instance_id, rewind).await {
            Ok(()) => {
                tracing::info!(instance_id = %request.instance_id, reason = reason.as_deref().unwrap_or(""), "instance rewound: what failed runs again");
                Ok(Response::new(RewindInstanceResponse {}))
            }
            Err(DurableError::InvalidState(id)) => Err(Status::failed_precondition(format!(
                "instance '{id}' cannot be rewound: only a failed instance is, and not one that \
                 failed inside a critical section (its locks were let go as it failed) or whose \
                 sub-orchestration's id now names another instance's child"
            ))),
            Err(e) => Err(refusal(e)),
        }
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
        request: Request<StreamInstanceHistoryRequest>,
    ) -> Result<Response<BoxStream<HistoryChunk>>, Status> {
        instance_history::stream(&self.orchestrator, request.into_inner()).await
    }
}
