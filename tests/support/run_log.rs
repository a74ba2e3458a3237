//! A local server that the `counted` orchestration's activities report to.

use std::sync::{Arc, Mutex};

/// A local server that logs, in arrival order, every `GET /{tag}/{step}` the
/// `counted` orchestration's activities make: one entry per activity run.
pub struct RunLog {
    pub port: u16,
    runs: Arc<Mutex<Vec<(String, u32)>>>,
}

impl RunLog {
    pub async fn serve() -> Self {
        let runs = Arc::new(Mutex::new(Vec::new()));
        let log = runs.clone();
        let app = axum::Router::new().route(
            "/{tag}/{step}",
            axum::routing::get(
                move |axum::extract::Path((tag, step)): axum::extract::Path<(String, u32)>| {
                    log.lock().unwrap().push((tag, step));
                    async { "ran" }
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { port, runs }
    }

    pub fn runs(&self) -> Vec<(String, u32)> {
        self.runs.lock().unwrap().clone()
    }
}
