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

/// What a run's writer believed when it began executing the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionFence {
    /// The host that executes the run.
    pub owner: String,
    /// The session's epoch when it did.
    pub epoch: i64,
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
}
