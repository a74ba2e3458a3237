//! What the params of an A2A call say: the JSON-RPC params (and the
//! HTTP+JSON bodies, the same shapes) as types, a message's parts read as its
//! text and its decisions on tool calls, and the `-32602` that names what is
//! wrong with them.

use serde::Deserialize;
use serde_json::Value;

use super::rpc::RpcError;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct SendParams {
    pub(super) message: Message,
    #[serde(default)]
    pub(super) configuration: Configuration,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Message {
    #[serde(default)]
    pub(super) context_id: Option<String>,
    #[serde(default)]
    pub(super) task_id: Option<String>,
    /// The sender's id of the message: a message sent again with the same
    /// id (a caller retrying after a lost answer or a crash) finds the task
    /// the first one started instead of starting another.
    #[serde(default)]
    pub(super) message_id: Option<String>,
    #[serde(default)]
    pub(super) parts: Vec<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Configuration {
    #[serde(default)]
    pub(super) history_length: Option<i64>,
    #[serde(default)]
    pub(super) return_immediately: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TaskParams {
    pub(super) id: String,
    #[serde(default)]
    pub(super) history_length: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ListParams {
    #[serde(default)]
    pub(super) context_id: Option<String>,
    #[serde(default)]
    pub(super) status: Option<String>,
    #[serde(default)]
    pub(super) page_size: Option<i64>,
    #[serde(default)]
    pub(super) page_token: Option<String>,
    #[serde(default)]
    pub(super) history_length: Option<i64>,
    #[serde(default)]
    pub(super) include_artifacts: bool,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ApprovalPart {
    pub(super) call_id: String,
    pub(super) approved: bool,
    #[serde(default)]
    pub(super) reason: Option<String>,
}

/// What a message says: its text, and decisions on tool calls if it carries
/// an `approvals` data part.
pub(super) struct Said {
    pub(super) text: String,
    pub(super) approvals: Option<Vec<ApprovalPart>>,
}

pub(super) fn said(parts: &[Value]) -> Result<Said, RpcError> {
    let mut texts = Vec::new();
    let mut approvals = None;
    for part in parts {
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            texts.push(text.to_string());
        } else if let Some(data) = part.get("data") {
            match data.get("approvals") {
                Some(list) => {
                    approvals = Some(
                        serde_json::from_value::<Vec<ApprovalPart>>(list.clone()).map_err(|e| {
                            RpcError::invalid_params(format!(
                            "approvals must be [{{\"callId\", \"approved\", \"reason\"?}}]: {e}"
                        ))
                        })?,
                    )
                }
                None => texts.push(data.to_string()),
            }
        } else if part.get("raw").is_some() || part.get("url").is_some() {
            return Err(RpcError::content_type(
                "Incompatible content types: this agent takes text and data parts, not files",
            ));
        } else {
            return Err(RpcError::invalid_params(format!(
                "a part must hold text or data: {part}"
            )));
        }
    }
    Ok(Said {
        text: texts.join("\n"),
        approvals,
    })
}

pub(super) fn shown_history(length: Option<i64>) -> Result<Option<usize>, RpcError> {
    match length {
        None => Ok(None),
        Some(n) if n < 0 => Err(RpcError::invalid_params(
            "historyLength must not be negative",
        )),
        Some(n) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
    }
}

/// The params of a call, or `-32602` naming what is wrong.
pub(super) fn params_of<T: for<'de> Deserialize<'de>>(params: &Value) -> Result<T, RpcError> {
    serde_json::from_value(params.clone())
        .map_err(|e| RpcError::invalid_params(format!("invalid params: {e}")))
}
