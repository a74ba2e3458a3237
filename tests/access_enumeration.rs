//! Proof by enumeration (issue 53): no caller reaches what it does not own,
//! by any route the host serves. One host with an admin key and two invoke
//! keys, A and B. A makes one of each kind of resource (a run and its
//! conversation, a run waiting for a human's approval, an A2A task and
//! context, an MCP thread and session, an instance waiting for an event,
//! one waiting for an approval, a finished one). Then every operation the
//! host serves is called on A's resources with B's key and with none:
//! every operation of `/api/openapi.json` (also under the dashboard's mount
//! of the API, and those under `/runtime/` also at their alias under
//! `/api/runtime/`, where a Functions front forwards them), every A2A
//! JSON-RPC method and HTTP+JSON call, every MCP method and tool (at both
//! of MCP's paths), every dashboard page. No key gets 401; B gets what the
//! documented rule gives it (docs/operations.md: 403 on an admin route, 404
//! as for an unknown run, task or instance, 403 / -32602 / invalid params
//! for a conversation another caller started, 409 for an instance id
//! another key holds), never any of A's data; and A's resources read back
//! unchanged. An operation the tables do not know fails the test by name,
//! so a new route cannot slip in unexamined. Every violation is collected
//! and the test fails once, listing them all. (The gRPC endpoint is not
//! here: it is admin-only as a whole, at one interceptor,
//! `http/grpc/access.rs`, which `durable_task_grpc` checks.)

mod cases;
mod open;
mod owned;
mod protocols;
mod races;
mod wire;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Method;
use serde_json::{json, Value};

use crate::support::{FakeModel, HostBuilder, Reply};
use cases::{cases_of, judge, Case};
use open::{open_request, OPEN};
use owned::Owned;
use wire::{send, Answer, Request, MCP};

const ADMIN: &str = "admin-key-enumeration-0123456789";
const KEY_A: &str = "invoke-key-a-enumeration-012345";
const KEY_B: &str = "invoke-key-b-enumeration-012345";
/// In every message and input of A's, and so in everything that holds
/// A's data: B's answers must never contain it.
const MARK_A: &str = "SECRET-OF-A-7f3c";
/// B's messages in the races.
const MARK_B: &str = "SECRET-OF-B-91d0";

/// The dashboard's pages and feed (outside the OpenAPI document: a page for
/// browsers). The test follows the page's own references to check the list.
const DASHBOARD: [&str; 7] = [
    "/dashboard",
    "/dashboard/",
    "/dashboard/app.js",
    "/dashboard/views.js",
    "/dashboard/lib.js",
    "/dashboard/style.css",
    "/dashboard/events",
];

#[tokio::test(flavor = "multi_thread")]
async fn key_b_reaches_nothing_of_key_a_by_any_route_method_or_tool_and_no_key_reaches_anything() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    // The clerk is asked for a refund: its tool call waits for a human.
    model.respond_with(Arc::new(|request| {
        match request.last_user_message().starts_with("Refund") {
            true => Reply::ToolCall("refund".into(), json!({"order": "A1", "amount": 2000})),
            false => Reply::Echo,
        }
    }));
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "orchestration-tests", "approval", "chaining"])
        .openai(&model, "sk")
        .arg("--mcp")
        .arg("--api-key")
        .arg(&format!("admin:{ADMIN}"))
        .arg("--api-key")
        .arg(&format!("invoke:{KEY_A}"))
        .arg("--api-key")
        .arg(&format!("invoke:{KEY_B}"))
        .start();
    let base = host.base.clone();
    let a = owned::create(&host).await;
    let before = owned::snapshot(&host, &a).await;
    let asked = model.requests().len();
    let mut found: Vec<String> = Vec::new();

    // Every operation of the document.
    let document = send(&base, &Request::get("/api/openapi.json"), None)
        .await
        .json;
    let paths = document["paths"].as_object().cloned().unwrap_or_default();
    assert!(paths.len() >= 20, "the document: {document}");
    let mut documented = BTreeSet::new();
    let mut exercised = 0;
    for (template, item) in &paths {
        for (method, operation) in item.as_object().into_iter().flatten() {
            let Ok(method) = Method::from_bytes(method.to_uppercase().as_bytes()) else {
                continue;
            };
            documented.insert((method.to_string(), template.clone()));
            exercised += operation_cases(&base, &method, template, operation, &a, &mut found).await;
        }
    }
    for (method, template, _) in OPEN {
        if !documented.contains(&(method.to_string(), template.to_string())) {
            found.push(format!(
                "open route {method} {template} is not in the document: remove it from OPEN"
            ));
        }
    }

    // The protocols' own operations.
    protocols::probe_a2a(&base, &a, &mut found).await;
    protocols::probe_mcp(&base, &a, &mut found).await;
    let listed = send(
        &base,
        &wire::mcp_call(&a.b_mcp_session, "tools/list", json!({})),
        Some(KEY_B),
    )
    .await;
    let tools: Vec<String> = listed.json["result"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect();
    assert!(tools.len() > 3, "B's tools/list: {}", listed.brief());
    let mcp = protocols::mcp_cases(&a, &tools, &mut found);
    for case in &mcp {
        exercise(&base, "MCP", case, false, None, &mut found).await;
        let alias = alias_of(case);
        exercise(&base, "MCP at /api", &alias, false, None, &mut found).await;
    }
    eprintln!(
        "access_enumeration: {} documented operations ({exercised} calls on A's resources), {} MCP tools ({} calls), {} dashboard pages",
        documented.len(),
        tools.len(),
        mcp.len(),
        DASHBOARD.len()
    );
    let initialize = wire::mcp_request(
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "x", "version": "1"}}}),
    );
    no_key(&base, &format!("POST {MCP}"), &initialize, &mut found).await;
    let initialize = initialize.under(ALIAS);
    no_key(
        &base,
        &format!("POST {ALIAS}{MCP}"),
        &initialize,
        &mut found,
    )
    .await;

    dashboard(&base, &mut found).await;

    // A's resources as they were: an event B raised is taken in a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = owned::snapshot(&host, &a).await;
    for ((what, was), (_, is)) in before.iter().zip(&after) {
        if was != is {
            found.push(format!("{what} changed while B called: was {was}, is {is}"));
        }
    }
    for request in model.requests().iter().skip(asked) {
        if request.body.to_string().contains(MARK_A) {
            found.push(format!(
                "the model was asked with A's conversation while B called: {}",
                request.transcript().join(" | ")
            ));
        }
    }

    races::race_new_conversations(&host, &mut found).await;

    assert!(
        found.is_empty(),
        "{} violation(s) of who may reach what:\n- {}",
        found.len(),
        found.join("\n- ")
    );
}

/// The cases of one operation of the document, exercised; an operation
/// the table does not know is a violation.
async fn operation_cases(
    base: &str,
    method: &Method,
    template: &str,
    operation: &Value,
    a: &Owned,
    found: &mut Vec<String>,
) -> usize {
    let route = format!("{method} {template}");
    let scope = operation["description"]
        .as_str()
        .and_then(|d| d.split("Scope: `").nth(1))
        .and_then(|rest| rest.split('`').next());
    let security = operation["security"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some((_, _, _)) = OPEN
        .iter()
        .find(|(m, t, _)| *m == method.as_str() && *t == template)
    {
        if !security.is_empty() || scope.is_some() {
            found.push(format!(
                "{route} is listed open here but the document wants a key"
            ));
        }
        let request = open_request(template);
        for key in [None, Some(KEY_B)] {
            let answer = send(base, &request, key).await;
            if answer.text.contains(MARK_A) || answer.status == 401 {
                found.push(format!("open route {route}: {}", answer.brief()));
            }
        }
        return 0;
    }
    if scope.is_none() {
        found.push(format!(
            "{route} is open in the document and not listed in OPEN with a reason"
        ));
    }
    let cases = cases_of(method, template, a).unwrap_or_default();
    if cases.is_empty() {
        found.push(format!(
            "route {route} has no case in access_enumeration: add one"
        ));
        return 0;
    }
    let count = cases.len();
    let offers_token = security.iter().any(|r| r.get("urlToken").is_some());
    let token = offers_token.then(|| match template.contains("/instances/") {
        true => a.b_instance_token.as_str(),
        false => a.b_stream_token.as_str(),
    });
    for case in cases {
        exercise(base, &route, &case, scope == Some("admin"), token, found).await;
        // A route under `/runtime/` at its alias: the same rules.
        if template.starts_with("/runtime/") {
            let alias = alias_of(&case);
            let at = format!("{method} {ALIAS}{template}");
            exercise(base, &at, &alias, scope == Some("admin"), token, found).await;
        }
        // The same routes under the dashboard's mount: admin alone.
        let mounted = case.request.under("/dashboard/api");
        let answer = send(base, &mounted, Some(KEY_B)).await;
        if let Some(why) = judge(cases::Refusal::Status(403), true, &answer) {
            found.push(format!(
                "{route}: {} at the dashboard's mount ({mounted}): {why}",
                case.what
            ));
        }
        no_key(base, &route, &mounted, found).await;
    }
    count
}

/// Where the routes under `/runtime/` are served again (for a Functions
/// front, which keeps `/runtime/` for itself).
const ALIAS: &str = "/api";

/// `case` at the alias of its route.
fn alias_of(case: &Case) -> Case {
    Case {
        what: format!("{} (at {ALIAS})", case.what),
        request: case.request.under(ALIAS),
        refusal: case.refusal,
    }
}

/// B's call and the keyless one; for a `GET`, B's `HEAD` too; where the
/// document offers a URL token, B's own token (of B's instance or run).
async fn exercise(
    base: &str,
    route: &str,
    case: &Case,
    admin: bool,
    token: Option<&str>,
    found: &mut Vec<String>,
) {
    let request = &case.request;
    no_key(base, route, request, found).await;
    let answer = send(base, request, Some(KEY_B)).await;
    match judge(case.refusal, admin, &answer) {
        Some(why) => found.push(format!("{route}: {} ({request}): {why}", case.what)),
        None if request.method == Method::GET => {
            let head = send(base, &request.head(), Some(KEY_B)).await;
            if head.status != answer.status {
                found.push(format!(
                    "{route}: {} as HEAD: wanted {} as GET answers, got {}",
                    case.what,
                    answer.status,
                    head.brief()
                ));
            }
        }
        None => {}
    }
    if let Some(token) = token {
        let with = request.with_token(token);
        let answer = send(base, &with, None).await;
        if answer.status != 401 || answer.text.contains(MARK_A) {
            found.push(format!(
                "{route}: {} with B's own URL token ({with}): wanted 401, got {}",
                case.what,
                answer.brief()
            ));
        }
    }
}

/// Without a key: 401 `unauthorized`, nothing of A's.
async fn no_key(base: &str, route: &str, request: &Request, found: &mut Vec<String>) {
    let answer: Answer = send(base, request, None).await;
    if answer.status != 401 || answer.text.contains(MARK_A) {
        found.push(format!(
            "{route} without a key ({request}): wanted 401, got {}",
            answer.brief()
        ));
    }
}

/// The dashboard's pages: admin alone. The list is checked against what
/// the page itself loads.
async fn dashboard(base: &str, found: &mut Vec<String>) {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut to_read = vec!["/dashboard".to_string()];
    while let Some(page) = to_read.pop() {
        if page == "/dashboard/events" || !seen.insert(page.clone()) {
            continue;
        }
        let answer = send(base, &Request::get(&page), Some(ADMIN)).await;
        for piece in answer.text.split(['"', '`', '\'', '(', ')', ' ', '\n']) {
            let piece = piece.trim_end_matches([',', '.', ';', ':']);
            let referenced =
                piece.starts_with("/dashboard/") && !piece.starts_with("/dashboard/api");
            if referenced && !piece.contains('$') {
                to_read.push(piece.to_string());
            }
        }
    }
    seen.insert("/dashboard/events".into());
    for page in &seen {
        if !DASHBOARD.contains(&page.as_str()) {
            found.push(format!(
                "dashboard page {page} has no case in access_enumeration: add it to DASHBOARD"
            ));
        }
    }
    for page in DASHBOARD {
        let request = Request::get(page);
        let answer = send(base, &request, Some(KEY_B)).await;
        if let Some(why) = judge(cases::Refusal::Status(403), true, &answer) {
            found.push(format!("dashboard page {page} with B's key: {why}"));
        }
        no_key(base, page, &request, found).await;
    }
}
