//! The host side of the `durable` import: every call goes through the
//! instance's [`Replay`](crate::core::replay::Replay). A call that cannot be answered yet (an await on an
//! unfinished task) stops the guest with [`Stop::Waiting`]; the instance is
//! dropped and rebuilt by replay when its next event arrives.

use std::sync::atomic::Ordering;

use wasmtime::component::{HasSelf, Linker};

use super::GuestState;
use crate::core::journal::{Call, RetryPolicy};
use crate::core::replay::{ReplayError, TaskResult};
use crate::wasm::bindings::agenthost::host::durable::{self as wit, RetryPolicy as WitRetry};
use crate::wasm::orchestration_scope::{OrchestrationScope, Stop};

fn stop(stop: Stop) -> wasmtime::Error {
    wasmtime::Error::new(stop)
}

/// What the import needs: the orchestration the store runs, if it runs one
/// (a tool call or an activity has none, and every durable call traps).
pub(crate) struct Durable {
    pub scope: Option<OrchestrationScope>,
}

pub(super) fn link(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    wit::add_to_linker::<_, HasSelf<Durable>>(linker, |s| &mut s.durable)
}

impl Durable {
    fn scope(&mut self) -> wasmtime::Result<&mut OrchestrationScope> {
        self.scope
            .as_mut()
            .ok_or_else(|| stop(Stop::NotAnOrchestration))
    }

    /// Journals (or replays) a call and returns it as recorded and its task.
    fn record(&mut self, call: Call) -> wasmtime::Result<(Call, u32)> {
        let scope = self.scope()?;
        let recorded = scope
            .replay
            .call(call)
            .map_err(|e| stop(Stop::Replay(e.into())))?;
        scope
            .clock
            .0
            .store(scope.replay.step_time(), Ordering::Relaxed);
        Ok(recorded)
    }

    fn waited<T>(&mut self, found: Result<Option<T>, ReplayError>) -> wasmtime::Result<T> {
        match found {
            Ok(Some(value)) => Ok(value),
            Ok(None) => Err(stop(Stop::Waiting)),
            Err(e) => Err(stop(Stop::Replay(e))),
        }
    }
}

/// The guest's retry policy as the journal records it. A coefficient that
/// is not a finite number is refused here, before anything is stored: JSON
/// has no NaN or infinity, so it would be written as `null` and every later
/// read of the row (the scheduler's, for every instance) would fail on it.
/// Finite values are recorded as given, so replays of journals written
/// before this check still match; [`RetryPolicy::bounded`] clamps them
/// where they are used.
fn retry(policy: Option<WitRetry>) -> wasmtime::Result<Option<RetryPolicy>> {
    let Some(p) = policy else {
        return Ok(None);
    };
    if !p.backoff_coefficient.is_finite() {
        return Err(stop(Stop::Refused(format!(
            "a retry policy whose backoff_coefficient is {}: it must be a finite number (1 to 100 is used)",
            p.backoff_coefficient
        ))));
    }
    Ok(Some(RetryPolicy {
        max_attempts: p.max_attempts,
        first_delay_ms: p.first_delay_ms,
        backoff_coefficient: p.backoff_coefficient,
        max_delay_ms: p.max_delay_ms,
    }))
}

impl wit::Host for Durable {
    fn call_agent(
        &mut self,
        agent: String,
        message: String,
        session: Option<String>,
        response_schema: Option<String>,
        retry_policy: Option<WitRetry>,
    ) -> wasmtime::Result<u32> {
        let call = Call::CallAgent {
            agent,
            message,
            session,
            response_schema,
            retry: retry(retry_policy)?,
        };
        Ok(self.record(call)?.1)
    }

    fn call_remote_agent(
        &mut self,
        card_url: String,
        message: String,
        context_id: Option<String>,
        retry_policy: Option<WitRetry>,
    ) -> wasmtime::Result<u32> {
        let call = Call::CallRemoteAgent {
            card_url,
            message,
            context_id,
            retry: retry(retry_policy)?,
        };
        Ok(self.record(call)?.1)
    }

    fn call_activity(
        &mut self,
        name: String,
        input: String,
        retry_policy: Option<WitRetry>,
    ) -> wasmtime::Result<u32> {
        Ok(self
            .record(Call::CallActivity {
                name,
                input,
                retry: retry(retry_policy)?,
            })?
            .1)
    }

    fn call_orchestration(&mut self, name: String, input: String) -> wasmtime::Result<u32> {
        Ok(self
            .record(Call::CallOrchestration {
                name,
                input,
                id: None,
            })?
            .1)
    }

    fn start_timer(&mut self, fire_at: u64) -> wasmtime::Result<u32> {
        Ok(self.record(Call::StartTimer { fire_at })?.1)
    }

    fn wait_for_event(&mut self, name: String) -> wasmtime::Result<u32> {
        Ok(self.record(Call::WaitForEvent { name })?.1)
    }

    fn await_(&mut self, task: u32) -> wasmtime::Result<TaskResult> {
        let found = self.scope()?.replay.result(task);
        self.waited(found)
    }

    fn await_all(&mut self, tasks: Vec<u32>) -> wasmtime::Result<Vec<TaskResult>> {
        let found = self.scope()?.replay.results(&tasks);
        self.waited(found)
    }

    fn await_any(&mut self, tasks: Vec<u32>) -> wasmtime::Result<(u32, TaskResult)> {
        let found = self.scope()?.replay.first_of(&tasks);
        self.waited(found)
    }

    fn now(&mut self) -> wasmtime::Result<u64> {
        let now = u64::try_from(self.scope()?.replay.step_time()).unwrap_or(0);
        match self.record(Call::Now { value: now })?.0 {
            Call::Now { value } => Ok(value),
            _ => Ok(now),
        }
    }

    fn new_guid(&mut self) -> wasmtime::Result<String> {
        let fresh = uuid::Uuid::new_v4().to_string();
        match self
            .record(Call::NewGuid {
                value: fresh.clone(),
            })?
            .0
        {
            Call::NewGuid { value } => Ok(value),
            _ => Ok(fresh),
        }
    }

    fn new_session(&mut self, agent: String) -> wasmtime::Result<String> {
        let fresh = uuid::Uuid::new_v4().simple().to_string();
        match self
            .record(Call::NewSession {
                agent,
                value: fresh.clone(),
            })?
            .0
        {
            Call::NewSession { value, .. } => Ok(value),
            _ => Ok(fresh),
        }
    }

    fn instance_id(&mut self) -> wasmtime::Result<String> {
        Ok(self.scope()?.instance_id.clone())
    }

    fn is_replaying(&mut self) -> wasmtime::Result<bool> {
        Ok(self.scope()?.replay.is_replaying())
    }

    fn set_custom_status(&mut self, status: String) -> wasmtime::Result<()> {
        self.record(Call::SetCustomStatus { status })?;
        Ok(())
    }

    fn continue_as_new(&mut self, input: String) -> wasmtime::Result<()> {
        self.record(Call::ContinueAsNew { input })?;
        Ok(())
    }
}
