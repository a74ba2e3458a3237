//! One episode of orchestration code in the sandbox: a slot of the
//! component's share, the run under the episode's CPU and wall-clock
//! limits, and how it ended with the replay it made. A replay check runs
//! the same, its log lines muted.

use super::host;
use super::{instantiate_failed, GuestError, LoadedComponent, Runtime, Slot, Stop};
use crate::core::lifecycle::episode_end::Ending;
use crate::core::replay::Replay;

impl Runtime {
    /// Runs one episode of an orchestration: the guest from the start, with
    /// its durable calls answered by `replay`. Returns how the episode ended
    /// and the replay (with the calls to journal). Called holding a guest
    /// slot (see [`GuestSlot::run_orchestration`]).
    async fn run_orchestration(
        &self,
        component: &LoadedComponent,
        name: &str,
        input: &str,
        instance_id: &str,
        replay: Replay,
        logs: GuestLogs,
    ) -> Result<(Ending, Replay), GuestError> {
        let cpu_time = self.episode_cpu_time.min(component.grants.limits.cpu_time);
        let mut store = host::new_orchestration_store(
            &self.engine,
            &component.name,
            &component.grants,
            cpu_time,
            instance_id,
            replay,
        );
        if logs == GuestLogs::Muted {
            store.data_mut().mute_logs();
        }
        let instance = component
            .orchestration_pre
            .instantiate_async(&mut store)
            .await
            .map_err(|e| instantiate_failed(component, &e))?;
        let ticks = store.data().ticks();
        let call = instance
            .agenthost_host_component()
            .call_run_orchestration(&mut store, name, input);
        let result = self.gated(component, ticks, call).await;
        let end = match result {
            Ok(returned) => Ending::Returned(returned),
            Err(e) => match e.downcast_ref::<Stop>() {
                Some(Stop::Waiting) => Ending::Waiting,
                Some(stop) => Ending::Broken(stop.to_string()),
                None if matches!(
                    e.downcast_ref::<wasmtime::Trap>(),
                    Some(wasmtime::Trap::Interrupt)
                ) =>
                {
                    Ending::Broken(format!(
                        "the orchestration code used more than {cpu_time:?} of CPU in one episode \
                         (--episode-cpu-time): an episode must only decide what comes next; \
                         do heavy work in an activity"
                    ))
                }
                None => {
                    return Err(GuestError::from_call(
                        &component.name,
                        &e,
                        store.data().hit_memory_limit(),
                    ))
                }
            },
        };
        let replay = store
            .data_mut()
            .take_orchestration()
            .map(|scope| scope.replay)
            .ok_or_else(|| GuestError::Trap {
                component: component.name.clone(),
                reason: "the orchestration state was lost".into(),
            })?;
        Ok((end, replay))
    }

    /// A guest slot for an orchestration episode of `component`, waited
    /// for apart from the episode (its caller may wait without its own
    /// engine slot). `wall_clock` bounds the episode's code, counted from
    /// when it has the slot: a wait for one (every slot held by a
    /// component's sleeping activities) is the host's queue, not code that
    /// blocks, and ended in [`GuestError::WallClock`] blaming the guest.
    pub async fn orchestration_slot(
        &self,
        component: &LoadedComponent,
        wall_clock: std::time::Duration,
    ) -> Result<GuestSlot<'_>, GuestError> {
        let slot = self.slot(component).await?;
        Ok(GuestSlot {
            runtime: self,
            wall_clock,
            _slot: slot,
        })
    }
}

/// A guest slot taken for an orchestration episode (see
/// [`Runtime::orchestration_slot`]), and the episode's wall-clock limit.
pub struct GuestSlot<'a> {
    runtime: &'a Runtime,
    wall_clock: std::time::Duration,
    _slot: Slot<'a>,
}

impl GuestSlot<'_> {
    /// Runs one episode of an orchestration in this slot, under its
    /// wall-clock limit; the slot is freed when it ends.
    pub async fn run_orchestration(
        self,
        component: &LoadedComponent,
        name: &str,
        input: &str,
        instance_id: &str,
        replay: Replay,
    ) -> Result<(Ending, Replay), GuestError> {
        self.orchestration(
            component,
            name,
            input,
            instance_id,
            replay,
            GuestLogs::Written,
        )
        .await
    }

    /// [`Self::run_orchestration`] for a replay check: the code's log lines
    /// are not written (they are not the instance's, and thousands of
    /// replays would spend the component's share of the log).
    pub async fn check_orchestration(
        self,
        component: &LoadedComponent,
        name: &str,
        input: &str,
        instance_id: &str,
        replay: Replay,
    ) -> Result<(Ending, Replay), GuestError> {
        self.orchestration(
            component,
            name,
            input,
            instance_id,
            replay,
            GuestLogs::Muted,
        )
        .await
    }

    async fn orchestration(
        self,
        component: &LoadedComponent,
        name: &str,
        input: &str,
        instance_id: &str,
        replay: Replay,
        logs: GuestLogs,
    ) -> Result<(Ending, Replay), GuestError> {
        let limit = self.wall_clock;
        let run = self
            .runtime
            .run_orchestration(component, name, input, instance_id, replay, logs);
        tokio::time::timeout(limit, run)
            .await
            .map_err(|_| GuestError::WallClock {
                component: component.name.clone(),
                limit,
            })?
    }
}

/// Whether a run's guest log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GuestLogs {
    Written,
    Muted,
}
