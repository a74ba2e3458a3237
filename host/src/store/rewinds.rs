//! A rewind's write: the instance and, in the same transaction, the
//! sub-orchestrations under it that it still waits for
//! ([`crate::core::lifecycle::rewind`] decides each).

use super::decided::decide_and_apply;
use super::durable_records::{Applied, Loaded};
use super::error::StoreError;
use super::tx::Tx;
use crate::core::effects::Effect;
use crate::core::instance::RuntimeStatus;
use crate::core::lifecycle::{rewind, Change, Decision, Reply};

/// Most instances one rewind reaches: the instance, its failed
/// sub-orchestrations, theirs.
const REWIND_REACH: usize = 256;

/// Rewinds `id` and, in the same transaction, each sub-orchestration under
/// it that it still waits for: a failed one that can be rewound is (it
/// reports to its parent as before); one gone, ended otherwise, failed in
/// its own code or past the reach is created again under its parent (on
/// its own version when it still exists); one that runs reports in due
/// course. A child id that now names another parent's child refuses the
/// whole rewind: nothing is written.
pub(super) async fn rewind_tree(
    tx: &mut impl Tx,
    id: &str,
    now: i64,
) -> Result<(Change, Applied), StoreError> {
    let (current, rewinding) = rewind_plan(tx, id).await?;
    let change = rewinding.changed.change;
    if change != Change::Done {
        return Ok((change, Applied::default()));
    }
    // Planned whole before anything is written.
    let mut planned: Vec<(Option<Loaded>, Vec<Effect>)> = Vec::new();
    let mut queue = vec![(current, rewinding)];
    let mut reached = 1;
    while let Some((current, rewinding)) = queue.pop() {
        let mut effects = rewinding.changed.effects;
        for child in rewinding.children {
            let (loaded, plan) = rewind_plan(tx, &child.id).await?;
            let found = loaded.as_ref().map(|l| rewind::Found {
                state: &l.state,
                digest: &l.digest,
                activity_set: l.activity_set.as_deref(),
            });
            let rewindable = plan.changed.change == Change::Done && reached < REWIND_REACH;
            match rewind::child_step(child, found, rewindable) {
                rewind::ChildStep::Rewind => {
                    reached += 1;
                    queue.push((loaded, plan));
                }
                rewind::ChildStep::Create(create) => effects.push(*create),
                rewind::ChildStep::Reports => {}
                rewind::ChildStep::Conflict => {
                    return Ok((Change::NotApplicable, Applied::default()))
                }
            }
        }
        planned.push((current, effects));
    }
    let mut all = Applied::default();
    for (current, effects) in planned {
        // One that failed in its own code runs again with nothing arriving
        // for it: woken, as a start is.
        let offered = effects.iter().any(|e| {
            matches!(
                e,
                Effect::SetStatus {
                    status: RuntimeStatus::Pending,
                    ..
                }
            )
        });
        if let Some(id) = current
            .as_ref()
            .filter(|_| offered)
            .map(|c| c.state.id.clone())
        {
            all.wake.push(id);
        }
        let decision = Decision {
            reply: Reply::Change(Change::Done),
            effects,
            next: None,
        };
        let (_, applied) = decide_and_apply(tx, current, decision, now).await?;
        all.tasks.extend(applied.tasks);
        all.wake.extend(applied.wake);
        all.posted.extend(applied.posted);
        all.news.extend(applied.news);
        all.created.extend(applied.created);
        all.comes_due(applied.due);
    }
    Ok((change, all))
}

/// What rewinding `id` as it stands means.
async fn rewind_plan(
    tx: &mut impl Tx,
    id: &str,
) -> Result<(Option<Loaded>, rewind::Rewinding), StoreError> {
    let current = tx.load(id).await?;
    let journal = match &current {
        Some(_) => tx.journal(id).await?,
        None => Vec::new(),
    };
    let rewinding = rewind::decide(
        current.as_ref().map(|c| &c.state),
        &journal,
        current.as_ref().map_or("", |c| c.digest.as_str()),
        current.as_ref().and_then(|c| c.activity_set.as_deref()),
    );
    Ok((current, rewinding))
}
