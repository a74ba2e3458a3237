//! Starts: an orchestration by name (a component's, or a Durable Task SDK
//! worker's), an entity's operation (now or scheduled), and the version each
//! sub-orchestration a step calls starts on.

use std::collections::HashMap;
use std::sync::Arc;

use super::{DurableError, Orchestrator};
use crate::core::ids;
use crate::core::instance::NewInstance;
use crate::core::journal::{Call, Event};
use crate::core::{sdk_entities, sdk_history};
use crate::store::now_ms;
use crate::wasm::LoadedComponent;

/// What a start does with a name no component serves.
#[derive(Clone, Copy)]
enum Unserved<'a> {
    /// Refuses it: the HTTP API starts only what components serve.
    Refused,
    /// Starts an instance for a Durable Task SDK worker (the protocol takes
    /// any name), pinning the orchestration version the caller gave.
    SdkWorker { version: Option<&'a str> },
}

/// How a start is made, besides what it starts.
struct How<'a> {
    unserved: Unserved<'a>,
    /// Started for later (Unix ms).
    start_at: Option<i64>,
    /// Who owns the instance (see [`NewInstance::caller`]).
    caller: Option<String>,
}

impl Orchestrator {
    /// Starts an instance of orchestration `name` for `caller` (the invoke
    /// key that then owns it; `None`, a caller who reaches every instance);
    /// returns its id. A chosen id that another caller's instance holds is
    /// refused ([`DurableError::AlreadyExists`]), finished or not.
    pub async fn start_instance(
        self: &Arc<Self>,
        name: &str,
        instance_id: Option<String>,
        input: String,
        caller: Option<String>,
    ) -> Result<String, DurableError> {
        let how = How {
            unserved: Unserved::Refused,
            start_at: None,
            caller,
        };
        self.start_named(name, instance_id, input, how).await
    }

    /// Starts an instance as the Durable Task protocol does: a name no
    /// component serves is an orchestration a connected SDK worker runs
    /// (the instance waits for one), as any scheduler of that protocol
    /// takes any name.
    /// An SDK instance pins `version` (the protocol's orchestration
    /// version, sent to its worker); a component's instance pins the
    /// component's version instead. Given `start_at` (Unix ms), it is kept
    /// as given (as an entity's start is) and the instance stays Pending
    /// until then: one already past starts at once.
    pub async fn start_instance_or_sdk(
        self: &Arc<Self>,
        name: &str,
        instance_id: Option<String>,
        input: String,
        version: Option<&str>,
        start_at: Option<i64>,
    ) -> Result<String, DurableError> {
        // The gRPC endpoint is admin's: its starts reach every instance.
        let how = How {
            unserved: Unserved::SdkWorker { version },
            start_at,
            caller: None,
        };
        self.start_named(name, instance_id, input, how).await
    }

    async fn start_named(
        self: &Arc<Self>,
        name: &str,
        instance_id: Option<String>,
        input: String,
        how: How<'_>,
    ) -> Result<String, DurableError> {
        let How {
            unserved,
            start_at,
            caller,
        } = how;
        self.config.limits.check_payload("input", &input)?;
        let (digest, activity_set) = match self.registry.orchestration(name) {
            Some(served) => {
                if let Some(schema) = served
                    .component
                    .manifest
                    .orchestration(name)
                    .and_then(|o| o.input_schema.as_ref())
                {
                    let problems = schema.problems(&input);
                    if !problems.is_empty() {
                        return Err(DurableError::InputRefused {
                            orchestration: name.to_string(),
                            problems,
                        });
                    }
                }
                (
                    served.component.digest.clone(),
                    self.registry.current_activity_set(&served.component.name),
                )
            }
            None => match unserved {
                Unserved::SdkWorker { .. } if !ids::valid_name(name) => {
                    return Err(DurableError::BadName)
                }
                Unserved::SdkWorker { version } => (sdk_history::digest_of(version), None),
                Unserved::Refused => {
                    return Err(DurableError::UnknownOrchestration {
                        name: name.to_string(),
                        registered: self.registry.orchestration_names(),
                    })
                }
            },
        };
        let id = instance_id.unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string());
        // An entity's id starts no orchestration: the entity's operations
        // would go to it, and be lost.
        if !ids::valid_instance_id(&id) || sdk_entities::parse_entity_id(&id).is_some() {
            return Err(DurableError::BadInstanceId);
        }
        let new = NewInstance {
            id: id.clone(),
            name: name.to_string(),
            input,
            digest,
            activity_set,
            parent: None,
            traceparent: crate::telemetry::current_traceparent(),
            start_at,
            caller,
        };
        // Rows committed for it before it is seeded join its image.
        let _expecting = self.hot.expecting(&id);
        let applied = self
            .store
            .start(new)
            .await?
            .ok_or_else(|| DurableError::AlreadyExists(id.clone()))?;
        tracing::info!(instance_id = %id, orchestration = %name, "instance started");
        crate::metrics::orchestration(name, "started");
        self.dispatch(applied);
        Ok(id)
    }

    /// Gives instance `id` the tags its Durable Task client started it with
    /// (a JSON object of strings; the payload limit holds for it), written
    /// once the start has committed: a reader that the start answered
    /// sees them.
    pub async fn tag(&self, id: &str, tags: &str) -> Result<(), DurableError> {
        self.config.limits.check_payload("tags", tags)?;
        match self.store.set_tags(id, tags).await? {
            true => Ok(()),
            false => Err(DurableError::InstanceNotFound(id.to_string())),
        }
    }

    /// Queues `operation` on durable entity `entity` (`@name@key`), which
    /// its first operation creates; at `due_at` (ms) when it is scheduled
    /// for later.
    pub async fn signal_entity(
        self: &Arc<Self>,
        entity: &str,
        operation: &str,
        input: Option<String>,
        request_id: &str,
        due_at: Option<i64>,
    ) -> Result<(), DurableError> {
        let new = sdk_entities::new_instance(entity)
            .filter(|_| ids::valid_instance_id(entity))
            .ok_or(DurableError::BadInstanceId)?;
        if let Some(input) = &input {
            self.config
                .limits
                .check_payload("entity operation input", input)?;
        }
        let queued = sdk_entities::operation_event(&sdk_entities::Operation {
            request_id: request_id.to_string(),
            operation: operation.to_string(),
            input,
            caller: None,
        });
        self.queue_at_entity(new, queued, due_at).await
    }

    /// Queues `event` in the inbox of entity `new`, created if it has no
    /// instance; at `due_at` (ms) when later than now. An entity that
    /// removed itself (no state, nothing queued) between its creation here
    /// and the queueing is created again.
    pub(crate) async fn queue_at_entity(
        self: &Arc<Self>,
        new: NewInstance,
        event: Event,
        due_at: Option<i64>,
    ) -> Result<(), DurableError> {
        let Event::EventRaised { name, payload } = event else {
            return Err(DurableError::InvalidState(new.id));
        };
        let entity = new.id.clone();
        let mut tries = 0;
        loop {
            if let Some(applied) = self.store.start(new.clone()).await? {
                self.dispatch(applied);
            }
            let queued = match due_at.filter(|at| *at > now_ms()) {
                None => self.raise_unchecked(&entity, &name, &payload).await,
                // Not to the entity's episode in hand: stored, unseen until
                // its time.
                Some(at) => {
                    let limits = self.config.limits.clone();
                    let (change, applied) = self
                        .store
                        .raise_at(&entity, &name, &payload, Some(at), limits)
                        .await?;
                    self.dispatch(applied);
                    DurableError::refused(change?, &entity, false)
                }
            };
            tries += 1;
            match queued {
                Err(DurableError::InstanceNotFound(_)) if tries < 3 => continue,
                queued => return queued,
            }
        }
    }

    /// The version each sub-orchestration in `calls` starts on: the parent's
    /// own version when it holds the orchestration (a family of orchestrations
    /// shipped together stays together), else the one served now. A name
    /// served by nobody gets no entry; the child then fails with that reason.
    pub(super) fn child_digests(
        &self,
        parent: Option<&LoadedComponent>,
        calls: &[Call],
    ) -> HashMap<String, String> {
        let mut digests = HashMap::new();
        for call in calls {
            let Call::CallOrchestration { name, .. } = call else {
                continue;
            };
            if parent.is_some_and(|p| p.manifest.orchestration(name).is_some()) {
                continue;
            }
            if let Some(served) = self.registry.orchestration(name) {
                digests.insert(name.clone(), served.component.digest.clone());
            } else if parent.is_some() && self.sdk_served() {
                // A name no component serves is an SDK worker's, when
                // workers may connect.
                digests.insert(name.clone(), sdk_history::DIGEST.to_string());
            }
        }
        digests
    }

    /// Whether Durable Task SDK workers may connect (the gRPC endpoint is
    /// served on this working host).
    fn sdk_served(&self) -> bool {
        !self.config.sdk_patience.for_a_worker.is_zero()
    }
}
