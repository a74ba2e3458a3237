//! What the runs service hears from the other hosts of a shared hub, and
//! the pass that takes the sessions they leave: runs queued for a session
//! this host was given, runs that ended elsewhere (whoever waits here is
//! told), and a look at every session when a notification may have been
//! lost. Alone on its store, a host makes the pass once, at start.

use std::sync::Arc;

use tokio::sync::broadcast;

use super::{Finished, Handed, Runs, PASS};
use crate::store::{Assigned, SessionKey, Wake};

/// Sessions one pass claims at most, so that other hosts get their share.
const CLAIM_AT_ONCE: usize = 64;

impl Runs {
    pub(super) async fn follow(self: Arc<Self>) {
        let mut wakes = self.store.wakes();
        let mut first = true;
        loop {
            if self.works {
                let store = &self.store;
                match store
                    .within("sessions to claim", store.claim_sessions(CLAIM_AT_ONCE))
                    .await
                {
                    Ok(sessions) => {
                        if first && !sessions.is_empty() {
                            tracing::info!(sessions = sessions.len(), "resuming unfinished runs");
                        }
                        let full = sessions.len() >= CLAIM_AT_ONCE;
                        sessions
                            .into_iter()
                            .for_each(|(s, fence)| self.wake_with(s, None, fence));
                        if full {
                            continue;
                        }
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "could not read sessions with unfinished runs")
                    }
                }
            }
            first = false;
            // Alone on its store, a host has nothing more to learn.
            let Some(wakes) = wakes.as_mut() else { return };
            let deadline = tokio::time::sleep(PASS);
            tokio::pin!(deadline);
            loop {
                let wake = tokio::select! {
                    wake = wakes.recv() => wake,
                    () = &mut deadline => break,
                    () = self.stopping.cancelled() => return,
                };
                let pass = match wake {
                    Err(broadcast::error::RecvError::Closed) => return,
                    Err(broadcast::error::RecvError::Lagged(_)) => true,
                    Ok(wake) => self.heard(wake),
                };
                if pass {
                    // One pass answers every wake-up queued meanwhile.
                    while let Ok(wake) = wakes.try_recv() {
                        self.heard(wake);
                    }
                    break;
                }
            }
        }
    }

    /// Takes in another host's notification; true when it asks for a pass
    /// over the sessions.
    fn heard(self: &Arc<Self>, wake: Wake) -> bool {
        match wake {
            Wake::Assigned(assigned) => {
                self.take_assigned(assigned);
                false
            }
            Wake::RunFinished(correlation_id, record) => {
                self.finished.tell(Finished {
                    correlation_id,
                    record,
                });
                false
            }
            Wake::CancelRequested(correlation_id, session) => {
                self.stop(&correlation_id, session);
                false
            }
            Wake::Sessions | Wake::Everything => true,
            Wake::Instances(_) | Wake::Posted(_) | Wake::Due(_) => false,
        }
    }

    /// A run queued for a session another host gave this one: the
    /// session's worker reads the run and its fence in one read and runs
    /// it. One behind another run of the session is found by the worker
    /// that runs that one (told to look again).
    fn take_assigned(self: &Arc<Self>, assigned: Assigned) {
        let session = SessionKey {
            agent: assigned.agent,
            session_id: assigned.session_id,
        };
        if !assigned.next_in_line {
            self.wake(session);
            return;
        }
        if !self.works || self.stopping.is_cancelled() || !self.workers.claim(&session) {
            return;
        }
        let this = self.clone();
        self.tracker.spawn(async move {
            let store = &this.store;
            let read = store
                .within(
                    "the run assigned here",
                    store.assigned_run(&assigned.correlation_id),
                )
                .await;
            // Nothing read (the run ended, the session is not ours, the
            // store failed): the worker looks at the session as after any
            // wake-up.
            let first = match read {
                Ok(found) => found.map(|(run, fence, has_messages)| Handed {
                    run,
                    fence: Some(fence),
                    new_session: assigned.new_session && !has_messages,
                }),
                Err(e) => {
                    tracing::warn!(error = %e, "could not read a run assigned here; looking at its session");
                    None
                }
            };
            this.work(session, first, None).await;
        });
    }
}
