//! The remote backend: OpenAI-compatible and Azure OpenAI chat completions,
//! streamed (server-sent events, text handed on as it arrives), with retries
//! on 429/5xx that honour `Retry-After` as long as nothing was handed on yet.
//! An endpoint that ignores `stream` and answers with one JSON object is
//! read as such.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::credential::Credential;
use super::send_by as gate;
use super::stream::{Assembly, Chunk};
use super::{
    ChatMessage, ChatRequest, ChatResponse, Deltas, ModelError, ModelSettings, SendBy, Usage,
};

/// At most this many attempts per model turn (the first and four retries).
const MAX_ATTEMPTS: usize = 5;
/// A server asking for a longer pause than this is not waited for.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

pub struct RemoteModel {
    http: reqwest::Client,
    endpoint: Endpoint,
    credential: Credential,
}

enum Endpoint {
    OpenAi {
        base_url: String,
        model: String,
    },
    Azure {
        endpoint: String,
        deployment: String,
        api_version: String,
    },
}

/// One failed attempt, with the pause the server asked for, if any.
struct Attempt {
    error: ModelError,
    retry_after: Option<Duration>,
}

impl RemoteModel {
    pub fn new(
        settings: ModelSettings,
        timeout: Duration,
        vars: &HashMap<String, String>,
    ) -> Result<Self, ModelError> {
        let (endpoint, key, key_header, bearer) = match settings {
            ModelSettings::OpenAi {
                base_url,
                api_key,
                model,
            } => (
                Endpoint::OpenAi { base_url, model },
                api_key,
                AUTHORIZATION,
                true,
            ),
            ModelSettings::Azure {
                endpoint,
                deployment,
                api_key,
                api_version,
            } => (
                Endpoint::Azure {
                    endpoint,
                    deployment,
                    api_version,
                },
                api_key,
                HeaderName::from_static("api-key"),
                false,
            ),
            ModelSettings::Offline => {
                return Err(ModelError::BadResponse(
                    "offline settings given to the remote model".into(),
                ))
            }
        };
        let credential =
            Credential::from_vars(vars, key.as_deref(), key_header, bearer).map_err(|e| {
                ModelError::Authentication {
                    tried: "configuration".into(),
                    reason: e.to_string(),
                }
            })?;
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| ModelError::Unreachable {
                url: String::new(),
                reason: e.to_string(),
            })?;
        Ok(Self {
            http,
            endpoint,
            credential,
        })
    }

    /// Obtains a token now when the credential uses tokens, so that a host
    /// that cannot authenticate says so at start.
    pub async fn check_credential(&self) -> Result<(), ModelError> {
        if self.credential.uses_tokens() {
            self.credential.header().await?;
        }
        Ok(())
    }

    pub fn describe(&self) -> String {
        match &self.endpoint {
            Endpoint::OpenAi { base_url, model } => {
                format!(
                    "OpenAI-compatible model {model} at {base_url}, with {}",
                    self.credential.describe()
                )
            }
            Endpoint::Azure {
                endpoint,
                deployment,
                ..
            } => {
                format!(
                    "Azure OpenAI deployment {deployment} at {endpoint}, with {}",
                    self.credential.describe()
                )
            }
        }
    }

    fn url_and_body(&self, request: &ChatRequest<'_>) -> (String, Value) {
        let mut body = Map::new();
        body.insert("messages".into(), json!(request.messages));
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request.tools.iter().map(|t| t.to_openai()).collect();
            body.insert("tools".into(), Value::Array(tools));
        }
        if let Some(format) = request.response_format {
            body.insert("response_format".into(), format.clone());
        }
        if let Some(temperature) = request.temperature {
            body.insert("temperature".into(), json!(as_written(temperature)));
        }
        if let Some(tokens) = request.max_output_tokens {
            body.insert("max_tokens".into(), json!(tokens));
        }
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
        let url = match &self.endpoint {
            Endpoint::OpenAi { base_url, model } => {
                let model = request.model.unwrap_or(model);
                body.insert("model".into(), json!(model));
                format!("{base_url}/chat/completions")
            }
            Endpoint::Azure {
                endpoint,
                deployment,
                api_version,
            } => {
                let deployment = request.model.unwrap_or(deployment);
                format!("{endpoint}/openai/deployments/{deployment}/chat/completions?api-version={api_version}")
            }
        };
        (url, Value::Object(body))
    }

    pub async fn complete(
        &self,
        request: &ChatRequest<'_>,
        deltas: &Deltas<'_>,
    ) -> Result<ChatResponse, ModelError> {
        let (url, body) = self.url_and_body(request);
        let timeout = request.timeout;
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(250))
            .with_max_delay(Duration::from_secs(10))
            .with_max_times(MAX_ATTEMPTS - 1)
            .with_jitter();
        let mut attempts = 0usize;
        // Text already handed on cannot be taken back: from then on a
        // failure is final.
        let handed_on = AtomicBool::new(false);
        let result = (|| {
            attempts += 1;
            self.attempt(&url, &body, timeout, request.send_by, deltas, &handed_on)
        })
        .retry(backoff)
        .when(|a: &Attempt| !handed_on.load(Ordering::Relaxed) && is_retryable(&a.error))
        // Retry-After replaces the computed pause, but never extends the number of attempts.
        .adjust(|a: &Attempt, delay| delay.map(|d| a.retry_after.unwrap_or(d)))
        .notify(|a: &Attempt, delay| {
            tracing::warn!(error = %a.error, retry_in = ?delay, "model call failed, retrying");
        })
        .await;
        result.map_err(|a| match a.error {
            ModelError::Status { status: 429, .. } => ModelError::RateLimited { attempts },
            other => other,
        })
    }

    async fn attempt(
        &self,
        url: &str,
        body: &Value,
        timeout: Option<Duration>,
        send_by: Option<&SendBy>,
        deltas: &Deltas<'_>,
        handed_on: &AtomicBool,
    ) -> Result<ChatResponse, Attempt> {
        let fail = |error| Attempt {
            error,
            retry_after: None,
        };
        // Each attempt, a retry too, gets the moment it must leave by.
        let send_by = match send_by {
            None => None,
            Some(check) => Some(check().await.ok_or_else(|| fail(ModelError::NotSent))?),
        };
        let late = |send_by: i64| {
            let late_ms = gate::now_ms() - send_by;
            (late_ms > 0).then_some(ModelError::Late { late_ms })
        };
        let mut request = self.http.post(url);
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        if let Some((name, value)) = self.credential.header().await.map_err(fail)? {
            request = request.header(name, value);
        }
        let lateness = gate::Lateness::default();
        request = match send_by {
            None => request.json(body),
            Some(send_by) => {
                // A retry after a pause (or a token fetched slowly) may
                // already be past it: not even begun.
                if let Some(error) = late(send_by) {
                    return Err(fail(error));
                }
                let bytes = serde_json::to_vec(body)
                    .map_err(|e| fail(ModelError::BadResponse(e.to_string())))?;
                request
                    .header(CONTENT_TYPE, "application/json")
                    .header(CONTENT_LENGTH, bytes.len())
                    .body(gate::gated(bytes, send_by, lateness.clone()))
            }
        };
        let response = request.send().await.map_err(|e| {
            if lateness.get() > 0 {
                return fail(ModelError::Late {
                    late_ms: lateness.get(),
                });
            }
            fail(ModelError::Unreachable {
                url: redact_query(url),
                reason: error_chain(&e),
            })
        })?;
        let status = response.status();
        if status.is_success() {
            let streamed = response
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
            if streamed {
                return read_stream(response, deltas, handed_on).await.map_err(fail);
            }
            let parsed: WireResponse = response
                .json()
                .await
                .map_err(|e| fail(ModelError::BadResponse(error_chain(&e))))?;
            let answer = parsed.into_response().map_err(fail)?;
            if let Some(text) = answer.message.content.as_deref().filter(|t| !t.is_empty()) {
                handed_on.store(true, Ordering::Relaxed);
                deltas(text);
            }
            return Ok(answer);
        }
        let retry_after = retry_after(response.headers());
        let body = response.text().await.unwrap_or_default();
        let body: String = body.chars().take(500).collect();
        let code = status.as_u16();
        let error = if code == 401 || code == 403 {
            ModelError::Unauthorized { status: code, body }
        } else {
            ModelError::Status { status: code, body }
        };
        Err(Attempt { error, retry_after })
    }
}

/// Reads `chat.completion.chunk` events until `[DONE]` (or the end of the
/// body), handing each piece of text on as it arrives.
async fn read_stream(
    response: reqwest::Response,
    deltas: &Deltas<'_>,
    handed_on: &AtomicBool,
) -> Result<ChatResponse, ModelError> {
    let mut events = response.bytes_stream().eventsource();
    let mut assembly = Assembly::default();
    while let Some(event) = events.next().await {
        let event = event
            .map_err(|e| ModelError::BadResponse(format!("the model's stream broke off: {e}")))?;
        if event.data.trim() == "[DONE]" {
            break;
        }
        if event.data.trim().is_empty() {
            continue;
        }
        let chunk: Chunk = serde_json::from_str(&event.data).map_err(|e| {
            ModelError::BadResponse(format!("a chunk of the model's stream is not valid: {e}"))
        })?;
        if let Some(text) = assembly.take(chunk) {
            handed_on.store(true, Ordering::Relaxed);
            deltas(&text);
        }
    }
    assembly.finish()
}

fn is_retryable(error: &ModelError) -> bool {
    match error {
        ModelError::Unreachable { .. } => true,
        ModelError::Status { status, .. } => *status == 429 || *status >= 500,
        _ => false,
    }
}

/// `retry-after-ms` (Azure) or `Retry-After` in seconds; HTTP dates are ignored
/// and the exponential backoff applies instead.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let read = |name: &str| headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok();
    let delay = read("retry-after-ms")
        .map(|ms| ms / 1000.0)
        .or_else(|| read("retry-after"))?;
    (delay.is_finite() && delay >= 0.0).then(|| Duration::from_secs_f64(delay).min(MAX_RETRY_AFTER))
}

/// reqwest's top-level error says little ("error sending request"); the cause
/// (connection refused, timeout) is what an operator needs.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn redact_query(url: &str) -> String {
    url.split('?').next().unwrap_or(url).to_string()
}

#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    choices: Vec<WireChoice>,
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
struct WireChoice {
    message: ChatMessage,
}

impl WireResponse {
    fn into_response(self) -> Result<ChatResponse, ModelError> {
        let choice = self
            .choices
            .into_iter()
            .next()
            .ok_or_else(|| ModelError::BadResponse("the response has no choices".into()))?;
        Ok(ChatResponse {
            message: choice.message,
            usage: self.usage.unwrap_or_default(),
        })
    }
}

/// The `f64` an operator wrote as this `f32`: `0.2` stays `0.2` on the wire
/// (widening the `f32` would send `0.20000000298023224`).
fn as_written(value: f32) -> f64 {
    value
        .to_string()
        .parse()
        .unwrap_or_else(|_| f64::from(value))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_temperature_goes_on_the_wire_as_it_was_written() {
        assert_eq!(super::as_written(0.2), 0.2);
        assert_eq!(super::as_written(1.0), 1.0);
        assert_eq!(super::as_written(0.7), 0.7);
    }

    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn retry_after_prefers_milliseconds_and_caps_long_pauses() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("1500"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(1500)));
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("86400"));
        assert_eq!(retry_after(&h), Some(MAX_RETRY_AFTER));
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn only_transient_failures_are_retried() {
        assert!(is_retryable(&ModelError::Status {
            status: 429,
            body: String::new()
        }));
        assert!(is_retryable(&ModelError::Status {
            status: 503,
            body: String::new()
        }));
        assert!(!is_retryable(&ModelError::Status {
            status: 400,
            body: String::new()
        }));
        assert!(!is_retryable(&ModelError::Unauthorized {
            status: 401,
            body: String::new()
        }));
    }

    /// A server on loopback that reads nothing until `stall` has passed,
    /// then reads one request, to its declared length or to the end of the
    /// connection: the body's bytes it got, and the length declared.
    async fn stalling_server(stall: Duration) -> (String, tokio::task::JoinHandle<(usize, usize)>) {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            tokio::time::sleep(stall).await;
            let mut got = Vec::new();
            let mut buffer = vec![0u8; 1 << 16];
            let mut framing: Option<(usize, usize)> = None;
            loop {
                let n = socket.read(&mut buffer).await.unwrap_or(0);
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buffer[..n]);
                if framing.is_none() {
                    if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                        let declared = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length: "))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(usize::MAX);
                        framing = Some((end + 4, declared));
                    }
                }
                if let Some((start, declared)) = framing {
                    if got.len() - start >= declared {
                        break;
                    }
                }
            }
            let (start, declared) = framing.unwrap();
            (got.len() - start, declared)
        });
        (base, server)
    }

    fn remote(base: &str) -> RemoteModel {
        let settings = ModelSettings::OpenAi {
            base_url: base.into(),
            api_key: Some("k".into()),
            model: "m".into(),
        };
        RemoteModel::new(settings, Duration::from_secs(30), &HashMap::new()).unwrap()
    }

    fn request<'a>(messages: &'a [ChatMessage], send_by: &'a SendBy) -> ChatRequest<'a> {
        ChatRequest {
            model: None,
            messages,
            tools: &[],
            response_format: None,
            temperature: None,
            max_output_tokens: None,
            timeout: None,
            send_by: Some(send_by),
        }
    }

    /// A send-by check that always answers `moment`.
    fn at(moment: i64) -> impl Fn() -> futures::future::BoxFuture<'static, Option<i64>> {
        move || Box::pin(async move { Some(moment) })
    }

    #[tokio::test]
    async fn a_request_that_cannot_leave_whole_before_its_send_by_moment_is_cut_short() {
        // 32 MiB cannot sit in loopback's socket buffers: the send is still
        // under way when the moment passes, as for a host paused mid-send.
        let (base, server) = stalling_server(Duration::from_millis(800)).await;
        let messages = [ChatMessage::user("x".repeat(32 << 20))];
        let send_by = at(gate::now_ms() + 300);
        let error = remote(&base)
            .complete(&request(&messages, &send_by), &|_| {})
            .await
            .unwrap_err();
        assert!(
            matches!(error, ModelError::Late { late_ms } if late_ms > 0),
            "{error}"
        );
        let (got, declared) = server.await.unwrap();
        assert!(
            got < declared,
            "the server got the whole body: {got} of {declared} bytes"
        );
    }

    #[tokio::test]
    async fn a_request_past_its_send_by_moment_is_not_begun_and_one_in_time_arrives_whole() {
        let (base, server) = stalling_server(Duration::ZERO).await;
        let messages = [ChatMessage::user("hello")];
        let past = at(gate::now_ms() - 1);
        let error = remote(&base)
            .complete(&request(&messages, &past), &|_| {})
            .await
            .unwrap_err();
        assert!(matches!(error, ModelError::Late { .. }), "{error}");
        // No connection was made for it: the next one is the one in time.
        let model = remote(&base);
        let asked = tokio::spawn(async move {
            let messages = [ChatMessage::user("hello")];
            let later = at(gate::now_ms() + 60_000);
            let _ = model.complete(&request(&messages, &later), &|_| {}).await;
        });
        let (got, declared) = tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .unwrap()
            .unwrap();
        asked.abort();
        assert_eq!(got, declared, "the request in time arrived whole");
    }
}
