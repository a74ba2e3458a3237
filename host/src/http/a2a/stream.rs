//! A task as server-sent events (`SendStreamingMessage`, `SubscribeToTask`):
//! the task first, then its answer as artifact updates while the model
//! writes it, then its last status, and the stream closes (A2A 1.0 has no
//! final flag: the end of the response is the end of the task's stream).
//! A resubscribing caller gets the text so far in the first event, then
//! only what is new. Each event is a JSON-RPC response with the call's id;
//! a comment every two seconds keeps a client's read timeout from firing.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::rpc::RpcError;
use super::task::{self, ANSWER};
use crate::http::AppState;
use crate::streams::{Entry, EntryId, Follower, Stored};

/// How long a stream waits for the run's next entry before it gives up.
const IDLE_LIMIT: Duration = Duration::from_secs(30 * 60);

/// How often the task's state is read while its stream is quiet: a run that
/// waits for a human writes nothing to its stream.
const STATE_EVERY: Duration = Duration::from_secs(1);

/// Streams task `task` of `agent`, whose first event is `first` (the task as
/// it stands); `resume`: the caller subscribes to a task under way, and gets
/// the text so far in the first event.
pub(super) async fn follow(
    state: &AppState,
    agent: &str,
    task: &str,
    framing: Framing,
    follower: Follower,
    mut first: Value,
    resume: bool,
) -> Response {
    let (sender, receiver) = mpsc::channel::<Event>(64);
    let mut after = EntryId::start();
    let mut appended = false;
    if resume {
        let (text, last) = so_far(state, task).await;
        after = last;
        if !text.is_empty() {
            first["artifacts"] =
                json!([{"artifactId": ANSWER, "name": ANSWER, "parts": [{"text": text}]}]);
            appended = true;
        }
    }
    let context = first["contextId"].as_str().unwrap_or_default().to_string();
    let _ = sender.try_send(framing.event(json!({ "task": first })));
    let feed = Feed {
        state: state.clone(),
        agent: agent.to_string(),
        task: task.to_string(),
        context,
        framing,
        sender,
    };
    tokio::spawn(feed.run(follower, after, appended));
    Sse::new(ReceiverStream::new(receiver).map(Ok::<_, Infallible>))
        .keep_alive(
            KeepAlive::new()
                .interval(Duration::from_secs(2))
                .text("keepalive"),
        )
        .into_response()
}

/// How each event is framed: a JSON-RPC response carrying the call's id, or
/// (the HTTP+JSON binding) the bare stream response.
#[derive(Debug, Clone)]
pub(super) enum Framing {
    JsonRpc(Value),
    Rest,
}

impl Framing {
    fn event(&self, result: Value) -> Event {
        let data = match self {
            Self::JsonRpc(id) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Self::Rest => result,
        };
        Event::default().data(data.to_string())
    }

    fn error(&self, error: &RpcError) -> Event {
        let data = match self {
            Self::JsonRpc(id) => json!({"jsonrpc": "2.0", "id": id, "error": error.object()}),
            Self::Rest => error.status_body(),
        };
        Event::default().event("error").data(data.to_string())
    }
}

/// The newest attempt's text so far, and the entry it ends at (a last
/// entry is left to the follower, which closes the stream on it).
async fn so_far(state: &AppState, task: &str) -> (String, EntryId) {
    let mut text = String::new();
    let mut cursor = EntryId::start();
    loop {
        let Ok(entries) = state.streams.read_after(task, &cursor).await else {
            return (String::new(), EntryId::start());
        };
        if entries.is_empty() {
            return (text, cursor);
        }
        for Stored { id, entry, .. } in entries {
            match entry {
                Entry::Chunk(chunk) => text.push_str(&chunk),
                Entry::Restart => text.clear(),
                Entry::Complete | Entry::Failed(_) => return (text, cursor),
            }
            cursor = id;
        }
    }
}

struct Feed {
    state: AppState,
    agent: String,
    task: String,
    context: String,
    framing: Framing,
    sender: mpsc::Sender<Event>,
}

impl Feed {
    async fn send(&self, result: Value) -> bool {
        self.sender.send(self.framing.event(result)).await.is_ok()
    }

    async fn run(self, follower: Follower, after: EntryId, mut appended: bool) {
        let mut follow = self
            .state
            .streams
            .follow(follower, &self.task, after, IDLE_LIMIT);
        let mut check = tokio::time::interval(STATE_EVERY);
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                entry = follow.recv() => match entry {
                    Some(Ok(Stored { entry: Entry::Chunk(text), .. })) => {
                        let update = task::artifact_update(&self.task, &self.context, &text, appended, false);
                        appended = true;
                        if !self.send(update).await {
                            return;
                        }
                    }
                    // The run began again: its text so far is replaced.
                    Some(Ok(Stored { entry: Entry::Restart, .. })) => {
                        let update = task::artifact_update(&self.task, &self.context, "", false, false);
                        appended = false;
                        if !self.send(update).await {
                            return;
                        }
                    }
                    Some(Ok(_)) | None => {
                        if appended {
                            let last = task::artifact_update(&self.task, &self.context, "", true, true);
                            if !self.send(last).await {
                                return;
                            }
                        }
                        self.last_status().await;
                        return;
                    }
                    Some(Err(e)) => {
                        let error = RpcError::internal(format!("Internal error: the task's stream failed: {e}"));
                        let _ = self.sender.send(self.framing.error(&error)).await;
                        return;
                    }
                },
                _ = check.tick() => {
                    if self.sender.is_closed() {
                        return;
                    }
                    if let Ok(run) = self.state.runs.state(&self.agent, &self.task).await {
                        if !run.pending.is_empty() && !run.record.status.is_finished() {
                            let _ = self.send(task::status_update(&run.record, &run.pending)).await;
                            return;
                        }
                    }
                }
            }
        }
    }

    /// The task's last status, once its stream ended (the record is
    /// written before the stream's last entry).
    async fn last_status(&self) {
        match self.state.runs.state(&self.agent, &self.task).await {
            Ok(run) => {
                let _ = self
                    .send(task::status_update(&run.record, &run.pending))
                    .await;
            }
            Err(e) => {
                tracing::warn!(error = %e, task = %self.task, "could not read a streamed task's last state")
            }
        }
    }
}
