//! A local server that the `counted` orchestration's activities report to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A local server that logs, in arrival order, every `GET /{tag}/{step}` the
/// `counted` orchestration's activities make: one entry per activity run.
pub struct RunLog {
    pub port: u16,
    runs: Arc<Mutex<Vec<(String, u32)>>>,
}

impl RunLog {
    pub async fn serve() -> Self {
        Self::serve_slow_once(u32::MAX, std::time::Duration::ZERO).await
    }

    /// Like [`Self::serve`], but the first run of step `slow` is answered
    /// only after `delay`: an activity that is still under way when a test
    /// pauses its host.
    pub async fn serve_slow_once(slow: u32, delay: std::time::Duration) -> Self {
        let runs = Arc::new(Mutex::new(Vec::new()));
        let log = runs.clone();
        let app = axum::Router::new().route(
            "/{tag}/{step}",
            axum::routing::get(
                move |axum::extract::Path((tag, step)): axum::extract::Path<(String, u32)>| {
                    let first = {
                        let mut runs = log.lock().unwrap();
                        let first = !runs.iter().any(|(t, s)| *t == tag && *s == step);
                        runs.push((tag, step));
                        first
                    };
                    async move {
                        if first && step == slow {
                            tokio::time::sleep(delay).await;
                        }
                        "ran"
                    }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { port, runs }
    }

    /// Grants the `orchestration-tests` component of the host whose
    /// directory is `dir` the log's address (its activities and tools may
    /// reach it and nothing else).
    pub fn grant(&self, dir: &std::path::Path) {
        let components = dir.join("components");
        std::fs::create_dir_all(&components).unwrap();
        std::fs::write(
            components.join("orchestration-tests.toml"),
            format!("allowed_hosts = [\"127.0.0.1:{}\"]\n", self.port),
        )
        .unwrap();
    }

    pub fn runs(&self) -> Vec<(String, u32)> {
        self.runs.lock().unwrap().clone()
    }
}

/// Runs of `counted` activities, `(tag, step)` in arrival order: step `k`
/// running after step `k + 1` began means step `k`'s committed result was
/// thrown away and it ran again.
pub fn completed_activities_run_again(runs: &[(String, u32)]) -> Vec<String> {
    let mut highest: HashMap<&str, u32> = HashMap::new();
    let mut again = Vec::new();
    for (tag, step) in runs {
        let top = highest.entry(tag).or_insert(*step);
        if *step < *top {
            again.push(format!("{tag} step {step} after step {top}"));
        }
        *top = (*top).max(*step);
    }
    again
}
