//! A client of a running host: run agents (one session continues one
//! conversation) and start, inspect, signal and wait for orchestrations.
//! It speaks the host's public HTTP API, so it works against any host
//! serving the task hub (`serve` or `serve --no-worker`), and it is what
//! `agenthost client …` runs.
//!
//! ```no_run
//! use std::time::Duration;
//! use agenthost::client::Client;
//!
//! # async fn example() -> Result<(), agenthost::client::ClientError> {
//! let client = Client::new("http://127.0.0.1:7071")?;
//! let first = client.run_agent("writer", "Write about tea.", Some("s-1")).await?;
//! let second = client.run_agent("writer", "Shorter, please.", Some("s-1")).await?;
//! println!("{} / {}", first.text, second.text);
//!
//! let id = client
//!     .start("approval", Some(serde_json::json!({"topic": "tea"})), None)
//!     .await?;
//! client.raise(&id, "approval", Some(serde_json::json!({"approved": true}))).await?;
//! let done = client.wait(&id, Duration::from_secs(60)).await?;
//! println!("{}: {:?}", done.runtime_status, done.serialized_output);
//! # Ok(())
//! # }
//! ```

use std::time::{Duration, Instant};

use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;

const INSTANCES: &str = "/runtime/webhooks/durabletask/instances";

/// What a path segment must not hold as it is: RFC 3986's delimiters and
/// what is not printable.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');
const THREAD_HEADER: &str = "x-ms-thread-id";

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("'{0}' is not a host URL (expected http://HOST:PORT)")]
    BadEndpoint(String),
    #[error("cannot reach the host at {endpoint}: {source}")]
    Unreachable {
        endpoint: String,
        source: reqwest::Error,
    },
    /// The host answered with an error; `message` is what it said.
    #[error("the host answered {status}: {message}")]
    Refused { status: u16, message: String },
    #[error("instance '{0}' does not exist")]
    NoSuchInstance(String),
    #[error("instance '{id}' is still {status} after {waited:?}")]
    Timeout {
        id: String,
        status: String,
        waited: Duration,
    },
    #[error("unexpected answer from the host: {0}")]
    Protocol(String),
}

/// An agent's answer.
#[derive(Debug, Clone, Serialize)]
pub struct AgentAnswer {
    pub text: String,
    /// The session the run belongs to; pass it again to continue.
    pub session_id: String,
}

/// An orchestration instance, with the field names the Durable Task SDKs use.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceStatus {
    pub instance_id: String,
    pub name: String,
    /// `Pending`, `Running`, `Completed`, `Failed`, `Terminated`, `Suspended`…
    pub runtime_status: String,
    /// JSON text, as the SDKs' `serialized_*` fields.
    pub serialized_input: Option<String>,
    pub serialized_output: Option<String>,
    pub serialized_custom_status: Option<String>,
    pub created_at: String,
    pub last_updated_at: String,
}

impl InstanceStatus {
    pub fn is_finished(&self) -> bool {
        matches!(
            self.runtime_status.as_str(),
            "Completed" | "Failed" | "Terminated"
        )
    }

    fn from_host(body: &Value) -> Result<Self, ClientError> {
        let text = |key: &str| {
            body[key]
                .as_str()
                .map(str::to_string)
                .ok_or_else(|| ClientError::Protocol(format!("no '{key}' in {body}")))
        };
        let serialized = |key: &str| match &body[key] {
            Value::Null => None,
            value => Some(value.to_string()),
        };
        Ok(Self {
            instance_id: text("instanceId")?,
            name: text("name")?,
            runtime_status: text("runtimeStatus")?,
            serialized_input: serialized("input"),
            serialized_output: serialized("output"),
            serialized_custom_status: serialized("customStatus"),
            created_at: text("createdTime")?,
            last_updated_at: text("lastUpdatedTime")?,
        })
    }
}

/// An agent run as the host shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunInfo {
    pub correlation_id: String,
    pub agent: String,
    pub session_id: String,
    /// `pending`, `awaiting_approval`, `completed`, `failed` or `canceled`.
    pub status: String,
    #[serde(default)]
    pub response: Option<Value>,
    #[serde(default)]
    pub error: Option<String>,
    /// A cancel request waits for the run's next step.
    #[serde(default)]
    pub cancel_requested: bool,
}

/// A page of an agent's runs, newest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunsPage {
    pub runs: Vec<RunInfo>,
    /// The `after` of the next page; `None` on the last one.
    #[serde(default)]
    pub next: Option<String>,
}

/// Which of an agent's runs [`Client::runs`] lists.
#[derive(Debug, Clone, Default)]
pub struct RunsQuery<'a> {
    pub session_id: Option<&'a str>,
    pub status: Option<&'a str>,
    pub limit: Option<usize>,
    pub after: Option<&'a str>,
}

/// A client of one host (its base URL).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    poll: Duration,
    key: Option<Key>,
}

/// An endpoint key; never printed.
#[derive(Clone)]
struct Key(String);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(…)")
    }
}

impl Client {
    /// A client of the host at `endpoint` (e.g. `http://127.0.0.1:7071`).
    pub fn new(endpoint: &str) -> Result<Self, ClientError> {
        let base = endpoint.trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ClientError::BadEndpoint(endpoint.to_string()));
        }
        Ok(Self {
            http: reqwest::Client::new(),
            base,
            poll: Duration::from_millis(200),
            key: None,
        })
    }

    /// Sends `key` (an endpoint key of the host: `invoke` or `admin`) with
    /// every request, as `Authorization: Bearer`.
    pub fn with_key(mut self, key: &str) -> Self {
        self.key = Some(Key(key.to_string())).filter(|k| !k.0.is_empty());
        self
    }

    /// Runs agent `name` on `message`, in `session` when given (a new one
    /// otherwise), and waits for its answer.
    pub async fn run_agent(
        &self,
        name: &str,
        message: &str,
        session: Option<&str>,
    ) -> Result<AgentAnswer, ClientError> {
        let mut body = serde_json::json!({ "message": message });
        if let Some(session) = session {
            body["thread_id"] = Value::String(session.to_string());
        }
        let response = self
            .send(
                self.http
                    .post(self.at(&["api", "agents", name, "run"]))
                    .json(&body),
            )
            .await?;
        match response.status() {
            StatusCode::OK => {
                let session_id = response
                    .headers()
                    .get(THREAD_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string();
                let text = response.text().await.map_err(|e| self.unreachable(e))?;
                Ok(AgentAnswer { text, session_id })
            }
            // Still running past the host's wait: follow the run.
            StatusCode::ACCEPTED => {
                let accepted: Value = response.json().await.map_err(|e| self.unreachable(e))?;
                let correlation = accepted["correlation_id"]
                    .as_str()
                    .ok_or_else(|| ClientError::Protocol(accepted.to_string()))?;
                self.follow_run(name, correlation).await
            }
            _ => Err(refused(response).await),
        }
    }

    async fn follow_run(&self, name: &str, correlation: &str) -> Result<AgentAnswer, ClientError> {
        let url = self.at(&["api", "agents", name, "runs", correlation]);
        loop {
            let response = self.send(self.http.get(&url)).await?;
            if !response.status().is_success() {
                return Err(refused(response).await);
            }
            let run: Value = response.json().await.map_err(|e| self.unreachable(e))?;
            let session_id = run["thread_id"].as_str().unwrap_or_default().to_string();
            match run["status"].as_str() {
                Some("completed") => {
                    let text = match &run["response"] {
                        Value::String(text) => text.clone(),
                        other => other.to_string(),
                    };
                    return Ok(AgentAnswer { text, session_id });
                }
                Some("failed") => {
                    return Err(ClientError::Refused {
                        status: 200,
                        message: run["error"]
                            .as_str()
                            .unwrap_or("the run failed")
                            .to_string(),
                    })
                }
                _ => tokio::time::sleep(self.poll).await,
            }
        }
    }

    /// Starts orchestration `name`; returns the instance id.
    pub async fn start(
        &self,
        name: &str,
        input: Option<Value>,
        id: Option<&str>,
    ) -> Result<String, ClientError> {
        let url = match id {
            Some(id) => self.at(&["api", "orchestrators", name, id]),
            None => self.at(&["api", "orchestrators", name]),
        };
        let request = self.http.post(url);
        let request = match input {
            Some(input) => request.json(&input),
            None => request,
        };
        let response = self.send(request).await?;
        if response.status() != StatusCode::ACCEPTED {
            return Err(refused(response).await);
        }
        let body: Value = response.json().await.map_err(|e| self.unreachable(e))?;
        body["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| ClientError::Protocol(body.to_string()))
    }

    /// The instance's status, input included; `None` if there is no such instance.
    pub async fn status(&self, id: &str) -> Result<Option<InstanceStatus>, ClientError> {
        let url = format!("{}?showInput=true", self.instance(&[id]));
        let response = self.send(self.http.get(url)).await?;
        match response.status() {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => {
                let body: Value = response.json().await.map_err(|e| self.unreachable(e))?;
                InstanceStatus::from_host(&body).map(Some)
            }
            _ => Err(refused(response).await),
        }
    }

    /// Raises event `event` (with `data` as its payload) at the instance.
    pub async fn raise(
        &self,
        id: &str,
        event: &str,
        data: Option<Value>,
    ) -> Result<(), ClientError> {
        let url = self.instance(&[id, "raiseEvent", event]);
        let request = self.http.post(url).json(&data.unwrap_or(Value::Null));
        self.expect_success(request, id).await
    }

    pub async fn terminate(&self, id: &str, reason: &str) -> Result<(), ClientError> {
        let url = self.instance(&[id, "terminate"]);
        let request = self.http.post(url).query(&[("reason", reason)]);
        self.expect_success(request, id).await
    }

    /// Waits until the instance finishes, at most `timeout`.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<InstanceStatus, ClientError> {
        let started = Instant::now();
        loop {
            let status = self
                .status(id)
                .await?
                .ok_or_else(|| ClientError::NoSuchInstance(id.to_string()))?;
            if status.is_finished() {
                return Ok(status);
            }
            if started.elapsed() >= timeout {
                return Err(ClientError::Timeout {
                    id: id.to_string(),
                    status: status.runtime_status,
                    waited: timeout,
                });
            }
            tokio::time::sleep(self.poll.min(timeout.saturating_sub(started.elapsed()))).await;
        }
    }

    /// Asks run `correlation_id` of `agent` to stop: the run as it stands
    /// after the request (`canceled`, or `cancel_requested` while it
    /// finishes a tool call); refused (409) when it had already ended.
    pub async fn cancel_run(
        &self,
        agent: &str,
        correlation_id: &str,
    ) -> Result<RunInfo, ClientError> {
        let url = self.at(&["api", "agents", agent, "runs", correlation_id, "cancel"]);
        let response = self.send(self.http.post(url)).await?;
        if !response.status().is_success() {
            return Err(refused(response).await);
        }
        response.json().await.map_err(|e| self.unreachable(e))
    }

    /// A page of `agent`'s runs, newest first (the admin key's route).
    pub async fn runs(&self, agent: &str, query: &RunsQuery<'_>) -> Result<RunsPage, ClientError> {
        let mut params: Vec<(&str, String)> = Vec::new();
        if let Some(session) = query.session_id {
            params.push(("sessionId", session.to_string()));
        }
        if let Some(status) = query.status {
            params.push(("status", status.to_string()));
        }
        if let Some(limit) = query.limit {
            params.push(("limit", limit.to_string()));
        }
        if let Some(after) = query.after {
            params.push(("after", after.to_string()));
        }
        let url = self.at(&["api", "agents", agent, "runs"]);
        let response = self.send(self.http.get(url).query(&params)).await?;
        if !response.status().is_success() {
            return Err(refused(response).await);
        }
        response.json().await.map_err(|e| self.unreachable(e))
    }

    /// Every instance of the hub, oldest first.
    pub async fn list(&self) -> Result<Vec<InstanceStatus>, ClientError> {
        let mut all = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut request = self.http.get(self.url(INSTANCES));
            if let Some(token) = &token {
                request = request.header("x-ms-continuation-token", token);
            }
            let response = self.send(request).await?;
            if !response.status().is_success() {
                return Err(refused(response).await);
            }
            token = response
                .headers()
                .get("x-ms-continuation-token")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let page: Vec<Value> = response.json().await.map_err(|e| self.unreachable(e))?;
            for body in &page {
                all.push(InstanceStatus::from_host(body)?);
            }
            if token.is_none() || page.is_empty() {
                return Ok(all);
            }
        }
    }

    async fn expect_success(
        &self,
        request: reqwest::RequestBuilder,
        id: &str,
    ) -> Result<(), ClientError> {
        let response = self.send(request).await?;
        match response.status() {
            StatusCode::NOT_FOUND => Err(ClientError::NoSuchInstance(id.to_string())),
            status if status.is_success() => Ok(()),
            _ => Err(refused(response).await),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The URL of `segments` under an instance's management route.
    fn instance(&self, segments: &[&str]) -> String {
        let mut all = INSTANCES
            .trim_start_matches('/')
            .split('/')
            .collect::<Vec<_>>();
        all.extend_from_slice(segments);
        self.at(&all)
    }

    /// The URL of `segments` under the host, each percent-encoded: a name
    /// or an id may hold `/`, `?`, `#` or `%` (instance ids are the
    /// caller's, and an orchestration's agent runs carry them).
    fn at(&self, segments: &[&str]) -> String {
        let encoded: Vec<String> = segments
            .iter()
            .map(|s| utf8_percent_encode(s, SEGMENT).to_string())
            .collect();
        format!("{}/{}", self.base, encoded.join("/"))
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ClientError> {
        let request = match &self.key {
            Some(key) => request.bearer_auth(&key.0),
            None => request,
        };
        request.send().await.map_err(|e| self.unreachable(e))
    }

    fn unreachable(&self, source: reqwest::Error) -> ClientError {
        ClientError::Unreachable {
            endpoint: self.base.clone(),
            source,
        }
    }
}

/// The host's error answer: the `error` of its JSON body when it sent one.
async fn refused(response: reqwest::Response) -> ClientError {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    let message = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_string))
        .unwrap_or(text);
    ClientError::Refused { status, message }
}
