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

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::AppState;
use crate::runs::RunFilter;
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

/// Whether `caller` may go on with the conversation `session` of `agent`:
/// one nobody started yet, or whose latest run it sees. (An invoke key
/// cannot continue another caller's conversation, nor read it back through
/// the model's answer.)
pub(super) async fn may_continue(
    state: &AppState,
    caller: &Caller,
    agent: &str,
    session: &str,
) -> Result<bool, RunsError> {
    if caller.narrows_to() == Ok(None) {
        return Ok(true);
    }
    let latest = state
        .runs
        .list(
            agent,
            RunFilter {
                session_id: Some(session.to_string()),
                status: None,
                before: None,
                limit: 1,
                caller: None,
            },
        )
        .await?;
    Ok(latest
        .runs
        .first()
        .is_none_or(|run| caller.sees(run.record.caller.as_deref())))
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
    }
}
