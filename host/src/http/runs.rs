//! An agent's runs: `GET /api/agents/{name}/runs/{correlation_id}` (one
//! run's stored state), `GET /api/agents/{name}/runs` (a page of them,
//! newest first) and `POST /api/agents/{name}/runs/{correlation_id}/cancel`.

use super::caller::{visible_run, Caller};
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::run_body::RunView;
use super::{error, ApiError, AppState};
use crate::runs::{CancelOutcome, RunFilter, RunStatus};

/// How long a cancel request waits for its run to end before it answers
/// 202: long enough for a run between two steps, short of a tool call.
const CANCEL_WAIT: Duration = Duration::from_secs(2);

/// Runs on a page unless the caller asks for another number.
const DEFAULT_PAGE: usize = 20;
const LARGEST_PAGE: usize = 100;

/// A run: its status, its answer or error, its pending tool calls.
#[utoipa::path(
    get,
    path = "/api/agents/{name}/runs/{correlation_id}",
    tag = "agents",
    params(("name" = String, Path), ("correlation_id" = String, Path)),
    responses(
        (status = 200, description = "The run", body = super::run_body::RunView),
        super::schemas::Failures
    )
)]
pub async fn get(
    State(state): State<AppState>,
    Path((name, correlation_id)): Path<(String, String)>,
    caller: Caller,
) -> Result<Response, ApiError> {
    let run = visible_run(&state, &caller, &name, &correlation_id).await?;
    Ok(Json(RunView::new(&run.record, run.pending)).into_response())
}

/// Stops a run: between two model turns or tool calls (a tool under way
/// finishes first); one waiting for a human's decision, or queued, ends
/// without running. 200 with the run once it ended `canceled`, 202 while
/// the request waits for the run's next step, 409 when the run had ended
/// (or ended on its own before a step that stops it).
#[utoipa::path(
    post,
    path = "/api/agents/{name}/runs/{correlation_id}/cancel",
    tag = "agents",
    params(("name" = String, Path), ("correlation_id" = String, Path)),
    responses(
        (status = 200, description = "The run ended", body = super::run_body::RunView),
        (status = 202, description = "Asked: the run ends at its next step", body = super::run_body::RunView),
        super::schemas::Failures
    )
)]
pub async fn cancel(
    State(state): State<AppState>,
    Path((name, correlation_id)): Path<(String, String)>,
    caller: Caller,
) -> Result<Response, ApiError> {
    visible_run(&state, &caller, &name, &correlation_id).await?;
    Ok(
        match state
            .runs
            .cancel(&name, &correlation_id, CANCEL_WAIT)
            .await?
        {
            CancelOutcome::Ended(run) => {
                Json(RunView::new(&run.record, run.pending)).into_response()
            }
            CancelOutcome::Requested(run) => error::accepted(Json(
                RunView::new(&run.record, run.pending).cancel_requested(),
            )),
        },
    )
}

/// Unknown parameters are refused (400 `invalid_query` naming them): a
/// misspelt filter must not list every run as if it had filtered.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only this session's runs (also `session_id`, `threadId`, `thread_id`).
    #[serde(
        rename = "sessionId",
        alias = "session_id",
        alias = "threadId",
        alias = "thread_id"
    )]
    session_id: Option<String>,
    /// `pending`, `awaiting_approval`, `completed`, `failed` or `canceled`.
    status: Option<String>,
    /// Runs on the page, 1 to 100 (20 by default).
    limit: Option<String>,
    /// The `next` of the previous page.
    after: Option<String>,
    /// An endpoint key given in the URL (read by the key check).
    #[serde(default)]
    #[allow(dead_code)]
    code: Option<String>,
}

/// A page of runs, newest first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(super) struct RunsPage<'a> {
    runs: Vec<RunView<'a>>,
    /// Pass as `after` for the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// An agent's runs, newest first, a page at a time.
#[utoipa::path(
    get,
    path = "/api/agents/{name}/runs",
    tag = "agents",
    params(("name" = String, Path), ListQuery),
    responses(
        (status = 200, description = "A page of runs", body = RunsPage),
        super::schemas::Failures
    )
)]
pub async fn list(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let filter = filter_of(query)?;
    let page = state.runs.list(&name, filter).await?;
    let body = RunsPage {
        runs: page
            .runs
            .iter()
            .map(|run| RunView::new(&run.record, run.pending.clone()))
            .collect(),
        next: page.next.map(|position| position.to_string()),
    };
    Ok(Json(body).into_response())
}

fn filter_of(query: ListQuery) -> Result<RunFilter, ApiError> {
    let status = match query.status.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => Some(
            RunStatus::parse(text)
                .or_else(|| (text == "awaiting_approval").then_some(RunStatus::AwaitingApproval))
                .filter(|s| *s != RunStatus::Running)
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "invalid_filter",
                        format!("unknown status '{text}'; use one of pending, awaiting_approval, completed, failed, canceled"),
                    )
                })?,
        ),
    };
    let limit = match query.limit.as_deref().map(str::trim) {
        None | Some("") => DEFAULT_PAGE,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=LARGEST_PAGE).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(
                    "invalid_limit",
                    format!("limit must be a whole number from 1 to {LARGEST_PAGE}, not '{text}'"),
                )
            })?,
    };
    let before = match query.after.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(text) => Some(text.parse::<i64>().ok().filter(|n| *n > 0).ok_or_else(|| {
            ApiError::bad_request(
                "invalid_cursor",
                "after must be the `next` of a page this host returned",
            )
        })?),
    };
    Ok(RunFilter {
        session_id: query.session_id.filter(|s| !s.is_empty()),
        status,
        before,
        limit,
        caller: None,
    })
}
