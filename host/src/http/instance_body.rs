//! The bodies of the management API's answers, as types: one place says what
//! a caller gets, in the Durable Functions shapes, with one time format
//! (RFC 3339, UTC, milliseconds).

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Serialize, Serializer};
use serde_json::Value;
use utoipa::ToSchema;

use crate::core::journal::{Call, Entry, Event};
use crate::durable::InstanceRecord;

pub(super) const PREFIX: &str = "/runtime/webhooks/durabletask/instances";

/// Milliseconds since the epoch, written as `2026-01-01T00:00:00.000Z`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timestamp(pub i64);

impl utoipa::PartialSchema for Timestamp {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .into()
    }
}

impl ToSchema for Timestamp {}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match DateTime::<Utc>::from_timestamp_millis(self.0) {
            Some(t) => serializer.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Millis, true)),
            None => serializer.serialize_none(),
        }
    }
}

/// An event accepted for an instance through a declared route.
#[derive(Debug, Serialize, ToSchema)]
pub(super) struct EventAccepted<'a> {
    pub id: &'a str,
    pub event: &'a str,
    pub status: &'static str,
}

/// The management URLs of one instance (the answer to a start). When the
/// host has keys each carries the instance's token, which opens these URLs
/// of this instance alone: the caller who started it (with an invoke key, say)
/// follows and manages it without an admin key.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct InstanceUrls {
    pub id: String,
    pub status_query_get_uri: String,
    pub send_event_post_uri: String,
    pub terminate_post_uri: String,
    pub suspend_post_uri: String,
    pub resume_post_uri: String,
    pub purge_history_delete_uri: String,
}

impl InstanceUrls {
    /// `base` is `scheme://host` of the request and the mount the URLs go
    /// under (`front_routes::url_prefix`); `token` the instance's; `hub`
    /// its task hub when it is not the host's own (as Durable Functions'
    /// URLs carry `taskHub=`).
    pub fn new(base: &str, id: &str, token: Option<&str>, hub: Option<&str>) -> Self {
        let instance = format!("{base}{PREFIX}/{}", urlencode(id));
        let query: Vec<String> = hub
            .map(|hub| format!("taskHub={}", urlencode(hub)))
            .into_iter()
            .chain(token.map(|token| format!("token={token}")))
            .collect();
        let (alone, after) = if query.is_empty() {
            (String::new(), String::new())
        } else {
            let query = query.join("&");
            (format!("?{query}"), format!("&{query}"))
        };
        Self {
            id: id.to_string(),
            send_event_post_uri: format!("{instance}/raiseEvent/{{eventName}}{alone}"),
            terminate_post_uri: format!("{instance}/terminate?reason={{text}}{after}"),
            suspend_post_uri: format!("{instance}/suspend?reason={{text}}{after}"),
            resume_post_uri: format!("{instance}/resume?reason={{text}}{after}"),
            purge_history_delete_uri: format!("{instance}{alone}"),
            status_query_get_uri: format!("{instance}{alone}"),
        }
    }
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An instance's status.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct InstanceStatus {
    pub name: String,
    pub instance_id: String,
    pub runtime_status: &'static str,
    pub custom_status: Value,
    pub output: Value,
    pub created_time: Timestamp,
    pub last_updated_time: Timestamp,
    pub component_digest: String,
    /// When an instance started for later runs its first episode (the
    /// Durable Task protocol's `scheduledStartTimestamp`); absent for one
    /// started at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduled_start_time: Option<Timestamp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input: Option<Value>,
    /// What the instance waits for that this host lacks: a Durable Task
    /// SDK worker that runs its orchestration (absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_events: Option<Vec<HistoryEvent>>,
    /// The agent runs of the current execution, with their streams (shown
    /// with the history).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent_runs: Option<Vec<AgentRunRef>>,
}

/// An agent call of an instance, and where to follow its answer.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct AgentRunRef {
    pub agent: String,
    pub correlation_id: String,
    #[schema(value_type = super::schemas::RunStatusSchema)]
    pub status: crate::runs::RunStatus,
    pub stream_url: String,
    /// Tool calls the run waits for a human to decide on.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<super::schemas::PendingCallSchema>)]
    pub pending_approvals: Vec<crate::runs::PendingCall>,
}

impl AgentRunRef {
    /// `stream_token`: the run's, so that its stream opens without a key.
    pub fn new(
        run: &crate::runs::RunRecord,
        pending: Vec<crate::runs::PendingCall>,
        stream_token: Option<&str>,
    ) -> Self {
        let status = if pending.is_empty() {
            run.status
        } else {
            crate::runs::RunStatus::AwaitingApproval
        };
        Self {
            agent: run.agent.clone(),
            correlation_id: run.correlation_id.clone(),
            status,
            pending_approvals: pending,
            stream_url: format!(
                "/api/agents/{}/runs/{}/stream{}",
                run.agent,
                urlencode(&run.correlation_id),
                stream_token.map_or_else(String::new, |t| format!("?token={t}"))
            ),
        }
    }
}

impl InstanceStatus {
    pub fn new(instance: &InstanceRecord, show_input: bool) -> Self {
        Self {
            name: instance.name.clone(),
            instance_id: instance.id.clone(),
            runtime_status: instance.status.as_str(),
            custom_status: parse_json(instance.custom_status.as_deref()),
            output: parse_json(instance.output.as_deref()),
            created_time: Timestamp(instance.created_at),
            last_updated_time: Timestamp(instance.updated_at),
            component_digest: instance.component_digest.clone(),
            scheduled_start_time: instance.start_at.map(Timestamp),
            input: show_input.then(|| parse_json(Some(&instance.input))),
            waiting_for: None,
            history_events: None,
            agent_runs: None,
        }
    }
}

/// A journal entry as history: the call's or event's own fields (tagged
/// `call` or `event`) and when it was recorded.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(super) struct HistoryEvent {
    /// The call's or event's own fields, tagged `call` or `event`.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub entry: HistoryEntry,
    pub timestamp: Timestamp,
}

#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(super) enum HistoryEntry {
    Call(Call),
    Event(Event),
}

impl HistoryEvent {
    pub fn new(entry: Entry, at: i64) -> Self {
        let entry = match entry {
            Entry::Call(call) => HistoryEntry::Call(call),
            Entry::Event(event) => HistoryEntry::Event(event),
        };
        Self {
            entry,
            timestamp: Timestamp(at),
        }
    }
}

/// The answer to a purge.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(super) struct Purged {
    pub instances_deleted: u64,
    /// Set when finished instances may remain: a purge of many works in
    /// bounded time and the caller asks again for the rest.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub more: bool,
}

/// Stored payloads are JSON text, but for a Durable Task SDK's own
/// payloads, which are its text as sent (a large-payload store's token,
/// say): one that is not JSON is shown as a string, not lost.
fn parse_json(text: Option<&str>) -> Value {
    text.map_or(Value::Null, |t| {
        serde_json::from_str(t).unwrap_or_else(|_| Value::String(t.to_string()))
    })
}

/// A declared route's 202: an instance started, or an event accepted.
#[allow(dead_code)]
#[derive(ToSchema)]
#[serde(untagged)]
pub enum RouteAccepted<'a> {
    Started(InstanceUrls),
    Event(EventAccepted<'a>),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_time_format_and_escaped_ids() -> Result<(), serde_json::Error> {
        assert_eq!(
            serde_json::to_value(Timestamp(1_700_000_000_123))?,
            "2023-11-14T22:13:20.123Z"
        );
        let urls = serde_json::to_value(InstanceUrls::new("http://h", "a b:c", None, None))?;
        assert_eq!(
            urls["statusQueryGetUri"],
            "http://h/runtime/webhooks/durabletask/instances/a%20b:c"
        );
        assert_eq!(
            urls["sendEventPostUri"],
            "http://h/runtime/webhooks/durabletask/instances/a%20b:c/raiseEvent/{eventName}"
        );
        let urls = serde_json::to_value(InstanceUrls::new("http://h", "i", Some("ab12"), None))?;
        let instance = "http://h/runtime/webhooks/durabletask/instances/i";
        assert_eq!(urls["statusQueryGetUri"], format!("{instance}?token=ab12"));
        assert_eq!(
            urls["purgeHistoryDeleteUri"],
            format!("{instance}?token=ab12")
        );
        assert_eq!(
            urls["sendEventPostUri"],
            format!("{instance}/raiseEvent/{{eventName}}?token=ab12")
        );
        assert_eq!(
            urls["terminatePostUri"],
            format!("{instance}/terminate?reason={{text}}&token=ab12")
        );
        let event = HistoryEvent::new(Entry::Event(Event::TimerFired { task: 3 }), 0);
        let event = serde_json::to_value(event)?;
        assert_eq!(event["event"], "timer_fired");
        assert_eq!(event["task"], 3);
        assert_eq!(event["timestamp"], "1970-01-01T00:00:00.000Z");
        Ok(())
    }
}
