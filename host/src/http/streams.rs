//! Streamed answers: `GET /api/agents/{name}/runs/{correlation_id}/stream`
//! (server-sent events from the start, from `?cursor=ID`, or from the
//! `Last-Event-ID` header; or, with `Accept: text/plain`, the whole text once
//! complete), and the SSE answer of `POST /api/agents/{name}/run` with
//! `Accept: text/event-stream`.
//!
//! Events: `id:` the stream entry's id (the cursor to resume after),
//! `event: chunk` with `data: {"text": …}`, then `event: complete` with
//! `data: {"status": "complete", …}` or `event: error` with
//! `data: {"status": "failed", "error": …}`; the stream ends after either.

use super::caller::Caller;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::json;
use tokio_stream::wrappers::ReceiverStream;

use super::{ApiError, AppState};
use crate::runs::RunsError;
use crate::streams::{Entry, EntryId, Follower, Stored, StreamError};

/// How long a follower waits for a next entry before it ends the stream
/// (a run queued behind a long one, a model that stalls).
const IDLE_LIMIT: Duration = Duration::from_secs(30 * 60);

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Resume after this entry (as `Last-Event-ID` does).
    cursor: Option<String>,
    /// The stream token of a 202's `streamUrl` (opens this stream alone).
    #[allow(dead_code)]
    token: Option<String>,
}

#[utoipa::path(
    get,
    path = "/api/agents/{name}/runs/{correlation_id}/stream",
    tag = "agents",
    params(("name" = String, Path), ("correlation_id" = String, Path), StreamQuery),
    responses(
        (status = 200, description = "The answer", content(
            (super::schemas::StreamEvent = "text/event-stream"), (String = "text/plain"))),
        (status = 204, description = "The reader has every entry of an ended run: nothing will follow"),
        super::schemas::Failures
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Path((name, correlation_id)): Path<(String, String)>,
    Query(query): Query<StreamQuery>,
    caller: Caller,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let cursor = match query.cursor.as_deref().or_else(|| {
        headers
            .get("last-event-id")
            .and_then(|v| v.to_str().ok())
    }) {
        None => EntryId::start(),
        Some(text) => EntryId::parse(text).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_cursor",
                format!("'{text}' is not a stream entry id: use 0 for the start, or the id of the last event received"),
            )
        })?,
    };
    let not_found = |why: &str| {
        ApiError::not_found(
            "stream_not_found",
            format!("agent '{name}' has no response stream '{correlation_id}': {why}"),
        )
    };
    let run = match state.runs.record(&name, &correlation_id).await {
        Ok(run) if caller.sees(run.caller.as_deref()) => run,
        Ok(_) | Err(RunsError::RunNotFound { .. }) => return Err(not_found("no such run")),
        Err(e) => return Err(e.into()),
    };
    // A finished run whose stream is gone has expired.
    if run.status.is_finished() && !state.streams.settle(&run).await? {
        return Err(not_found("it has expired"));
    }
    if accepts(&headers, "text/plain") && !accepts(&headers, "text/event-stream") {
        let follower = state.streams.admit()?;
        return whole_text(&state, follower, &name, &correlation_id).await;
    }
    // A reader that has every entry of an ended run, the last one included
    // (a browser's EventSource reconnects with the last id it got): nothing
    // will follow. 204 tells it to stop reconnecting; a stream left open
    // would wait for entries that never come, holding a follower's place.
    if run.status.is_finished()
        && state
            .streams
            .read_after(&correlation_id, &cursor)
            .await?
            .is_empty()
    {
        return Ok(super::error::no_content());
    }
    let follower = state.streams.admit()?;
    Ok(sse(&state, follower, &correlation_id, cursor))
}

/// How long after a run's end its stream may still lack its last entry
/// (the entries are written after the run's record, by the host that ran
/// it); past it, that host is taken to have died in between.
pub(super) fn sse(
    state: &AppState,
    follower: Follower,
    correlation_id: &str,
    cursor: EntryId,
) -> Response {
    let follow = state
        .streams
        .follow(follower, correlation_id, cursor, IDLE_LIMIT);
    let correlation_id = correlation_id.to_string();
    let events = ReceiverStream::new(follow)
        .map(move |entry| Ok::<_, Infallible>(event(&correlation_id, entry)));
    Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response()
}

fn event(correlation_id: &str, entry: Result<Stored, StreamError>) -> Event {
    match entry {
        // No id: a client that resumes never lands on it.
        Ok(Stored {
            entry: Entry::Restart,
            attempt,
            ..
        }) => Event::default().event("restart").data(
            json!({"status": "restart", "attempt": attempt, "reason": "the run began again; discard the text received so far"})
                .to_string(),
        ),
        Ok(Stored { id, entry, .. }) => {
            let (name, data) = match entry {
                Entry::Chunk(text) => ("chunk", json!({ "text": text })),
                Entry::Complete => (
                    "complete",
                    json!({"status": "complete", "correlationId": correlation_id, "correlation_id": correlation_id}),
                ),
                Entry::Failed(error) => ("error", json!({ "status": "failed", "error": error })),
                Entry::Restart => ("restart", json!({ "status": "restart" })),
            };
            Event::default()
                .id(id.as_str())
                .event(name)
                .data(data.to_string())
        }
        Err(e) => Event::default()
            .event("error")
            .data(json!({"status": "failed", "error": e.to_string()}).to_string()),
    }
}

/// The answer as one text, once the stream is complete.
async fn whole_text(
    state: &AppState,
    follower: Follower,
    agent: &str,
    correlation_id: &str,
) -> Result<Response, ApiError> {
    let mut follow = state
        .streams
        .follow(follower, correlation_id, EntryId::start(), IDLE_LIMIT);
    let mut text = String::new();
    while let Some(entry) = follow.recv().await {
        match entry?.entry {
            Entry::Chunk(chunk) => text.push_str(&chunk),
            // Only the newest attempt's text is the answer.
            Entry::Restart => text.clear(),
            Entry::Complete => {
                return Ok(([(CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
            }
            Entry::Failed(error) => {
                // Stopped by a caller: not a failure of the run (502).
                if let Ok(run) = state.runs.record(agent, correlation_id).await {
                    if run.status == crate::runs::RunStatus::Canceled {
                        return Err(ApiError::conflict(
                            crate::runs::CANCELED,
                            format!("agent '{agent}' did not answer: the run was canceled"),
                        ));
                    }
                }
                return Err(ApiError::run_failed(
                    "run_failed",
                    format!("the run failed: {error}"),
                ));
            }
        }
    }
    Err(ApiError::stream_incomplete())
}

fn accepts(headers: &HeaderMap, media: &str) -> bool {
    headers
        .get(ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(media))
}

/// Whether the caller of the run endpoint asked for server-sent events.
pub(super) fn wants_events(headers: &HeaderMap) -> bool {
    accepts(headers, "text/event-stream")
}
