//! The routes under `/runtime/`, served again under `/api` for a caller
//! behind an Azure Functions front.
//!
//! The management API (`/runtime/webhooks/durabletask/…`, where
//! `statusQueryGetUri` and its siblings point) and MCP
//! (`/runtime/webhooks/mcp`) live where Durable Functions and the Functions
//! MCP extension put them. The Functions host keeps every path that starts
//! with `runtime` (and `admin`) for its own routes, so a request there never
//! reaches the app's catch-all function. The same routes are mounted again
//! under [`MOUNT`]: `/api/runtime/webhooks/…`, a path the catch-all
//! forwards whatever the app's route prefix (`""` as `functions init`
//! writes it, or the default `api`). One definition, mounted twice
//! (`super::router`); the key check sees the alias as the route it stands
//! for ([`canonical`]), so both answer to the same keys and tokens.
//!
//! The URLs this host hands out point where a caller can follow them:
//! under the alias when it runs as the Functions host's custom handler
//! ([`url_prefix`]), at the original paths otherwise.

use std::sync::OnceLock;

/// Where the `/runtime/` routes are mounted again.
pub(super) const MOUNT: &str = "/api";

/// The space the Functions host keeps for itself.
const RESERVED: &str = "/runtime/";

/// The route template `route` stands for: the original of an alias
/// (`/api/runtime/…` → `/runtime/…`), any other as it is.
pub(super) fn canonical(route: &str) -> &str {
    match route.strip_prefix(MOUNT) {
        Some(rest) if rest.starts_with(RESERVED) => rest,
        _ => route,
    }
}

/// What goes before `/runtime/…` in a URL handed out: [`MOUNT`] behind a
/// Functions host, nothing otherwise.
pub(super) fn url_prefix() -> &'static str {
    prefix_for(behind_functions())
}

fn prefix_for(behind_functions: bool) -> &'static str {
    match behind_functions {
        true => MOUNT,
        false => "",
    }
}

/// Whether this process is an Azure Functions custom handler: the Functions
/// host names the port it forwards to in `FUNCTIONS_CUSTOMHANDLER_PORT`
/// (which the settings take as the port to listen on, read the same way).
fn behind_functions() -> bool {
    static BEHIND: OnceLock<bool> = OnceLock::new();
    *BEHIND.get_or_init(|| {
        std::env::var("FUNCTIONS_CUSTOMHANDLER_PORT")
            .ok()
            .and_then(|port| port.trim().parse::<u16>().ok())
            .is_some()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_alias_stands_for_its_original_and_nothing_else_moves() {
        let instance = "/runtime/webhooks/durabletask/instances/{id}";
        assert_eq!(canonical(&format!("/api{instance}")), instance);
        assert_eq!(
            canonical("/api/runtime/webhooks/mcp"),
            "/runtime/webhooks/mcp"
        );
        assert_eq!(canonical(instance), instance);
        assert_eq!(canonical("/api/{*path}"), "/api/{*path}");
        assert_eq!(canonical("/api/runtimes/x"), "/api/runtimes/x");
        assert_eq!(
            canonical("/api/agents/{name}/run"),
            "/api/agents/{name}/run"
        );
    }

    #[test]
    fn urls_point_under_the_alias_behind_a_functions_host_alone() {
        assert_eq!(prefix_for(true), "/api");
        assert_eq!(prefix_for(false), "");
    }
}
