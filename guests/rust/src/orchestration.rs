//! Orchestrations: durable, straight-line code over agents, activities,
//! timers and events.
//!
//! The host runs an orchestration again from the start after every step and
//! answers each call below from its journal, so the code must reach the
//! outside world only through [`Context`]. Ordinary Rust (`SystemTime::now()`,
//! `HashMap`, random numbers) is safe: the host makes them replay identically.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::bindings::agenthost::host::durable as wit;
use crate::bindings::agenthost::host::types;

type Body = Box<dyn Fn(&Context, &str) -> Result<String, String> + Send + Sync>;

/// A durable orchestration a component offers.
pub struct Orchestration {
    name: String,
    description: String,
    routes: Vec<String>,
    event_routes: Vec<(String, String)>,
    input_schema: Option<fn() -> String>,
    body: Body,
}

impl Orchestration {
    /// An orchestration named `name` running `f`. Its input is deserialized
    /// from the start request's JSON body (`null` when empty); its output is
    /// serialized as the instance's output.
    ///
    /// ```
    /// use agenthost_guest::{Context, Orchestration};
    /// fn greet(ctx: &Context, name: String) -> Result<String, String> {
    ///     let answer = ctx.call_agent("writer", format!("Greet {name}")).wait()?;
    ///     Ok(answer)
    /// }
    /// let orchestration = Orchestration::new("greet", greet).route("greet/run");
    /// ```
    pub fn new<I, O, F>(name: impl Into<String>, f: F) -> Self
    where
        I: DeserializeOwned,
        O: Serialize,
        F: Fn(&Context, I) -> Result<O, String> + Send + Sync + 'static,
    {
        let body: Body = Box::new(move |ctx: &Context, input: &str| {
            let input: I =
                serde_json::from_str(input).map_err(|e| format!("invalid input: {e}"))?;
            let output = f(ctx, input)?;
            serde_json::to_string(&output)
                .map_err(|e| format!("the output could not be serialized: {e}"))
        });
        Self {
            name: name.into(),
            description: String::new(),
            routes: Vec::new(),
            event_routes: Vec::new(),
            input_schema: None,
            body,
        }
    }

    /// Declares the JSON Schema of the input (derived from `T`, usually
    /// the orchestration's own input type): the host then refuses a start
    /// whose input does not match with 400, naming what is wrong, and
    /// shows the schema in `inspect` and `/api/components`.
    ///
    /// ```
    /// use agenthost_guest::{Context, Orchestration};
    /// #[derive(serde::Deserialize, schemars::JsonSchema)]
    /// struct Request { topic: String }
    /// fn write(ctx: &Context, r: Request) -> Result<String, String> {
    ///     Ok(ctx.call_agent("writer", r.topic).wait()?)
    /// }
    /// let orchestration = Orchestration::new("write", write).input_schema::<Request>();
    /// ```
    pub fn input_schema<T: JsonSchema>(mut self) -> Self {
        self.input_schema = Some(|| {
            serde_json::to_string(&schemars::schema_for!(T))
                .unwrap_or_else(|_| String::from("true"))
        });
        self
    }

    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Also start it with `POST /api/{path}`, e.g. `writer/run`.
    pub fn route(mut self, path: impl Into<String>) -> Self {
        self.routes.push(path.into());
        self
    }

    /// `POST /api/{path}` (which must contain `{instanceId}`) raises `event`
    /// on that instance with the request body as payload.
    pub fn event_route(mut self, path: impl Into<String>, event: impl Into<String>) -> Self {
        self.event_routes.push((path.into(), event.into()));
        self
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The declared input schema, as JSON text.
    pub(crate) fn input_schema_text(&self) -> Option<String> {
        self.input_schema.map(|schema| schema())
    }

    pub(crate) fn run(&self, input: &str) -> Result<String, String> {
        (self.body)(&Context { _private: () }, input)
    }

    pub(crate) fn to_wit(&self) -> types::Orchestration {
        types::Orchestration {
            name: self.name.clone(),
            description: self.description.clone(),
            routes: self.routes.clone(),
            event_routes: self
                .event_routes
                .iter()
                .map(|(path, event)| types::EventRoute {
                    path: path.clone(),
                    event: event.clone(),
                })
                .collect(),
        }
    }
}

/// Why a task did not produce a value: it failed, or its result did not
/// decode into the type asked for. Converts into `String` so `?` works in an
/// orchestration returning `Result<_, String>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskError(pub String);

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TaskError {}

impl From<TaskError> for String {
    fn from(e: TaskError) -> Self {
        e.0
    }
}

/// How a task's result text becomes a value: agent answers are plain text,
/// everything else is JSON.
#[derive(Debug, Clone, Copy)]
enum Decode {
    Text,
    Json,
}

/// A scheduled task: an agent call, an activity, a sub-orchestration, a timer
/// or an event wait. Schedule several, then wait for them together.
#[must_use = "a task does nothing until it is awaited"]
pub struct Task<T> {
    id: u32,
    decode: Decode,
    _result: PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> Task<T> {
    fn new(id: u32, decode: Decode) -> Self {
        Self {
            id,
            decode,
            _result: PhantomData,
        }
    }

    /// Suspends the orchestration until the task is done.
    pub fn wait(self) -> Result<T, TaskError> {
        decode(self.decode, wit::await_(self.id))
    }
}

fn decode<T: DeserializeOwned>(
    mode: Decode,
    result: Result<String, String>,
) -> Result<T, TaskError> {
    let text = result.map_err(TaskError)?;
    let decoded = match mode {
        Decode::Text => serde_json::from_value(Value::String(text)),
        Decode::Json => serde_json::from_str(&text),
    };
    decoded.map_err(|e| TaskError(format!("the task's result does not decode: {e}")))
}

/// Anything [`Context::when_any`] can race.
pub trait Pending {
    fn task_id(&self) -> u32;
}

impl<T> Pending for Task<T> {
    fn task_id(&self) -> u32 {
        self.id
    }
}

/// A conversation with an agent that several calls share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session(String);

impl Session {
    pub fn id(&self) -> &str {
        &self.0
    }
}

/// How failed agent calls and activities are retried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub first_delay: Duration,
    pub backoff_coefficient: f64,
    pub max_delay: Duration,
}

impl RetryPolicy {
    /// `max_attempts` in all, waiting `first_delay`, doubling each time, at most a minute.
    pub fn new(max_attempts: u32, first_delay: Duration) -> Self {
        Self {
            max_attempts,
            first_delay,
            backoff_coefficient: 2.0,
            max_delay: Duration::from_secs(60),
        }
    }

    fn to_wit(self) -> wit::RetryPolicy {
        wit::RetryPolicy {
            max_attempts: self.max_attempts,
            first_delay_ms: u64::try_from(self.first_delay.as_millis()).unwrap_or(u64::MAX),
            backoff_coefficient: self.backoff_coefficient,
            max_delay_ms: u64::try_from(self.max_delay.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// A call to an agent, configured before it is scheduled.
pub struct AgentCall {
    agent: String,
    message: String,
    session: Option<String>,
    retry: Option<RetryPolicy>,
}

impl AgentCall {
    /// Continues `session`: the agent sees the earlier exchanges.
    pub fn session(mut self, session: &Session) -> Self {
        self.session = Some(session.0.clone());
        self
    }

    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    fn schedule_with(self, schema: Option<String>, decode: Decode) -> u32 {
        let _ = decode;
        wit::call_agent(
            &self.agent,
            &self.message,
            self.session.as_deref(),
            schema.as_deref(),
            self.retry.map(RetryPolicy::to_wit),
        )
    }

    /// Schedules the call; its result is the agent's answer text.
    pub fn schedule(self) -> Task<String> {
        Task::new(self.schedule_with(None, Decode::Text), Decode::Text)
    }

    /// Schedules the call asking for structured output of type `T` (its JSON
    /// Schema is derived from the type).
    pub fn schedule_as<T: DeserializeOwned + JsonSchema>(self) -> Task<T> {
        let schema = serde_json::to_string(&schemars::schema_for!(T)).ok();
        Task::new(self.schedule_with(schema, Decode::Json), Decode::Json)
    }

    /// Schedules the call and waits for the answer.
    pub fn wait(self) -> Result<String, TaskError> {
        self.schedule().wait()
    }

    /// Schedules the call for structured output and waits for it.
    pub fn wait_as<T: DeserializeOwned + JsonSchema>(self) -> Result<T, TaskError> {
        self.schedule_as::<T>().wait()
    }
}

/// A call to an agent of another host over A2A 1.0, configured before it
/// is scheduled. The host makes the call (the component's `allowed_hosts`
/// must grant the card's host and the agent's endpoint) and journals it
/// like a local agent call: a replay never sends again, and a host that
/// crashed mid-call follows the remote task it had started.
pub struct RemoteAgentCall {
    card_url: String,
    message: String,
    context_id: Option<String>,
    retry: Option<RetryPolicy>,
}

impl RemoteAgentCall {
    /// Continues the remote conversation `context_id` (A2A's `contextId`):
    /// the remote agent sees the earlier exchanges of that context.
    pub fn context(mut self, context_id: impl Into<String>) -> Self {
        self.context_id = Some(context_id.into());
        self
    }

    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Schedules the call; its result is the remote agent's answer text
    /// (its artifacts' parts, a data part as its JSON).
    pub fn schedule(self) -> Task<String> {
        Task::new(
            wit::call_remote_agent(
                &self.card_url,
                &self.message,
                self.context_id.as_deref(),
                self.retry.map(RetryPolicy::to_wit),
            ),
            Decode::Text,
        )
    }

    /// Schedules the call and waits for the answer.
    pub fn wait(self) -> Result<String, TaskError> {
        self.schedule().wait()
    }
}

/// A call to an activity of this component, configured before it is scheduled.
pub struct ActivityCall {
    name: String,
    input: Result<String, String>,
    retry: Option<RetryPolicy>,
}

impl ActivityCall {
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Schedules the activity; its result decodes into `T`.
    pub fn schedule<T: DeserializeOwned>(self) -> Task<T> {
        // An input that cannot serialize is journaled as an invalid-input
        // call, which the activity rejects: the failure surfaces on wait.
        let input = self
            .input
            .unwrap_or_else(|e| format!("{{\"invalid_input\": {:?}}}", e));
        Task::new(
            wit::call_activity(&self.name, &input, self.retry.map(RetryPolicy::to_wit)),
            Decode::Json,
        )
    }

    pub fn wait<T: DeserializeOwned>(self) -> Result<T, TaskError> {
        self.schedule().wait()
    }
}

/// What orchestration code uses to reach the host. Every method is journaled.
pub struct Context {
    _private: (),
}

impl Context {
    /// Asks `agent` for an answer to `message`.
    pub fn call_agent(&self, agent: &str, message: impl Into<String>) -> AgentCall {
        AgentCall {
            agent: agent.to_string(),
            message: message.into(),
            session: None,
            retry: None,
        }
    }

    /// Asks the A2A agent whose card is at `card_url` (e.g.
    /// `https://host/a2a/writer/.well-known/agent-card.json`) for an answer
    /// to `message`.
    pub fn call_remote_agent(&self, card_url: &str, message: impl Into<String>) -> RemoteAgentCall {
        RemoteAgentCall {
            card_url: card_url.to_string(),
            message: message.into(),
            context_id: None,
            retry: None,
        }
    }

    /// Runs activity `name` of this component with `input`.
    pub fn call_activity(&self, name: &str, input: &impl Serialize) -> ActivityCall {
        ActivityCall {
            name: name.to_string(),
            input: serde_json::to_string(input).map_err(|e| e.to_string()),
            retry: None,
        }
    }

    /// Runs orchestration `name` as a child instance.
    pub fn call_orchestration<T: DeserializeOwned>(
        &self,
        name: &str,
        input: &impl Serialize,
    ) -> Task<T> {
        let input = serde_json::to_string(input).unwrap_or_else(|_| "null".into());
        Task::new(wit::call_orchestration(name, &input), Decode::Json)
    }

    /// A durable timer firing `delay` after the current step's time.
    pub fn timer(&self, delay: Duration) -> Task<()> {
        let fire_at = self
            .now_ms()
            .saturating_add(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
        Task::new(wit::start_timer(fire_at), Decode::Json)
    }

    /// Waits for the external event `name`; its payload decodes into `T`.
    pub fn wait_for_event<T: DeserializeOwned>(&self, name: &str) -> Task<T> {
        Task::new(wit::wait_for_event(name), Decode::Json)
    }

    /// Waits for every task; the first failure is returned.
    pub fn when_all<T: DeserializeOwned>(&self, tasks: Vec<Task<T>>) -> Result<Vec<T>, TaskError> {
        let ids: Vec<u32> = tasks.iter().map(|t| t.id).collect();
        let results = wit::await_all(&ids);
        tasks
            .iter()
            .zip(results)
            .map(|(task, result)| decode(task.decode, result))
            .collect()
    }

    /// Waits for the first of `tasks` to finish and returns its index; event
    /// waits and timers that lost are cancelled. Get the winner's value with
    /// its `wait()`, which then returns at once.
    pub fn when_any(&self, tasks: &[&dyn Pending]) -> usize {
        let ids: Vec<u32> = tasks.iter().map(|t| t.task_id()).collect();
        let (index, _) = wit::await_any(&ids);
        index as usize
    }

    /// The current step's time in milliseconds since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        wit::now()
    }

    pub fn new_guid(&self) -> String {
        wit::new_guid()
    }

    /// A new conversation with `agent`, for calls that should share history.
    pub fn new_session(&self, agent: &str) -> Session {
        Session(wit::new_session(agent))
    }

    pub fn instance_id(&self) -> String {
        wit::instance_id()
    }

    /// True while the code re-executes journaled steps (e.g. to skip logging).
    pub fn is_replaying(&self) -> bool {
        wit::is_replaying()
    }

    /// Shown as `customStatus` by the status API.
    pub fn set_custom_status(&self, status: &impl Serialize) {
        wit::set_custom_status(&serde_json::to_string(status).unwrap_or_else(|_| "null".into()));
    }

    /// Restarts the orchestration with `input` and an empty journal once the
    /// current run returns; return right after calling it.
    pub fn continue_as_new(&self, input: &impl Serialize) {
        wit::continue_as_new(&serde_json::to_string(input).unwrap_or_else(|_| "null".into()));
    }
}
