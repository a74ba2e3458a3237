//! Fences: whether a write still belongs to the process that makes it.
//!
//! On a hub that several hosts share, a session is executed by the host that
//! owns it. A host paused past its lease (a stall, a partition) loses the
//! session to another host, which runs the session's unfinished run again;
//! when the paused host wakes it still holds the run in memory and would go
//! on writing to the session: a tool result after the other host's final
//! answer breaks the conversation for every later run (a model API refuses
//! an orphan tool message). So every run write carries the session's owner
//! and epoch as its writer saw them when it began the run; a take-over bumps
//! the epoch; the store evaluates [`admits`] inside the writing transaction
//! and a stale write is refused, never merged. The epoch, not the owner
//! alone, makes the rule safe when a session comes back to the same host
//! (A → B → A): A's writes from before the round trip still fail.

/// The epoch of a session inserted with its owner: a claim at its insert
/// leaves it there, and a run held until its end inserts it so.
pub const BORN_AT: i64 = 1;

/// What a run's writer believed when it began executing the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionFence {
    /// The host that executes the run.
    pub owner: String,
    /// The session's epoch when it did.
    pub epoch: i64,
    /// When (ms, the host's clock) it was read, or no later: the moment from
    /// which an unbroken lease proves it still holds ([`unbroken`]).
    pub taken_at: i64,
}

/// A session row as the writing transaction reads it: its owner and epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionHolder {
    pub owner: Option<String>,
    pub epoch: i64,
}

/// The rule: a write is admitted when the session still has the owner and
/// the epoch its writer began with. `fence` is `None` on a store one process
/// serves alone (SQLite, held by an OS lock): there is nothing to fence.
/// A session that is gone (deleted or expired) admits no fenced write.
pub fn admits(holder: Option<&SessionHolder>, fence: Option<&SessionFence>) -> bool {
    let Some(fence) = fence else {
        return true;
    };
    holder
        .is_some_and(|h| h.owner.as_deref() == Some(fence.owner.as_str()) && h.epoch == fence.epoch)
}

/// Whether a lease renewal begun at `started` keeps the lease unbroken
/// after the one begun at `renewed_at`: it began while that one still held,
/// with the share kept back for clock skew ([`send_by`]). A lease that
/// broke may have let another host take this host's sessions.
pub fn continues(renewed_at: i64, started: i64, lease_ms: i64) -> bool {
    started <= send_by(renewed_at, lease_ms)
}

/// Whether `fence` still holds without asking the database: another host
/// takes a session only once its owner's lease ran out, so a fence read
/// while this host's lease has held unbroken since (`unbroken_since`, the
/// beginning of the current run of renewals that each [`continues`] the
/// last) is still this host's. A session deleted meanwhile is not seen:
/// the writes after are refused all the same.
pub fn unbroken(unbroken_since: i64, fence: &SessionFence) -> bool {
    unbroken_since <= fence.taken_at
}

/// An instance as an episode's writing transaction reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InstanceHolder<'a> {
    pub execution: i64,
    /// Whether its status still lets an episode run (not finished,
    /// terminated or suspended).
    pub active: bool,
    /// The host that owns it on a shared hub.
    pub owner: Option<&'a str>,
    /// Entries in the execution's journal.
    pub journal_len: u64,
}

/// What an episode ran on: the execution, the journal length it replayed,
/// and the host that ran it (`None` on a store one process serves alone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpisodeFence<'a> {
    pub execution: i64,
    pub replayed: u64,
    pub writer: Option<&'a str>,
}

/// The rule for instance writes: an episode's effects are committed only
/// onto the very state it replayed. The same execution, still active, still
/// owned by its writer, and a journal neither longer nor shorter than the
/// one it replayed: only episodes append to a journal, so a journal that
/// grew means another episode (another host's, after a take-over, even one
/// that came back since) decided from it, and this one's decisions are
/// stale. Refused, the episode is simply run again on what is stored.
pub fn admits_episode(holder: &InstanceHolder<'_>, fence: &EpisodeFence<'_>) -> bool {
    holder.active
        && holder.execution == fence.execution
        && holder.journal_len == fence.replayed
        && fence.writer.is_none_or(|me| holder.owner == Some(me))
}

/// The share of a lease kept back for the clocks of the host and the
/// database not agreeing exactly: a fifth.
const SKEW_SHARE: i64 = 5;

/// Until when (ms, the host's clock) an effect outside the store, a model
/// request, may still be *sent* by a host whose owner check passed, the
/// host having last renewed its lease (begun at `renewed_at`, lasting
/// `lease_ms`) before that check. Another host takes a session over only
/// once that lease has run out, so a request whose last byte leaves before
/// this moment is on its way before any new owner can ask the same turn;
/// a host paused between the check and the send (SIGSTOP, a stall) finds
/// the moment past when it wakes and does not send. No transaction can
/// refuse a request once the model has it: the check and this deadline are
/// all there is, short of the endpoint's own idempotency.
pub fn send_by(renewed_at: i64, lease_ms: i64) -> i64 {
    renewed_at
        .saturating_add(lease_ms)
        .saturating_sub(lease_ms / SKEW_SHARE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(owner: Option<&str>, epoch: i64) -> SessionHolder {
        SessionHolder {
            owner: owner.map(str::to_string),
            epoch,
        }
    }

    fn fence(owner: &str, epoch: i64) -> SessionFence {
        SessionFence {
            owner: owner.into(),
            epoch,
            taken_at: 0,
        }
    }

    #[test]
    fn the_owner_that_began_the_run_writes() {
        assert!(admits(Some(&holder(Some("a"), 3)), Some(&fence("a", 3))));
    }

    #[test]
    fn a_host_whose_session_was_taken_over_is_refused() {
        assert!(!admits(Some(&holder(Some("b"), 4)), Some(&fence("a", 3))));
        assert!(!admits(Some(&holder(None, 4)), Some(&fence("a", 3))));
    }

    #[test]
    fn a_session_that_came_back_to_the_same_host_refuses_its_older_writes() {
        assert!(!admits(Some(&holder(Some("a"), 5)), Some(&fence("a", 3))));
    }

    #[test]
    fn a_deleted_session_admits_no_fenced_write_and_an_unfenced_store_admits_all() {
        assert!(!admits(None, Some(&fence("a", 3))));
        assert!(admits(None, None));
    }

    #[test]
    fn a_request_must_leave_before_the_lease_that_admitted_it_can_have_run_out() {
        // Renewed at 10 000 ms with a 1 s lease: another host may take the
        // session from 11 000 on; a fifth is kept back for clock skew.
        assert_eq!(send_by(10_000, 1_000), 10_800);
        assert!(send_by(10_000, 1_000) < 10_000 + 1_000);
        assert_eq!(send_by(i64::MAX - 5, 1_000), i64::MAX - 200);
    }

    fn instance(owner: Option<&str>, journal_len: u64) -> InstanceHolder<'_> {
        InstanceHolder {
            execution: 2,
            active: true,
            owner,
            journal_len,
        }
    }

    #[test]
    fn an_episode_commits_onto_the_state_it_replayed() {
        let ran = EpisodeFence {
            execution: 2,
            replayed: 7,
            writer: Some("a"),
        };
        assert!(admits_episode(&instance(Some("a"), 7), &ran));
        let alone = EpisodeFence {
            writer: None,
            ..ran
        };
        assert!(admits_episode(&instance(None, 7), &alone));
    }

    #[test]
    fn an_episode_whose_journal_moved_on_is_refused_even_on_its_own_host() {
        let ran = EpisodeFence {
            execution: 2,
            replayed: 7,
            writer: Some("a"),
        };
        // A → B → A: B appended while A was paused, and A holds it again.
        assert!(!admits_episode(&instance(Some("a"), 9), &ran));
        assert!(!admits_episode(&instance(Some("b"), 7), &ran));
        assert!(!admits_episode(
            &InstanceHolder {
                execution: 3,
                ..instance(Some("a"), 7)
            },
            &ran
        ));
        assert!(!admits_episode(
            &InstanceHolder {
                active: false,
                ..instance(Some("a"), 7)
            },
            &ran
        ));
    }

    #[test]
    fn a_fence_read_under_an_unbroken_lease_holds_and_one_read_before_a_break_does_not() {
        // Renewals every 300 ms of a 1 s lease continue it; one begun 900 ms
        // after the last (past the 800 ms kept safe) breaks it.
        assert!(continues(10_000, 10_300, 1_000));
        assert!(continues(10_000, 10_800, 1_000));
        assert!(!continues(10_000, 10_900, 1_000));
        let read = SessionFence {
            taken_at: 12_000,
            ..fence("a", 3)
        };
        assert!(unbroken(11_000, &read));
        assert!(unbroken(12_000, &read));
        assert!(!unbroken(12_001, &read));
    }
}
