//! What an instance's journal holds: the calls its code made, in order, and the
//! things that happened to it (completions, timers, events), in arrival order.

use serde::{Deserialize, Serialize};

pub use super::failure::FailureDetails;
pub use super::retry::RetryPolicy;

/// One call of orchestration code into the host, as journaled. Scheduling
/// calls must replay with the same arguments; value calls (`now`, GUIDs,
/// sessions) replay the value recorded the first time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
// The names are the journal's stored tags (`call_agent`, …): renaming them
// would orphan every journal already written.
#[allow(clippy::enum_variant_names)]
pub enum Call {
    CallAgent {
        agent: String,
        message: String,
        session: Option<String>,
        response_schema: Option<String>,
        retry: Option<RetryPolicy>,
    },
    CallActivity {
        name: String,
        input: String,
        retry: Option<RetryPolicy>,
    },
    /// An agent of another host, over A2A.
    CallRemoteAgent {
        card_url: String,
        message: String,
        context_id: Option<String>,
        retry: Option<RetryPolicy>,
    },
    CallOrchestration {
        name: String,
        input: String,
        /// The child's id when its caller chose it (a Durable Task SDK
        /// worker does); else the engine's, `{parent}:{execution}:{task}`.
        /// Absent from journals written before it was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
    },
    StartTimer {
        fire_at: u64,
    },
    WaitForEvent {
        name: String,
    },
    Now {
        value: u64,
    },
    NewGuid {
        value: String,
    },
    NewSession {
        agent: String,
        value: String,
    },
    SetCustomStatus {
        status: String,
    },
    ContinueAsNew {
        input: String,
    },
    /// An operation on a durable entity whose result the orchestration
    /// awaits (see [`super::sdk_entities`]).
    CallEntity(EntityCall),
    /// An operation on a durable entity, not awaited.
    SignalEntity(EntityCall),
    /// A critical section begun: locks on every entity of the set, taken
    /// in its order (see [`super::entity_locks`]); the task completes once
    /// the last is held.
    LockEntities {
        section: String,
        /// `@name@key` ids, sorted, without duplicates (the SDKs send them so).
        entities: Vec<String>,
    },
    /// One entity of a critical section released.
    UnlockEntity {
        section: String,
        entity: String,
    },
    /// An event sent to another orchestration instance (an SDK worker's
    /// `send_event`): raised at its current execution when the write that
    /// journals this call commits; dropped when it has no instance or the
    /// instance is over, as the managed scheduler discards it.
    SendEvent {
        instance: String,
        name: String,
        /// The event's payload as the worker sent it (`null` for none).
        input: String,
    },
    /// The start of an episode of an orchestration a Durable Task SDK
    /// worker runs (see [`super::sdk_history`]): the ids the worker gave
    /// the scheduling calls journaled after it, in order.
    SdkEpisode {
        ids: Vec<i32>,
        /// The worker's own account of the orchestration's failure, when
        /// the episode ended it so (its type and message apart, its stack,
        /// its cause): the SDKs read it back as the instance's failure
        /// details.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failure: Option<Box<FailureDetails>>,
    },
}

impl Call {
    /// True when a replayed call matches the journaled one: same kind and, for
    /// scheduling calls, the same arguments. Recorded values are not compared.
    pub fn matches(&self, journaled: &Call) -> bool {
        match (self, journaled) {
            (Call::Now { .. }, Call::Now { .. })
            | (Call::NewGuid { .. }, Call::NewGuid { .. })
            | (Call::SetCustomStatus { .. }, Call::SetCustomStatus { .. })
            | (Call::ContinueAsNew { .. }, Call::ContinueAsNew { .. }) => true,
            (Call::NewSession { agent: a, .. }, Call::NewSession { agent: b, .. }) => a == b,
            (a, b) => a == b,
        }
    }

    /// Whether the call returns a task.
    pub fn is_task(&self) -> bool {
        matches!(
            self,
            Call::CallAgent { .. }
                | Call::CallActivity { .. }
                | Call::CallRemoteAgent { .. }
                | Call::CallOrchestration { .. }
                | Call::StartTimer { .. }
                | Call::WaitForEvent { .. }
                | Call::CallEntity { .. }
                | Call::LockEntities { .. }
        )
    }

    /// A short human description for errors, e.g. `call-agent(writer)`.
    pub fn describe(&self) -> String {
        match self {
            Call::CallAgent { agent, .. } => format!("call-agent({agent})"),
            Call::CallActivity { name, .. } => format!("call-activity({name})"),
            Call::CallRemoteAgent { card_url, .. } => format!("call-remote-agent({card_url})"),
            Call::CallOrchestration { name, .. } => format!("call-orchestration({name})"),
            Call::StartTimer { fire_at } => format!("start-timer({fire_at})"),
            Call::WaitForEvent { name } => format!("wait-for-event({name})"),
            Call::Now { .. } => "now()".into(),
            Call::NewGuid { .. } => "new-guid()".into(),
            Call::NewSession { agent, .. } => format!("new-session({agent})"),
            Call::SetCustomStatus { .. } => "set-custom-status()".into(),
            Call::ContinueAsNew { .. } => "continue-as-new()".into(),
            Call::SdkEpisode { .. } => "sdk-episode()".into(),
            Call::CallEntity(m) => format!("call-entity({}, {})", m.entity, m.operation),
            Call::SignalEntity(m) => format!("signal-entity({}, {})", m.entity, m.operation),
            Call::LockEntities { entities, .. } => {
                format!("lock-entities({})", entities.join(", "))
            }
            Call::UnlockEntity { entity, .. } => format!("unlock-entity({entity})"),
            Call::SendEvent { instance, name, .. } => format!("send-event({instance}, {name})"),
        }
    }
}

/// An operation an orchestration sends a durable entity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EntityCall {
    /// `@name@key`.
    pub entity: String,
    pub operation: String,
    /// JSON text; `None` for no input.
    pub input: Option<String>,
    pub request_id: String,
    /// A signal scheduled for later: when (ms since the epoch) the
    /// operation is queued at the entity. `None`: at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_at: Option<i64>,
}

impl EntityCall {
    fn payload_len(&self) -> usize {
        self.entity.len()
            + self.operation.len()
            + self.input.as_ref().map_or(0, String::len)
            + self.request_id.len()
    }
}

/// Something that happened to an instance, delivered through its inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
// `event_raised` is a stored tag, like `Call`'s.
#[allow(clippy::enum_variant_names)]
pub enum Event {
    TaskCompleted {
        task: u32,
        result: String,
    },
    TaskFailed {
        task: u32,
        error: String,
        /// An SDK worker's own account of the failure (absent from entries
        /// written before it was kept, and for every other failure).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        details: Option<Box<FailureDetails>>,
    },
    TimerFired {
        task: u32,
    },
    EventRaised {
        name: String,
        payload: String,
    },
}

/// One row of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "body", rename_all = "snake_case")]
pub enum Entry {
    Call(Call),
    Event(Event),
}

impl Event {
    /// Bytes of the payload the event carries: what counts against the
    /// history and inbox limits.
    pub fn payload_len(&self) -> usize {
        match self {
            Event::TaskCompleted { result, .. } => result.len(),
            Event::TaskFailed { error, details, .. } => {
                error.len() + details.as_ref().map_or(0, |d| d.len())
            }
            Event::TimerFired { .. } => 0,
            Event::EventRaised { name, payload } => name.len() + payload.len(),
        }
    }
}

impl Call {
    /// Bytes of the arguments the call carries.
    pub fn payload_len(&self) -> usize {
        match self {
            Call::CallAgent {
                agent,
                message,
                session,
                response_schema,
                ..
            } => {
                agent.len()
                    + message.len()
                    + session.as_ref().map_or(0, String::len)
                    + response_schema.as_ref().map_or(0, String::len)
            }
            Call::CallActivity { name, input, .. } => name.len() + input.len(),
            Call::CallRemoteAgent {
                card_url,
                message,
                context_id,
                ..
            } => card_url.len() + message.len() + context_id.as_ref().map_or(0, String::len),
            Call::CallOrchestration { name, input, id } => {
                name.len() + input.len() + id.as_ref().map_or(0, String::len)
            }
            Call::WaitForEvent { name } => name.len(),
            Call::NewGuid { value } | Call::NewSession { value, .. } => value.len(),
            Call::SetCustomStatus { status } => status.len(),
            Call::ContinueAsNew { input } => input.len(),
            Call::SdkEpisode { ids, failure } => {
                ids.len() * 4 + failure.as_ref().map_or(0, |f| f.len())
            }
            Call::CallEntity(m) | Call::SignalEntity(m) => m.payload_len(),
            Call::LockEntities { section, entities } => {
                section.len() + entities.iter().map(String::len).sum::<usize>()
            }
            Call::UnlockEntity { section, entity } => section.len() + entity.len(),
            Call::SendEvent {
                instance,
                name,
                input,
            } => instance.len() + name.len() + input.len(),
            Call::StartTimer { .. } | Call::Now { .. } => 0,
        }
    }
}

impl Entry {
    /// Bytes this entry adds to its instance's history (payload plus a fixed
    /// overhead for the row itself).
    pub fn size(&self) -> u64 {
        const ROW_OVERHEAD: usize = 64;
        let payload = match self {
            Entry::Call(c) => c.payload_len(),
            Entry::Event(e) => e.payload_len(),
        };
        (payload + ROW_OVERHEAD) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_calls_match_whatever_value_was_recorded() {
        assert!(Call::Now { value: 1 }.matches(&Call::Now { value: 2 }));
        let a = Call::CallActivity {
            name: "a".into(),
            input: "1".into(),
            retry: None,
        };
        let b = Call::CallActivity {
            name: "a".into(),
            input: "2".into(),
            retry: None,
        };
        assert!(!a.matches(&b), "scheduling calls compare their arguments");
    }
}
