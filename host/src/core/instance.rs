//! What the engine knows of an instance when it decides: its status, its
//! current execution, its parent, and the size of its history.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RuntimeStatus {
    Pending,
    Running,
    Suspended,
    Completed,
    Failed,
    Terminated,
    ContinuedAsNew,
}

impl RuntimeStatus {
    pub const ALL: [RuntimeStatus; 7] = [
        Self::Pending,
        Self::Running,
        Self::Suspended,
        Self::Completed,
        Self::Failed,
        Self::Terminated,
        Self::ContinuedAsNew,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Running => "Running",
            Self::Suspended => "Suspended",
            Self::Completed => "Completed",
            Self::Failed => "Failed",
            Self::Terminated => "Terminated",
            Self::ContinuedAsNew => "ContinuedAsNew",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|x| x.as_str().eq_ignore_ascii_case(s.trim()))
    }

    pub fn is_finished(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Terminated)
    }

    /// Whether the code may run (an episode may start).
    pub fn is_active(self) -> bool {
        matches!(self, Self::Pending | Self::Running | Self::ContinuedAsNew)
    }
}

/// The task of a parent instance that a child reports to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentRef {
    pub id: String,
    pub execution: i64,
    pub task: u32,
}

/// Rows and bytes held by an execution's journal, or by an inbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Size {
    pub events: u64,
    pub bytes: u64,
}

impl Size {
    pub fn plus(self, events: u64, bytes: u64) -> Self {
        Self {
            events: self.events.saturating_add(events),
            bytes: self.bytes.saturating_add(bytes),
        }
    }
}

/// The instance as a transition sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceState {
    pub id: String,
    pub status: RuntimeStatus,
    /// The current execution; results addressed to any other are stale.
    pub execution: i64,
    pub parent: Option<ParentRef>,
    /// What the current execution's journal holds.
    pub history: Size,
    /// Whether the journal has any row (a resumed instance that never ran
    /// must run its first episode).
    pub has_run: bool,
}

/// An instance to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewInstance {
    pub id: String,
    pub name: String,
    pub input: String,
    /// The component version it runs on.
    pub digest: String,
    /// The versions of other components' activities it calls: the activity
    /// set served when it started (`None`: no other component served any).
    pub activity_set: Option<String>,
    pub parent: Option<ParentRef>,
    /// The trace its episodes continue (W3C `traceparent`), if any.
    pub traceparent: Option<String>,
    /// Started for later (Unix ms): it stays Pending, and runs nothing,
    /// until then. `None`: at once.
    pub start_at: Option<i64>,
    /// The invoke key that starts it (its id, as a run records it), who
    /// then owns it. `None`: a caller who reaches every instance (an admin
    /// key, the gRPC endpoint, a host without keys), or a sub-orchestration,
    /// which the store records as its parent's.
    pub caller: Option<String>,
}
