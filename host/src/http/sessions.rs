//! A session's conversation: `GET /api/agents/{name}/sessions/{id}` (paged:
//! `?after=N&limit=M`, `next` is the `after` of the next page),
//! `GET /api/agents/{name}/{id}` (the route callers of Agent Framework
//! hosting use), and `DELETE /api/agents/{name}/sessions/{id}`.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{error, ApiError, AppState};
use crate::core::chat::{Role, ToolCall, Usage};
use crate::runs::SessionKey;

const DEFAULT_PAGE: usize = 1_000;
const MAX_PAGE: usize = 10_000;

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageQuery {
    after: Option<i64>,
    limit: Option<usize>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct Conversation {
    agent: String,
    session_id: String,
    messages: Vec<Message>,
    /// Tokens the session's runs used, summed over all of them.
    #[schema(value_type = super::schemas::UsageSchema)]
    usage: Usage,
    /// The `after` of the next page; absent on the last one.
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<i64>,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
struct Message {
    seq: i64,
    #[schema(value_type = super::schemas::RoleSchema)]
    role: Role,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    tool_calls: Vec<ToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<String>,
    correlation_id: String,
}

/// A session's conversation, a page at a time.
#[utoipa::path(
    get,
    path = "/api/agents/{name}/sessions/{session_id}",
    tag = "sessions",
    params(("name" = String, Path), ("session_id" = String, Path), PageQuery),
    responses(
        (status = 200, description = "The conversation", body = Conversation),
        super::schemas::Failures
    )
)]
pub async fn get(
    state: State<AppState>,
    path: Path<(String, String)>,
    page: Query<PageQuery>,
) -> Result<Response, ApiError> {
    conversation(state, path, page).await
}

/// A session's conversation where callers of Agent Framework hosting read it.
#[utoipa::path(
    get,
    path = "/api/agents/{name}/{session_id}",
    tag = "sessions",
    params(("name" = String, Path), ("session_id" = String, Path), PageQuery),
    responses(
        (status = 200, description = "The conversation", body = Conversation),
        super::schemas::Failures
    )
)]
pub async fn get_by_hosting_route(
    state: State<AppState>,
    path: Path<(String, String)>,
    page: Query<PageQuery>,
) -> Result<Response, ApiError> {
    conversation(state, path, page).await
}

async fn conversation(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    Query(page): Query<PageQuery>,
) -> Result<Response, ApiError> {
    let limit = page.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_limit",
            format!("limit must be 1 to {MAX_PAGE}"),
        ));
    }
    let session = SessionKey {
        agent: name.clone(),
        session_id: id.clone(),
    };
    let page = state
        .runs
        .conversation(&session, page.after.unwrap_or(0), limit)
        .await?;
    let rows = page.messages;
    let next = (rows.len() == limit)
        .then(|| rows.last().map(|(seq, _)| *seq))
        .flatten();
    let messages = rows
        .into_iter()
        .map(|(seq, stored)| Message {
            seq,
            role: stored.message.role,
            content: stored.message.content,
            tool_calls: stored.message.tool_calls,
            tool_call_id: stored.message.tool_call_id,
            correlation_id: stored.correlation_id,
        })
        .collect();
    Ok(Json(Conversation {
        agent: name,
        session_id: id,
        messages,
        usage: page.usage,
        next,
    })
    .into_response())
}

/// Forgets a session and its conversation.
#[utoipa::path(
    delete,
    path = "/api/agents/{name}/sessions/{session_id}",
    tag = "sessions",
    params(("name" = String, Path), ("session_id" = String, Path)),
    responses(
        (status = 204, description = "Deleted"),
        super::schemas::Failures
    )
)]
pub async fn delete(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let session = SessionKey {
        agent: name.clone(),
        session_id: id.clone(),
    };
    state.runs.forget_session(&session).await?;
    Ok(error::no_content())
}
