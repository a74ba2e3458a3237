//! A decision written: its effects applied to the instance as loaded, and
//! who must hear of it (the news a shared hub passes to the other hosts).
//! Shared by the writes ([`super::writes`]) and a rewind's tree
//! ([`super::rewinds`]).

use super::apply::apply;
use super::durable_records::{Applied, Loaded, Target};
use super::error::StoreError;
use super::tx::Tx;
use crate::core::lifecycle::{Change, Decision, Reply};

/// Writes `decision` on the instance as loaded (`current`); its change,
/// and what it applied with its news filled in.
pub(super) async fn decide_and_apply(
    tx: &mut impl Tx,
    current: Option<Loaded>,
    decision: Decision,
    now: i64,
) -> Result<(Change, Applied), StoreError> {
    let mine = is_mine(tx.me(), current.as_ref());
    let id = current.as_ref().map(|c| c.state.id.clone());
    let applied = match current {
        Some(c) if !decision.effects.is_empty() => {
            let target = Target {
                id: c.state.id.clone(),
                execution: c.state.execution,
                name: c.name,
                digest: c.digest,
            };
            apply(tx, &target, c.state.history.events, decision.effects, now).await?
        }
        _ => Applied::default(),
    };
    let applied = match id {
        Some(id) => with_news(applied, &id, mine),
        None => applied,
    };
    let change = match decision.reply {
        Reply::Change(change) => change,
        other => {
            return Err(StoreError::Write(format!(
                "an operation got a reply that is not a change: {other:?}"
            )))
        }
    };
    Ok((change, applied))
}

/// Whether the instance is owned by the host this transaction writes for
/// (never on SQLite, where there are no other hosts to tell).
pub(super) fn is_mine(me: Option<&str>, current: Option<&Loaded>) -> bool {
    me.is_some() && current.and_then(|c| c.owner.as_deref()) == me
}

/// Fills in the news of a write on `instance`: whatever it gave something
/// new, except the instance itself when this host owns it (its own work
/// needs no wake-up from the store).
pub(super) fn with_news(mut applied: Applied, instance: &str, mine: bool) -> Applied {
    let mut news: Vec<String> = applied
        .wake
        .iter()
        .filter(|id| !(mine && id.as_str() == instance))
        .cloned()
        .collect();
    if !mine && !news.iter().any(|id| id == instance) {
        news.push(instance.to_string());
    }
    applied.news = news;
    applied
}
