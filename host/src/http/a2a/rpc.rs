//! JSON-RPC 2.0 as A2A 1.0 uses it: one request object a call (no
//! batches), the answer always HTTP 200, errors with the spec's codes and a
//! `google.rpc.ErrorInfo` detail whose `metadata` the SDKs hand to the
//! caller.

use serde_json::{json, Value};

/// A JSON-RPC error of the A2A spec.
#[derive(Debug, Clone)]
pub(super) struct RpcError {
    code: i64,
    message: String,
    reason: &'static str,
    metadata: Value,
}

impl RpcError {
    fn new(code: i64, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            reason,
            metadata: json!({}),
        }
    }

    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.metadata[key] = value.into();
        self
    }

    pub fn parse(message: impl Into<String>) -> Self {
        Self::new(-32700, "PARSE_ERROR", message)
    }
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(-32600, "INVALID_REQUEST", message)
    }
    pub fn method_not_found(method: &str) -> Self {
        Self::new(-32601, "METHOD_NOT_FOUND", format!("no method '{method}'; this agent answers SendMessage, SendStreamingMessage, GetTask, ListTasks, CancelTask and SubscribeToTask"))
            .with("method", method)
    }
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(-32602, "INVALID_PARAMS", message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(-32603, "INTERNAL_ERROR", message)
    }
    pub fn task_not_found(id: &str) -> Self {
        Self::new(-32001, "TASK_NOT_FOUND", format!("Task not found: '{id}'")).with("taskId", id)
    }
    pub fn not_cancelable(id: &str, status: &str) -> Self {
        Self::new(
            -32002,
            "TASK_NOT_CANCELABLE",
            format!("Task cannot be canceled: '{id}' has already ended ({status})"),
        )
        .with("taskId", id)
    }
    pub fn push_not_supported() -> Self {
        Self::new(
            -32003,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            "Push Notification is not supported: follow a task with SendStreamingMessage or SubscribeToTask",
        )
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(-32004, "UNSUPPORTED_OPERATION", message)
    }
    pub fn content_type(message: impl Into<String>) -> Self {
        Self::new(-32005, "CONTENT_TYPE_NOT_SUPPORTED", message)
    }
    pub fn extended_card() -> Self {
        Self::new(
            -32007,
            "EXTENDED_AGENT_CARD_NOT_CONFIGURED",
            "this agent has no extended card",
        )
    }
    pub fn version(sent: Option<&str>) -> Self {
        let message = match sent {
            None => "Version not supported: no A2A-Version header means 0.3; this server speaks A2A 1.0 (send A2A-Version: 1.0)".to_string(),
            Some(v) => format!("Version not supported: A2A-Version '{v}'; this server speaks A2A 1.0"),
        };
        Self::new(-32009, "VERSION_NOT_SUPPORTED", message)
            .with("supportedVersions", json!(["1.0"]))
    }

    fn detail(&self) -> Value {
        json!({
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": self.reason,
            "domain": "a2a-protocol.org",
            "metadata": self.metadata,
        })
    }

    /// The error's JSON-RPC object.
    pub fn object(&self) -> Value {
        json!({"code": self.code, "message": self.message, "data": [self.detail()]})
    }

    /// The error as the HTTP+JSON binding answers it: a `google.rpc.Status`
    /// body, with the HTTP status the spec gives its reason.
    pub fn response(&self) -> axum::response::Response {
        crate::http::error::a2a_status(self.reason, self.status_body())
    }

    /// The `google.rpc.Status` body (`{"error": {code, status, message, details}}`).
    pub fn status_body(&self) -> Value {
        let (code, status) = crate::http::error::a2a_status_of(self.reason);
        json!({"error": {"code": code, "status": status, "message": self.message, "details": [self.detail()]}})
    }
}

/// The answer to the call `id`.
pub(super) fn answer(id: &Value, result: Result<Value, RpcError>) -> Value {
    match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e.object()}),
    }
}

/// A call as sent: its id, method and params, or why it is none.
pub(super) struct Call {
    pub id: Value,
    pub method: String,
    pub params: Value,
}

pub(super) fn call_of(body: &[u8]) -> Result<Call, (Value, RpcError)> {
    let request: Value = serde_json::from_slice(body).map_err(|e| {
        (
            Value::Null,
            RpcError::parse(format!("Parse error: the body is not JSON: {e}")),
        )
    })?;
    let Some(object) = request.as_object() else {
        let why = match request.is_array() {
            true => "a batch (an array) is not supported: send one request object a call",
            false => "the request must be a JSON-RPC 2.0 object",
        };
        return Err((Value::Null, RpcError::invalid_request(why)));
    };
    let id = match object.get("id") {
        None => Value::Null,
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id.clone(),
        Some(_) => {
            return Err((
                Value::Null,
                RpcError::invalid_request("'id' must be a string, a number or null"),
            ))
        }
    };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err((id, RpcError::invalid_request("'jsonrpc' must be \"2.0\"")));
    }
    let Some(method) = object.get("method").and_then(Value::as_str) else {
        return Err((
            id,
            RpcError::invalid_request("'method' is missing or not a string"),
        ));
    };
    let params = match object.get("params") {
        None | Some(Value::Null) => json!({}),
        Some(params @ Value::Object(_)) => params.clone(),
        Some(_) => return Err((id, RpcError::invalid_params("'params' must be an object"))),
    };
    Ok(Call {
        id,
        method: method.to_string(),
        params,
    })
}
