//! `GET /api/components` as tests wait on it: a hot reload is observed, not
//! slept through.

use std::time::{Duration, Instant};

use serde_json::Value;

use super::get_json;
use super::host::Host;

/// Polls `GET /api/components` until `done` holds, for up to 10 s.
pub async fn wait_components(host: &Host, what: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body: Value = get_json(host.url("/api/components")).await;
        if done(&body) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{what} never happened; /api/components says {body:#}\n{}",
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The digest of the served component `name`, if it is served.
pub fn digest_of(body: &Value, name: &str) -> Option<String> {
    body["components"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c["digest"].as_str())
        .map(str::to_string)
}

/// Waits until component `name` is served with a digest other than `not`,
/// and returns it.
pub async fn wait_served(host: &Host, name: &str, not: Option<&str>) -> String {
    let served = |b: &Value| digest_of(b, name).filter(|d| Some(d.as_str()) != not);
    let body = wait_components(host, &format!("serving a new {name}"), |b| {
        served(b).is_some()
    })
    .await;
    served(&body).unwrap_or_default()
}
