//! The tasks running in this process, so that a scheduler pass never
//! starts one twice: a task counts as running from its start until its
//! result is stored, which may be after the task itself has returned (its
//! result is then in hand: it waits for its instance's worker, which runs
//! the next episode on it and stores both at once).

use crate::core::failure::TaskOutcome;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::core::lifecycle::task_done::Attempt;

/// (instance, execution, task).
type Key = (String, i64, u32);

#[derive(Default, Clone)]
pub(super) struct TasksInFlight {
    keys: Arc<Mutex<HashSet<Key>>>,
}

impl TasksInFlight {
    fn keys(&self) -> std::sync::MutexGuard<'_, HashSet<Key>> {
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the task running; `None` when it already is.
    pub fn start(&self, key: Key) -> Option<TaskRunning> {
        if !self.keys().insert(key.clone()) {
            return None;
        }
        Some(TaskRunning {
            keys: self.keys.clone(),
            key,
        })
    }

    pub fn len(&self) -> usize {
        self.keys().len()
    }
}

/// A task marked running; dropped once its result is stored (or given up:
/// the task then runs again, from the store).
pub struct TaskRunning {
    keys: Arc<Mutex<HashSet<Key>>>,
    key: Key,
}

impl Drop for TaskRunning {
    fn drop(&mut self) {
        self.keys
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
    }
}

/// A task's result this host holds and has not stored.
pub struct InHand {
    pub attempt: Attempt,
    pub result: TaskOutcome,
    /// Kept until the result is stored: the task is not run again meanwhile.
    pub running: TaskRunning,
}

/// Results in hand, by instance, until the instance's worker takes them.
#[derive(Default)]
pub(super) struct ResultsInHand {
    held: Mutex<HashMap<String, Vec<InHand>>>,
}

impl ResultsInHand {
    pub fn hold(&self, instance: &str, result: InHand) {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(instance.to_string())
            .or_default()
            .push(result);
    }

    /// Every result held for `instance`, in the order they came.
    pub fn take(&self, instance: &str) -> Vec<InHand> {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(instance)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::TasksInFlight;

    #[test]
    fn a_task_runs_once_until_its_mark_is_dropped() {
        let tasks = TasksInFlight::default();
        let key = ("i".to_string(), 1, 0);
        let running = tasks.start(key.clone());
        assert!(running.is_some());
        assert!(tasks.start(key.clone()).is_none(), "not twice at once");
        drop(running);
        assert_eq!(tasks.len(), 0);
        assert!(tasks.start(key).is_some(), "again once the first is done");
    }
}
