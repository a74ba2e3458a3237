//! An orchestration's call of a remote A2A agent, as a task. Before the
//! message leaves, the call stores the id it sends it with (random: no other
//! caller's message can share it); the remote task's id is stored as soon as
//! the remote host names it, and the task is followed by `GetTask` until it
//! ends. After a crash the call goes on from what was stored: `GetTask` on
//! the task, or the same message sent again with the same `messageId`, which
//! an agenthost remote answers with the task the first send started.

use std::time::{Duration, Instant};

use serde_json::json;

use super::task_outcome::Outcome;
use super::Orchestrator;
use crate::core::ids;
use crate::remote_agents::{RemoteAgents, RemoteError, RemoteTask, Sent, TaskState};
use crate::store::TaskRow;

/// The first pause between two looks at a remote task (or two tries of a
/// send the remote did not answer), doubled up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(200);
const LONGEST_PAUSE: Duration = Duration::from_secs(5);
/// How long a send is tried again while the remote does not answer (or
/// answers 5xx) before the call fails.
const SEND_FOR: Duration = Duration::from_secs(120);
/// Every this many looks at the remote task, the call checks that its task
/// is still due here (the instance was not terminated, did not move on, and
/// no other host took the task over): if not, it stops following.
const LOOKS_BETWEEN_CHECKS: u32 = 10;
/// The most of a remote's words (an error, a failed task's message) that go
/// into the journal, and of its status that goes into the custom status.
const MAX_REMOTE_TEXT: usize = 4 * 1024;
const MAX_SHOWN_STATUS: usize = 16 * 1024;

/// What the caller of a remote call passes.
pub(super) struct RemoteCall<'a> {
    pub card_url: &'a str,
    pub message: &'a str,
    pub context_id: Option<&'a str>,
}

pub(super) async fn run(
    orchestrator: &Orchestrator,
    row: &TaskRow,
    call: RemoteCall<'_>,
) -> Outcome {
    let component =
        match super::task_outcome::instance_component(orchestrator, row, "the remote call").await {
            Ok(component) => component,
            Err(outcome) => return outcome,
        };
    let remote = RemoteAgents::new(&component.grants);
    let correlation_id =
        ids::agent_call_correlation(&row.instance_id, row.execution, row.task, row.attempt);
    let follow = Follow {
        orchestrator,
        row,
        remote: &remote,
        correlation_id: &correlation_id,
        card_url: call.card_url,
    };
    let fresh_id = uuid::Uuid::new_v4().to_string();
    let stored = match orchestrator
        .store
        .remote_call(&correlation_id, &row.instance_id, &fresh_id)
        .await
    {
        Ok(stored) => stored,
        Err(e) => {
            tracing::warn!(instance_id = %row.instance_id, error = %e, "the store is unavailable; the remote call is looked at again later");
            return Outcome::Interrupted;
        }
    };
    let (endpoint, task_id) = match stored.task {
        Some(task) => task,
        None => match follow
            .send(&stored.message_id, call.message, call.context_id)
            .await
        {
            Ok(task) => task,
            Err(outcome) => return outcome,
        },
    };
    follow.to_the_end(&endpoint, &task_id, stored.shown).await
}

struct Follow<'a> {
    orchestrator: &'a Orchestrator,
    row: &'a TaskRow,
    remote: &'a RemoteAgents<'a>,
    correlation_id: &'a str,
    card_url: &'a str,
}

impl Follow<'_> {
    /// Sends the message (again, with the same id, while the remote does
    /// not answer, for up to [`SEND_FOR`]) and stores the task it started:
    /// its endpoint and id. `Err` holds the call's outcome when it is over
    /// already (a message for an answer, a refusal) or cannot go on now.
    async fn send(
        &self,
        message_id: &str,
        message: &str,
        context_id: Option<&str>,
    ) -> Result<(String, String), Outcome> {
        let until = Instant::now() + SEND_FOR;
        let mut pause = FIRST_PAUSE;
        let (endpoint, task) = loop {
            let sent = async {
                let endpoint = self.remote.endpoint(self.card_url).await?;
                let sent = self
                    .remote
                    .send(&endpoint, message_id, context_id, message)
                    .await?;
                Ok::<_, RemoteError>((endpoint, sent))
            }
            .await;
            match sent {
                Ok((_, Sent::Answered(answer))) => return Err(Outcome::Done(Ok(answer))),
                Ok((endpoint, Sent::Task(task))) => break (endpoint, task),
                Err(e) if e.is_transient() && Instant::now() < until => {
                    tracing::warn!(instance_id = %self.row.instance_id, error = %e, retry_in = ?pause, "the remote agent did not take the message; sending it again");
                    if !self.wait(&mut pause).await {
                        return Err(Outcome::Interrupted);
                    }
                }
                Err(e) => return Err(self.failed(e)),
            }
        };
        tracing::info!(instance_id = %self.row.instance_id, task = self.row.task, %endpoint, task_id = %task.id, "a remote agent took the call");
        // Until this write, a crash sends again (the same messageId).
        if let Err(e) = self
            .orchestrator
            .store
            .remote_task_started(self.correlation_id, &endpoint, &task.id)
            .await
        {
            tracing::warn!(instance_id = %self.row.instance_id, error = %e, "could not store the remote task id; the call is looked at again later");
            return Err(Outcome::Interrupted);
        }
        Ok((endpoint, task.id))
    }

    /// Follows the remote task until it ends; while it waits for input,
    /// that shows as the instance's custom status (`shown`: as stored).
    async fn to_the_end(&self, endpoint: &str, task_id: &str, mut shown: bool) -> Outcome {
        let mut pause = FIRST_PAUSE;
        let mut looks = 0u32;
        loop {
            looks += 1;
            if looks.is_multiple_of(LOOKS_BETWEEN_CHECKS) && !self.still_due().await {
                self.unshow(shown).await;
                return Outcome::Interrupted;
            }
            let task = match self.remote.task(endpoint, task_id).await {
                Ok(task) => task,
                Err(e) if e.is_transient() => {
                    tracing::warn!(instance_id = %self.row.instance_id, error = %e, retry_in = ?pause, "the remote agent did not answer; looking again");
                    if !self.wait(&mut pause).await {
                        return Outcome::Interrupted;
                    }
                    continue;
                }
                Err(e) if e.is_task_not_found() => {
                    self.unshow(shown).await;
                    return Outcome::Done(Err(clip(&format!(
                        "the remote agent at {} no longer knows task '{task_id}': {e}",
                        self.card_url
                    ))));
                }
                Err(e) => {
                    self.unshow(shown).await;
                    return self.failed(e);
                }
            };
            match task.state {
                TaskState::InputRequired if !shown => shown = self.show(&task).await,
                TaskState::InputRequired => {}
                _ if shown => {
                    self.unshow(true).await;
                    shown = false;
                }
                _ => {}
            }
            match task.state {
                TaskState::Working | TaskState::InputRequired => {
                    if !self.wait(&mut pause).await {
                        return Outcome::Interrupted;
                    }
                }
                TaskState::Completed => return Outcome::Done(Ok(task.answer)),
                TaskState::Ended(how) => {
                    let why = match task.answer.is_empty() {
                        true => String::new(),
                        false => format!(": {}", task.answer),
                    };
                    return Outcome::Done(Err(clip(&format!(
                        "the remote agent at {} {how} task '{}'{why}",
                        self.card_url, task.id
                    ))));
                }
            }
        }
    }

    /// Whether the task is still this host's to run; a store that cannot
    /// say counts as yes (the next check asks again).
    async fn still_due(&self) -> bool {
        match self.orchestrator.store.task_still_due(self.row).await {
            Ok(due) => {
                if !due {
                    tracing::info!(instance_id = %self.row.instance_id, task = self.row.task, "the remote call's task is no longer due here; it stops following the remote task");
                }
                due
            }
            Err(e) => {
                tracing::debug!(error = %e, "could not check that the remote call is still due");
                true
            }
        }
    }

    /// Shows the remote task's request for input as the instance's custom
    /// status; true once it is stored (else the next look tries again).
    async fn show(&self, task: &RemoteTask) -> bool {
        let mut status = json!({
            "waitingFor": "remote-agent",
            "cardUrl": self.card_url,
            "taskId": task.id,
            "state": "TASK_STATE_INPUT_REQUIRED",
            "status": task.status,
        });
        if status.to_string().len() > MAX_SHOWN_STATUS {
            status["status"] = json!({"state": "TASK_STATE_INPUT_REQUIRED", "truncated": true});
        }
        tracing::info!(instance_id = %self.row.instance_id, task_id = %task.id, "the remote task waits for input");
        match self
            .orchestrator
            .store
            .show_remote_input(
                self.correlation_id,
                &self.row.instance_id,
                &status.to_string(),
            )
            .await
        {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(instance_id = %self.row.instance_id, error = %e, "could not show that the remote task waits for input");
                false
            }
        }
    }

    /// Puts back the instance's custom status if this call showed its own,
    /// trying a few times: a status left showing a wait that is over would
    /// mislead whoever reads it.
    async fn unshow(&self, shown: bool) {
        if !shown {
            return;
        }
        let mut pause = FIRST_PAUSE;
        for _ in 0..5 {
            match self
                .orchestrator
                .store
                .unshow_remote_input(self.correlation_id, &self.row.instance_id)
                .await
            {
                Ok(()) => return,
                Err(e) => {
                    tracing::warn!(instance_id = %self.row.instance_id, error = %e, "could not put the custom status back; trying again");
                    if !self.wait(&mut pause).await {
                        return;
                    }
                }
            }
        }
    }

    /// Waits `pause` (doubling it for the next time); false when the host
    /// stops meanwhile.
    async fn wait(&self, pause: &mut Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(*pause) => {}
            () = self.orchestrator.stopping.cancelled() => return false,
        }
        *pause = (*pause * 2).min(LONGEST_PAUSE);
        true
    }

    /// A failure before the remote task could be followed: the call fails
    /// (its retry policy may try again, as a new message), unless the host
    /// is stopping.
    fn failed(&self, e: RemoteError) -> Outcome {
        if self.orchestrator.stopping.is_cancelled() {
            return Outcome::Interrupted;
        }
        tracing::info!(instance_id = %self.row.instance_id, task = self.row.task, error = %e, "the remote agent call failed");
        Outcome::Done(Err(clip(&format!(
            "the call of the remote agent at {} failed: {e}",
            self.card_url
        ))))
    }
}

/// At most [`MAX_REMOTE_TEXT`] bytes of `text` (cut at a character).
fn clip(text: &str) -> String {
    if text.len() <= MAX_REMOTE_TEXT {
        return text.to_string();
    }
    let mut end = MAX_REMOTE_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}
