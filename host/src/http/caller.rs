//! Who a request comes from, as the host's keys tell it, and so what it may
//! see of the runs others started.
//!
//! With endpoint keys, an invoke key sees the runs it started and nothing
//! else: not another key's, not those an orchestration or an Agent
//! Framework session started; a run it cannot see answers as an unknown one
//! would (404, `TaskNotFoundError`), and a conversation another caller holds
//! cannot be continued. An admin key sees everything. A host without keys
//! has one caller, who sees everything (who may reach it at all is
//! `origin_guard`'s question).
//!
//! Who holds a conversation is the store's to decide, in the transaction
//! that stores a run (`store::run_tx::continues`): a session belongs to the
//! caller whose first message was stored first, so two keys racing for one
//! new session id leave one owner, and the other's run is refused with
//! nothing of it stored (`RunsError::SessionOfAnother`, which each edge
//! answers as it documents: 403, A2A -32602, MCP invalid params). A read
//! here before the write would decide on what the write no longer finds.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::{ApiError, AppState};
use crate::durable::{DurableError, InstanceFilter, InstanceView};
use crate::runs::RunsError;

/// Set by `authorize` on a request its key admitted; absent on a host
/// without keys and on open routes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No keys configured: the one caller there is.
    Anyone,
    /// An admin key.
    Admin,
    /// A URL token: it opened the one run or instance it names.
    Token,
    /// An invoke key, by the id its runs record.
    Invoke(String),
    /// A keyed host's request no key admitted (an open route): it sees no
    /// run.
    Unknown,
}

impl Caller {
    /// What a run it starts records as its caller.
    pub fn id(&self) -> Option<&str> {
        match self {
            Self::Invoke(id) => Some(id),
            Self::Anyone | Self::Admin | Self::Token | Self::Unknown => None,
        }
    }

    /// Whether it may see a run that recorded `started_by`.
    pub fn sees(&self, started_by: Option<&str>) -> bool {
        match self {
            Self::Anyone | Self::Admin | Self::Token => true,
            Self::Invoke(id) => started_by == Some(id.as_str()),
            Self::Unknown => false,
        }
    }

    /// Whether it may start runs at all: a URL token (which opens one run)
    /// and a request no key admitted start none. Their routes never let
    /// them get that far; asked so that their `None` as [`Self::id`] is
    /// never taken by the store for a keyless caller's, who continues any
    /// session.
    pub fn may_start_runs(&self) -> bool {
        match self {
            Self::Anyone | Self::Admin | Self::Invoke(_) => true,
            Self::Token | Self::Unknown => false,
        }
    }

    /// The caller a listing is narrowed to: `Ok(None)` everything,
    /// `Ok(Some(id))` the runs of `id`, `Err(())` nothing.
    pub fn narrows_to(&self) -> Result<Option<&str>, ()> {
        match self {
            Self::Anyone | Self::Admin | Self::Token => Ok(None),
            Self::Invoke(id) => Ok(Some(id)),
            Self::Unknown => Err(()),
        }
    }
}

/// The run `correlation_id` of `agent`, if `caller` may see it; one it
/// may not is not found, as one that never was.
pub(super) async fn visible_run(
    state: &AppState,
    caller: &Caller,
    agent: &str,
    correlation_id: &str,
) -> Result<crate::runs::RunState, RunsError> {
    let run = state.runs.state(agent, correlation_id).await?;
    if caller.sees(run.record.caller.as_deref()) {
        return Ok(run);
    }
    Err(RunsError::RunNotFound {
        agent: agent.to_string(),
        correlation_id: correlation_id.to_string(),
    })
}

// Instances: owned as runs are. The invoke key that starts an instance
// owns it (`instances.caller`, written by the store in the transaction that
// creates it; a sub-orchestration is its parent's); another invoke key
// reaches none of it. Every instance route asks one of the three functions
// below: `instance_starter` (a start), `visible_instance` (any operation on
// one instance: it answers one the caller may not reach as unknown), and
// `instances_of` (a listing or a purge by filter).

/// Who an instance `caller` starts belongs to: `Ok(None)` for a caller who
/// reaches every instance (a host without keys, an admin key), `Ok(Some)`
/// the invoke key. A URL token and a request no key admitted start nothing
/// (no start route admits them; refused here too, so that a route table
/// change cannot make them starters of full reach).
pub(super) fn instance_starter(caller: &Caller) -> Result<Option<String>, ApiError> {
    match caller {
        Caller::Anyone | Caller::Admin => Ok(None),
        Caller::Invoke(id) => Ok(Some(id.clone())),
        Caller::Token | Caller::Unknown => Err(ApiError::forbidden(
            "starting an orchestration needs a key".to_string(),
        )),
    }
}

/// The instance `id` (its history too when `with_history`), if `caller`
/// may reach it: one another caller owns answers as one that never was
/// (`InstanceNotFound`, the same 404 and body). A URL token was checked
/// against the id it names before the handler ran. The owner is fixed when
/// the id is created, so a check here holds for the write that follows
/// (short of the instance being purged and its id started anew by another
/// caller in between, when the write meets that caller's instance).
pub(super) async fn visible_instance(
    state: &AppState,
    caller: &Caller,
    id: &str,
    with_history: bool,
) -> Result<InstanceView, DurableError> {
    let view = state.orchestrator.status(id, with_history).await?;
    match caller.sees(view.instance.caller.as_deref()) {
        true => Ok(view),
        false => Err(DurableError::InstanceNotFound(id.to_string())),
    }
}

/// That `caller` may act on the instance `id` (raise, terminate, suspend,
/// resume, purge), as [`visible_instance`] decides. A caller that reaches
/// every instance (no keys, an admin key, a URL token already checked
/// against `id`) is not made to read the instance first: the operation
/// answers an unknown id itself, and a raise stays one write.
pub(super) async fn may_act_on_instance(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<(), DurableError> {
    if caller.narrows_to() == Ok(None) {
        return Ok(());
    }
    visible_instance(state, caller, id, false).await.map(|_| ())
}

/// `filter` narrowed to the instances `caller` may reach (an invoke key:
/// its own); `None` when that is none (a request no key admitted).
pub(super) fn instances_of(caller: &Caller, filter: InstanceFilter) -> Option<InstanceFilter> {
    match caller.narrows_to() {
        Ok(None) => Some(filter),
        Ok(Some(id)) => Some(InstanceFilter {
            caller: Some(id.to_string()),
            ..filter
        }),
        Err(()) => None,
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        if state.config.keys.is_empty() {
            return Ok(Self::Anyone);
        }
        Ok(parts
            .extensions
            .get::<Caller>()
            .cloned()
            .unwrap_or(Self::Unknown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_invoke_key_sees_its_own_runs_and_others_see_all() {
        let me = Caller::Invoke("key:a".into());
        assert!(me.sees(Some("key:a")));
        assert!(!me.sees(Some("key:b")));
        assert!(!me.sees(None), "an orchestration's run");
        for all in [Caller::Anyone, Caller::Admin, Caller::Token] {
            assert!(all.sees(Some("key:b")) && all.sees(None));
            assert_eq!(all.narrows_to(), Ok(None));
        }
        assert_eq!(me.narrows_to(), Ok(Some("key:a")));
        assert!(!Caller::Unknown.sees(None) && Caller::Unknown.narrows_to().is_err());
        assert!(me.may_start_runs() && Caller::Admin.may_start_runs());
        assert!(!Caller::Unknown.may_start_runs() && !Caller::Token.may_start_runs());
    }
}
