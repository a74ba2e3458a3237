//! The routes open to anyone, each with the reason it is open; the
//! enumeration calls them with B's key and with none and checks they give
//! nothing of A's away.

use serde_json::Value;

use super::wire::Request;

/// The routes open to anyone, and why; the enumeration checks they give
/// nothing of A's away.
pub const OPEN: [(&str, &str, &str); 7] = [
    (
        "GET",
        "/api/health",
        "health: load balancers and probes ask it without a key",
    ),
    ("GET", "/api/health/live", "liveness probe"),
    ("GET", "/api/health/ready", "readiness probe"),
    (
        "GET",
        "/api/openapi.json",
        "the document of the routes: public by design",
    ),
    (
        "POST",
        "/agenthost-wake",
        "the Functions timer's wake-up: runs what is due, answers nothing of any resource",
    ),
    (
        "GET",
        "/.well-known/agent-card.json",
        "A2A discovery: cards are public",
    ),
    (
        "GET",
        "/a2a/{agent}/.well-known/agent-card.json",
        "A2A discovery: cards are public",
    ),
];

/// What an open route is called with.
pub fn open_request(template: &str) -> Request {
    let path = template.replace("{agent}", "writer");
    match template {
        "/agenthost-wake" => Request::post(path, Value::Null),
        _ => Request::get(path),
    }
}
