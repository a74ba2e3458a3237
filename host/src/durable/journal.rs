//! What an instance's journal holds: the calls its code made, in order, and the
//! things that happened to it (completions, timers, events), in arrival order.

use serde::{Deserialize, Serialize};

/// How a failed agent call or activity is retried.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub first_delay_ms: u64,
    pub backoff_coefficient: f64,
    pub max_delay_ms: u64,
}

impl RetryPolicy {
    /// The pause before attempt `attempt + 1` (attempts count from 0), or
    /// `None` when no attempt is left.
    pub fn delay_after(&self, attempt: u32) -> Option<u64> {
        if attempt + 1 >= self.max_attempts {
            return None;
        }
        let factor = self
            .backoff_coefficient
            .max(1.0)
            .powi(i32::try_from(attempt).unwrap_or(i32::MAX));
        let delay = (self.first_delay_ms as f64 * factor).min(self.max_delay_ms as f64);
        Some(if delay.is_finite() {
            delay as u64
        } else {
            self.max_delay_ms
        })
    }
}

/// One call of orchestration code into the host, as journaled. Scheduling
/// calls must replay with the same arguments; value calls (`now`, GUIDs,
/// sessions) replay the value recorded the first time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "call", rename_all = "snake_case")]
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
    CallOrchestration {
        name: String,
        input: String,
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
                | Call::CallOrchestration { .. }
                | Call::StartTimer { .. }
                | Call::WaitForEvent { .. }
        )
    }

    /// A short human description for errors, e.g. `call-agent(writer)`.
    pub fn describe(&self) -> String {
        match self {
            Call::CallAgent { agent, .. } => format!("call-agent({agent})"),
            Call::CallActivity { name, .. } => format!("call-activity({name})"),
            Call::CallOrchestration { name, .. } => format!("call-orchestration({name})"),
            Call::StartTimer { fire_at } => format!("start-timer({fire_at})"),
            Call::WaitForEvent { name } => format!("wait-for-event({name})"),
            Call::Now { .. } => "now()".into(),
            Call::NewGuid { .. } => "new-guid()".into(),
            Call::NewSession { agent, .. } => format!("new-session({agent})"),
            Call::SetCustomStatus { .. } => "set-custom-status()".into(),
            Call::ContinueAsNew { .. } => "continue-as-new()".into(),
        }
    }
}

/// Something that happened to an instance, delivered through its inbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    TaskCompleted { task: u32, result: String },
    TaskFailed { task: u32, error: String },
    TimerFired { task: u32 },
    EventRaised { name: String, payload: String },
}

/// One row of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "body", rename_all = "snake_case")]
pub enum Entry {
    Call(Call),
    Event(Event),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delays_grow_and_stop_at_max_attempts() {
        let policy = RetryPolicy {
            max_attempts: 4,
            first_delay_ms: 100,
            backoff_coefficient: 2.0,
            max_delay_ms: 300,
        };
        assert_eq!(policy.delay_after(0), Some(100));
        assert_eq!(policy.delay_after(1), Some(200));
        assert_eq!(policy.delay_after(2), Some(300));
        assert_eq!(policy.delay_after(3), None);
    }

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
