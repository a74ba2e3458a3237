//! SDK instances waiting for a worker that runs their orchestration: none
//! was connected when they last had something to do. The scheduler passes
//! over them without reading them from the store (their journal, inbox and
//! history would be read and rebuilt every second, for nothing) until a
//! worker that runs them connects; what arrives for them meanwhile waits
//! in their inbox.
//!
//! Only a hint: an instance forgotten (past the bound, or after a
//! management operation) is read once more and, still unserved, noted again.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::sdk_workers::SdkWorkers;

/// Most instances noted; past it they are read on every pass, as before.
const AT_MOST: usize = 100_000;

/// Each waiting instance's orchestration name and version.
#[derive(Default)]
pub(super) struct ForAWorker {
    waiting: Mutex<HashMap<String, (String, Option<String>)>>,
}

impl ForAWorker {
    fn waiting(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, Option<String>)>> {
        // Nothing panics while holding it; a poisoned map is still consistent.
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// No connected worker runs orchestration `name` of `version`, which
    /// instance `id` runs on.
    pub fn wait(&self, id: &str, name: &str, version: Option<&str>) {
        let mut waiting = self.waiting();
        if waiting.len() < AT_MOST || waiting.contains_key(id) {
            waiting.insert(
                id.to_string(),
                (name.to_string(), version.map(str::to_string)),
            );
        }
    }

    /// Whether `id` still waits: noted, and no worker connected since runs
    /// it. One that a worker now runs is forgotten.
    pub fn still_waits(&self, id: &str, workers: &SdkWorkers) -> bool {
        let mut waiting = self.waiting();
        let Some((name, version)) = waiting.get(id) else {
            return false;
        };
        if workers.runs_orchestration(name, version.as_deref()) {
            waiting.remove(id);
            return false;
        }
        true
    }

    /// `id` changed outside its episodes (a management operation): its next
    /// offer reads it.
    pub fn forget(&self, id: &str) {
        self.waiting().remove(id);
    }
}
