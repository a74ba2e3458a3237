//! A fake model server: OpenAI chat completions at `/v1/chat/completions` and
//! Azure's `/openai/deployments/{deployment}/chat/completions`. It records
//! every request, checks the auth header, and plays scripted replies (text,
//! JSON, tool calls, error statuses with `Retry-After`, delays) before falling
//! back to echoing the last user message. A request with `"stream": true`
//! gets the reply as server-sent `chat.completion.chunk` events, as the real
//! services send them: the text a word at a time, a tool call as its id and
//! name and then its arguments in two pieces, usage last, then `[DONE]`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use futures::StreamExt;
use serde_json::{json, Value};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    Text(String),
    /// A tool call: function name and its arguments object.
    ToolCall(String, Value),
    /// Several tool calls in one message (ids `call_{i}_{name}`).
    ToolCalls(Vec<(String, Value)>),
    /// An error status, with an optional `Retry-After` in seconds.
    Status(u16, Option<u64>),
    /// Wait, then answer with the next reply (or the echo).
    Delay(Duration, Box<Reply>),
    /// Streamed with this pause between chunks (no pause otherwise).
    Paced(Duration, Box<Reply>),
    Echo,
    /// Answers with the content of the last tool result: `tool said: …`.
    ToolResult,
}

/// A request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: Value,
    pub at: Instant,
    /// When it arrived, Unix milliseconds (comparable with the host's times).
    pub at_ms: i64,
}

impl Recorded {
    pub fn messages(&self) -> Vec<Value> {
        self.body["messages"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Contents of the messages, as "role: content".
    pub fn transcript(&self) -> Vec<String> {
        self.messages()
            .iter()
            .map(|m| {
                format!(
                    "{}: {}",
                    m["role"].as_str().unwrap_or(""),
                    m["content"].as_str().unwrap_or("")
                )
            })
            .collect()
    }

    /// The content of the last tool result in the conversation.
    pub fn last_tool_result(&self) -> Option<String> {
        self.messages()
            .iter()
            .rev()
            .find(|m| m["role"] == "tool")
            .and_then(|m| m["content"].as_str())
            .map(str::to_string)
    }

    pub fn last_user_message(&self) -> String {
        self.messages()
            .iter()
            .rev()
            .find(|m| m["role"] == "user")
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_string()
    }
}

/// Chooses a reply from the request, when nothing is scripted.
pub type Responder = Arc<dyn Fn(&Recorded) -> Reply + Send + Sync>;

#[derive(Default)]
struct Shared {
    script: VecDeque<Reply>,
    responder: Option<Responder>,
    requests: Vec<Recorded>,
    expected_auth: Option<(String, String)>,
}

#[derive(Clone)]
pub struct FakeModel {
    shared: Arc<Mutex<Shared>>,
    pub addr: SocketAddr,
}

impl FakeModel {
    pub async fn start() -> Self {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let app = Router::new()
            .route("/v1/chat/completions", post(openai))
            .route(
                "/openai/deployments/{deployment}/chat/completions",
                post(azure),
            )
            // A model endpoint takes long conversations (axum's default is 2 MB).
            .layer(axum::extract::DefaultBodyLimit::max(256 << 20))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake model");
        let addr = listener.local_addr().expect("fake model address");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { shared, addr }
    }

    /// `OPENAI_BASE_URL` for this server.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Answers 401 unless header `name` has exactly `value`.
    pub fn expect_auth(&self, name: &str, value: &str) {
        self.shared.lock().unwrap().expected_auth = Some((name.to_string(), value.to_string()));
    }

    /// Answers each request with what `responder` chooses for it once the
    /// script is empty (instead of the echo): for loads of many concurrent
    /// runs, where a script's order cannot follow the requests'.
    pub fn respond_with(&self, responder: Responder) {
        self.shared.lock().unwrap().responder = Some(responder);
    }

    pub fn push(&self, reply: Reply) {
        self.shared.lock().unwrap().script.push_back(reply);
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.lock().unwrap().requests.clone()
    }

    /// Waits until at least `n` requests arrived.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<Recorded> {
        let deadline = Instant::now() + timeout;
        loop {
            let requests = self.requests();
            if requests.len() >= n {
                return requests;
            }
            assert!(
                Instant::now() < deadline,
                "the fake model got {} requests, expected {n}",
                requests.len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The echo reply: deterministic, and names the message it answers so tests
/// can check which request produced which answer.
pub fn echo_of(message: &str) -> String {
    format!("echo: {message}")
}

async fn openai(
    State(shared): State<Arc<Mutex<Shared>>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    answer(shared, "/v1/chat/completions".into(), query, headers, body).await
}

async fn azure(
    State(shared): State<Arc<Mutex<Shared>>>,
    Path(deployment): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    answer(
        shared,
        format!("/openai/deployments/{deployment}/chat/completions"),
        query,
        headers,
        body,
    )
    .await
}

async fn answer(
    shared: Arc<Mutex<Shared>>,
    path: String,
    query: Option<String>,
    headers: HeaderMap,
    body: Value,
) -> Response {
    let recorded = Recorded {
        path,
        query,
        headers: headers.clone(),
        body,
        at: Instant::now(),
        at_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
    };
    let (authorized, reply) = {
        let mut s = shared.lock().unwrap();
        s.requests.push(recorded.clone());
        let authorized = match &s.expected_auth {
            Some((name, value)) => {
                headers.get(name.as_str()).and_then(|v| v.to_str().ok()) == Some(value.as_str())
            }
            None => true,
        };
        (
            authorized,
            if authorized {
                match s.script.pop_front() {
                    Some(reply) => reply,
                    None => s
                        .responder
                        .as_ref()
                        .map_or(Reply::Echo, |respond| respond(&recorded)),
                }
            } else {
                Reply::Echo
            },
        )
    };
    if !authorized {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": {"message": "Incorrect API key provided"}})),
        )
            .into_response();
    }
    play(reply, &recorded).await
}

async fn play(mut reply: Reply, request: &Recorded) -> Response {
    let mut pace = Duration::ZERO;
    loop {
        match reply {
            Reply::Delay(pause, next) => {
                tokio::time::sleep(pause).await;
                reply = *next;
            }
            Reply::Paced(pause, next) => {
                pace = pause;
                reply = *next;
            }
            _ => break,
        }
    }
    let message = match reply {
        Reply::Text(text) => json!({"role": "assistant", "content": text}),
        Reply::Echo => {
            json!({"role": "assistant", "content": echo_of(&request.last_user_message())})
        }
        Reply::ToolResult => json!({
            "role": "assistant",
            "content": format!("tool said: {}", request.last_tool_result().unwrap_or_default()),
        }),
        Reply::ToolCall(name, arguments) => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": [{"id": format!("call_{name}"), "type": "function",
                            "function": {"name": name, "arguments": arguments.to_string()}}],
        }),
        Reply::ToolCalls(calls) => json!({
            "role": "assistant",
            "content": null,
            "tool_calls": calls.iter().enumerate().map(|(i, (name, arguments))| json!({
                "id": format!("call_{i}_{name}"), "type": "function",
                "function": {"name": name, "arguments": arguments.to_string()}})).collect::<Vec<_>>(),
        }),
        Reply::Status(code, retry_after) => {
            let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = (
                status,
                Json(json!({"error": {"message": format!("scripted {code}")}})),
            )
                .into_response();
            if let Some(seconds) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", seconds.to_string().parse().unwrap());
            }
            return response;
        }
        Reply::Delay(..) | Reply::Paced(..) => unreachable!("unwrapped above"),
    };
    let usage = json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15});
    if request.body["stream"] == json!(true) {
        return streamed(message, usage, pace);
    }
    Json(json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": created(),
        "model": MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }))
    .into_response()
}

/// The model the fake says answered (the real services always say one,
/// and `created`: OpenAI's Python SDK reads both).
const MODEL: &str = "fake-model";

fn created() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The chunks of `message` as a streaming endpoint sends them.
fn chunks_of(message: &Value, usage: Value) -> Vec<Value> {
    let created = created();
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
               "created": created, "model": MODEL,
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut chunks = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    if let Some(text) = message["content"].as_str() {
        for word in text.split_inclusive(' ') {
            chunks.push(chunk(json!({"content": word}), Value::Null));
        }
    }
    if let Some(calls) = message["tool_calls"].as_array() {
        for (index, call) in calls.iter().enumerate() {
            let arguments = call["function"]["arguments"].as_str().unwrap_or_default();
            let half = (0..=arguments.len() / 2)
                .rev()
                .find(|i| arguments.is_char_boundary(*i))
                .unwrap_or(0);
            chunks.push(chunk(
                json!({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": ""}}]}),
                Value::Null,
            ));
            for piece in [&arguments[..half], &arguments[half..]] {
                chunks.push(chunk(
                    json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}),
                    Value::Null,
                ));
            }
        }
    }
    let finish = if message["tool_calls"].is_array() {
        "tool_calls"
    } else {
        "stop"
    };
    chunks.push(chunk(json!({}), json!(finish)));
    chunks.push(
        json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                       "created": created, "model": MODEL, "choices": [], "usage": usage}),
    );
    chunks
}

fn streamed(message: Value, usage: Value, pace: Duration) -> Response {
    use axum::response::sse::{Event, Sse};
    let events = chunks_of(&message, usage)
        .into_iter()
        .map(|c| c.to_string())
        .chain(["[DONE]".to_string()]);
    let stream = futures::stream::iter(events).then(move |data| async move {
        if !pace.is_zero() {
            tokio::time::sleep(pace).await;
        }
        Ok::<_, std::convert::Infallible>(Event::default().data(data))
    });
    Sse::new(stream).into_response()
}
