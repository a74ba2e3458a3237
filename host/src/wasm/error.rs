//! Errors of loading components and calling into guests.

use std::path::PathBuf;

use wasmtime::Trap;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("the wasm engine could not be created: {0}")]
    Engine(String),
    /// `reason`, not `source`: the message says it, and an error chain
    /// printed whole (`{:#}`) said it twice.
    #[error("the artifact cache directory {path} is not usable: {reason}")]
    Cache {
        path: PathBuf,
        reason: std::io::Error,
    },
    #[error("{0} has no usable file name")]
    BadFileName(PathBuf),
    #[error("could not read {path}: {reason}")]
    Read {
        path: PathBuf,
        reason: std::io::Error,
    },
    #[error("not a valid WebAssembly component: {0}")]
    Compile(String),
    #[error("the component needs imports this host does not offer: {0}")]
    Link(String),
    #[error("describe() failed: {0}")]
    Describe(GuestError),
    #[error("invalid manifest: {0}")]
    Manifest(String),
    #[error(
        "one instance of the component takes {slots} of the host's slots (its core \
         instances, memories and tables), more than --max-instances ({max_instances}): \
         raise --max-instances"
    )]
    TooLarge { slots: u32, max_instances: u32 },
    #[error("component '{component}': grant '{grant}' refused: {reason}")]
    Grant {
        component: String,
        grant: String,
        reason: String,
    },
}

impl LoadError {
    /// A failure of the machine (reading the file, the cache, the engine)
    /// rather than of the component's bytes or grants: loading the same
    /// file again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Read { .. } | Self::Cache { .. } | Self::Engine(_)
        )
    }
}

/// A guest failed as a program: the call produced no answer at all.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GuestError {
    #[error("component '{component}' could not be instantiated: {reason}")]
    Instantiate { component: String, reason: String },
    #[error("component '{component}' exceeded its CPU time limit and was interrupted")]
    Deadline { component: String },
    #[error("component '{component}' did not finish within its wall-clock limit of {limit:?} (waiting on the network?) and was stopped")]
    WallClock {
        component: String,
        limit: std::time::Duration,
    },
    #[error("component '{component}' exceeded its memory limit: {reason}")]
    Memory { component: String, reason: String },
    #[error("component '{component}' trapped: {reason}")]
    Trap { component: String, reason: String },
    /// The call's work stopped being this host's while it ran (its lease
    /// ran out): a request it made was held back, and what it returned is
    /// not the host's to keep.
    #[error("component '{component}' was stopped short: its outbound request was held back ({why:?}: the work it did is no longer this host's, or this host's lease had run out)")]
    HeldBack {
        component: String,
        why: super::send_gate::HeldBack,
    },
}

impl GuestError {
    /// `hit_memory_limit`: the store refused a growth at the instance's
    /// limit during the call (a trap then is the memory's, not the code's).
    pub(super) fn from_call(
        component: &str,
        error: &wasmtime::Error,
        hit_memory_limit: bool,
    ) -> Self {
        let component = component.to_string();
        let reason = describe(error);
        if matches!(error.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
            return Self::Deadline { component };
        }
        if hit_memory_limit {
            return Self::Memory { component, reason };
        }
        Self::Trap { component, reason }
    }
}

/// The whole cause chain in one line: wasmtime's top-level message alone
/// rarely says what went wrong.
pub fn describe(error: &wasmtime::Error) -> String {
    error
        .chain()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}
