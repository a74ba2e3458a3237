//! One row of the suite's report (`target/chaos/report.md`).

use std::collections::BTreeMap;
use std::time::Duration;

use super::faults::Fault;
use crate::support::workspace;

pub(super) struct Report {
    pub(super) store: &'static str,
    pub(super) seed: u64,
    pub(super) items: usize,
    pub(super) acknowledged: usize,
    pub(super) refused: usize,
    pub(super) unacknowledged: usize,
    pub(super) injected: BTreeMap<Fault, usize>,
    pub(super) lost: usize,
    pub(super) duplicated: usize,
    pub(super) streams_failed: usize,
    pub(super) broken_sessions: usize,
    pub(super) p99_recovery: Option<Duration>,
    pub(super) elapsed: Duration,
}

impl Report {
    pub(super) fn write(&self) {
        let faults: Vec<String> = self
            .injected
            .iter()
            .map(|(kind, n)| format!("{kind:?} {n}"))
            .collect();
        let row = format!(
            "| {} | {} | {} | {} ({} refused during a fault and asked again, {} never acknowledged) | {} ({}) | {} | {} | {} | {} | {} | {:.0} s |\n",
            self.store,
            self.seed,
            self.items,
            self.acknowledged,
            self.refused,
            self.unacknowledged,
            self.injected.values().sum::<usize>(),
            faults.join(", "),
            self.lost,
            self.duplicated,
            self.streams_failed,
            self.broken_sessions,
            self.p99_recovery
                .map_or("–".to_string(), |d| format!("{} ms", d.as_millis())),
            self.elapsed.as_secs_f64(),
        );
        println!("{row}");
        let dir = workspace().join("target/chaos");
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("report.md");
        let header = "| store | seed | work items | acknowledged | faults injected | lost | done twice | streams marked failed | sessions with a tool result after the answer | p99 recovery after kill -9 | time |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
        let mut text = std::fs::read_to_string(&path).unwrap_or_else(|_| header.to_string());
        text.push_str(&row);
        let _ = std::fs::write(path, text);
    }
}
