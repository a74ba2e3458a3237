//! The dashboard at `/dashboard`: a page and its ES modules, embedded in
//! the binary (plain modules, no build step: nothing to install to change
//! them, and nothing but this binary to serve them). The page reads and
//! steers through the host's own API, mounted again under
//! `/dashboard/api/` so that a browser that signed in to the dashboard (with
//! HTTP Basic auth, the admin key as the password) sends the key on every
//! request of the page, its event streams included. `/dashboard/events`
//! tells the page, once a second, what changed.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use futures::Stream;
use serde_json::json;

use super::AppState;

/// Where the host's API is mounted again for the page.
pub(super) const API: &str = "/dashboard/api";

/// How often the page is told what changed.
const TICK: Duration = Duration::from_secs(1);

const INDEX: &str = include_str!("assets/index.html");
const APP: &str = include_str!("assets/app.js");
const VIEWS: &str = include_str!("assets/views.js");
const LIB: &str = include_str!("assets/lib.js");
const STYLE: &str = include_str!("assets/style.css");

/// Scripts and styles from this host alone; nothing inline, nothing framed.
const POLICY: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; frame-ancestors 'none'; base-uri 'none'";

/// The page, its assets and its change feed (every route admin-only: none
/// is in the open or invoke lists of `keys::required_scope`).
pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/dashboard", get(index))
        .route("/dashboard/", get(index))
        .route("/dashboard/app.js", get(|| asset("text/javascript", APP)))
        .route(
            "/dashboard/views.js",
            get(|| asset("text/javascript", VIEWS)),
        )
        .route("/dashboard/lib.js", get(|| asset("text/javascript", LIB)))
        .route("/dashboard/style.css", get(|| asset("text/css", STYLE)))
        .route("/dashboard/events", get(events))
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX).await
}

async fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (CONTENT_TYPE, kind),
            (CACHE_CONTROL, "no-cache"),
            (CONTENT_SECURITY_POLICY, POLICY),
        ],
        body,
    )
        .into_response()
}

/// Once a second: a fingerprint of what is served (the components, their
/// replay checks and their load failures), so the page reloads the list only when it
/// changed, and a tick that refreshes the view shown.
async fn events(
    State(state): State<AppState>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let ticks = tokio_stream::wrappers::IntervalStream::new(tokio::time::interval(TICK));
    let stream = futures::StreamExt::map(ticks, move |_| {
        Ok(Event::default()
            .event("tick")
            .data(json!({"components": fingerprint(&state)}).to_string()))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// The digests of the served components (with their last replay check's
/// start and end) and the files that failed, in one short string that
/// changes whenever any of them does.
fn fingerprint(state: &AppState) -> String {
    use sha2::{Digest, Sha256};
    let mut served: Vec<String> = state
        .registry
        .components()
        .iter()
        .map(|c| {
            // A replay check's end shows as a change too.
            let check = state
                .orchestrator
                .replay_check(&c.name)
                .map(|r| (r.started_at, r.finished_at));
            format!("{}={}:{check:?}", c.name, c.digest)
        })
        .collect();
    served.sort();
    let mut failed: Vec<String> = state
        .registry
        .failures()
        .iter()
        .map(|f| format!("{}:{}", f.file.display(), f.error))
        .collect();
    failed.sort();
    let digest = Sha256::new()
        .chain_update(served.join("\n"))
        .chain_update([0])
        .chain_update(failed.join("\n"))
        .finalize();
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}
