//! Requests as the enumeration makes them: a key (sent as `x-api-key`) or
//! none, a JSON body, and the answer read whole, or for a moment when it is
//! a stream (a refusal is one JSON body; a stream where a refusal was due is
//! read long enough to see what it gives away).

use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::client;

/// How long a streamed answer is read before the test moves on.
const STREAM_READ: Duration = Duration::from_millis(1500);

/// One HTTP request, sent with any key or none.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: Method,
    pub path: String,
    pub body: Option<Value>,
    pub headers: Vec<(&'static str, String)>,
}

impl Request {
    pub fn new(method: Method, path: impl Into<String>) -> Self {
        Self {
            method,
            path: path.into(),
            body: None,
            headers: Vec::new(),
        }
    }

    pub fn get(path: impl Into<String>) -> Self {
        Self::new(Method::GET, path)
    }

    pub fn post(path: impl Into<String>, body: Value) -> Self {
        Self::new(Method::POST, path).json(body)
    }

    pub fn delete(path: impl Into<String>) -> Self {
        Self::new(Method::DELETE, path)
    }

    pub fn json(mut self, body: Value) -> Self {
        self.body = Some(body);
        self
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// The same request under another path prefix (the dashboard's mount).
    pub fn under(&self, prefix: &str) -> Self {
        let mut moved = self.clone();
        moved.path = format!("{prefix}{}", self.path);
        moved
    }

    /// The same request as `HEAD`.
    pub fn head(&self) -> Self {
        let mut head = self.clone();
        head.method = Method::HEAD;
        head.body = None;
        head
    }

    /// The same request with `?token=` (the key it is then sent without).
    pub fn with_token(&self, token: &str) -> Self {
        let mut with = self.clone();
        let glue = if self.path.contains('?') { '&' } else { '?' };
        with.path = format!("{}{glue}token={token}", self.path);
        with
    }
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method, self.path)?;
        if let Some(body) = &self.body {
            let text = body.to_string();
            let short: String = text.chars().take(160).collect();
            write!(f, " {short}")?;
        }
        Ok(())
    }
}

/// What came back: the status, the body as text and as JSON (a JSON-RPC
/// message from a server-sent stream: its last one).
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: u16,
    pub text: String,
    pub json: Value,
    pub session: Option<String>,
}

impl Answer {
    /// The JSON-RPC error code, if the answer is a JSON-RPC error.
    pub fn rpc_error(&self) -> Option<i64> {
        self.json["error"]["code"].as_i64()
    }

    /// The `reason` of a `google.rpc.Status` body (the A2A HTTP+JSON binding's errors).
    pub fn status_reason(&self) -> Option<&str> {
        self.json["error"]["details"][0]["reason"].as_str()
    }

    /// Short, for a violation's line.
    pub fn brief(&self) -> String {
        let text: String = self.text.chars().take(300).collect();
        format!("{} {text}", self.status)
    }
}

/// Sends `request` to `base` with `key` (as `x-api-key`) or none.
pub async fn send(base: &str, request: &Request, key: Option<&str>) -> Answer {
    send_within(base, request, key, STREAM_READ).await
}

/// [`send`], reading a streamed answer for up to `within`.
pub async fn send_within(
    base: &str,
    request: &Request,
    key: Option<&str>,
    within: Duration,
) -> Answer {
    let url = format!("{base}{}", request.path);
    let mut builder = client()
        .request(request.method.clone(), &url)
        .header("A2A-Version", "1.0");
    for (name, value) in &request.headers {
        builder = builder.header(*name, value);
    }
    if let Some(key) = key {
        builder = builder.header("x-api-key", key);
    }
    if let Some(body) = &request.body {
        builder = builder.json(body);
    }
    let mut response = match builder.send().await {
        Ok(response) => response,
        Err(e) => {
            return Answer {
                status: 0,
                text: format!("no answer: {e}"),
                json: Value::Null,
                session: None,
            }
        }
    };
    let status = response.status().as_u16();
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut bytes = Vec::new();
    let deadline = tokio::time::Instant::now() + within;
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, response.chunk()).await {
        bytes.extend_from_slice(&chunk);
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let json = json_of(&text);
    Answer {
        status,
        text,
        json,
        session,
    }
}

/// The body as JSON, or the last JSON object of a server-sent stream.
fn json_of(text: &str) -> Value {
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        return value;
    }
    text.lines()
        .rev()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
        .find(Value::is_object)
        .unwrap_or(Value::Null)
}

/// A JSON-RPC request body.
pub fn rpc(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
}

/// Where MCP is served.
pub const MCP: &str = "/runtime/webhooks/mcp";

/// A request on MCP session `session` (none: the handshake's first).
pub fn mcp_request(session: Option<&str>, body: Value) -> Request {
    let mut request =
        Request::post(MCP, body).header("accept", "application/json, text/event-stream");
    if let Some(session) = session {
        request = request
            .header("mcp-session-id", session)
            .header("mcp-protocol-version", "2025-06-18");
    }
    request
}

/// Opens an MCP session with `key`: its id.
pub async fn mcp_open(base: &str, key: &str) -> String {
    let init = mcp_request(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "access-enumeration", "version": "1"}}}),
    );
    let answer = send_within(base, &init, Some(key), Duration::from_secs(10)).await;
    let Some(session) = answer.session.clone() else {
        panic!("MCP initialize gave no session: {}", answer.brief());
    };
    let initialized = mcp_request(
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    );
    let _ = send_within(base, &initialized, Some(key), Duration::from_secs(10)).await;
    session
}

/// A JSON-RPC call of method `method` on MCP session `session`.
pub fn mcp_call(session: &str, method: &str, params: Value) -> Request {
    mcp_request(
        Some(session),
        json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}),
    )
}
