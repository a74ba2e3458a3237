//! The operations that are not routes of their own: A2A's JSON-RPC methods
//! (one route, many methods), the HTTP+JSON binding's verbs (one route
//! template, several calls), MCP's methods and tools. Each has its table
//! here, and a probe that the host answers nothing the table lacks.

use std::collections::BTreeSet;

use reqwest::Method;
use serde_json::{json, Value};

use super::cases::{Case, Refusal};
use super::owned::Owned;
use super::wire::{mcp_call, rpc, send, Answer, Request, MCP};
use super::KEY_B;

/// A2A's JSON-RPC methods (1.0's names, 0.3's, and a few a client might
/// try): the probe asks each of them of the host.
const RPC_PROBES: [&str; 24] = [
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
    "message/send",
    "message/stream",
    "tasks/get",
    "tasks/list",
    "tasks/cancel",
    "tasks/resubscribe",
    "tasks/pushNotificationConfig/set",
    "tasks/pushNotificationConfig/get",
    "tasks/pushNotificationConfig/list",
    "tasks/pushNotificationConfig/delete",
    "agent/getAuthenticatedExtendedCard",
    "GetAgentCard",
    "DeleteTask",
];

/// The calls B makes with each JSON-RPC method, at `/a2a/{agent}{slash}`.
pub fn rpc_cases(a: &Owned, slash: &str) -> Vec<Case> {
    use Refusal::{Own, Rpc};
    let (task_not_found, invalid_params, push, card) =
        (Rpc(-32001), Rpc(-32602), Rpc(-32003), Rpc(-32007));
    let message = |context: Option<&str>, task: Option<&str>, text: &str| {
        let mut message = json!({"messageId": format!("b-{}", uuid::Uuid::new_v4()),
            "role": "ROLE_USER", "parts": [{"text": text}]});
        if let Some(context) = context {
            message["contextId"] = json!(context);
        }
        if let Some(task) = task {
            message["taskId"] = json!(task);
        }
        json!({ "message": message })
    };
    let approve = json!({"message": {"messageId": "b-decides", "role": "ROLE_USER",
        "taskId": a.clerk_run, "parts": [{"data": {"approvals": [
            {"callId": "call_refund", "approved": true}]}}]}});
    let push_config = json!({"taskId": a.task, "id": "c1", "url": "http://127.0.0.1:9/hook"});
    let table: Vec<(&str, &str, &str, Value, Refusal)> = vec![
        (
            "B sends on A's context",
            "writer",
            "SendMessage",
            message(Some(&a.context), None, "what was said?"),
            invalid_params,
        ),
        (
            "B sends on A's task",
            "writer",
            "SendMessage",
            message(None, Some(&a.task), "what was said?"),
            task_not_found,
        ),
        (
            "B decides A's waiting tool call",
            "clerk",
            "SendMessage",
            approve,
            task_not_found,
        ),
        (
            "B sends with A's messageId",
            "writer",
            "SendMessage",
            json!({"message": {"messageId": "a-message-1", "role": "ROLE_USER", "parts": [{"text": "B's text"}]}}),
            Own,
        ),
        (
            "B streams on A's context",
            "writer",
            "SendStreamingMessage",
            message(Some(&a.context), None, "what was said?"),
            invalid_params,
        ),
        (
            "B streams on A's task",
            "writer",
            "SendStreamingMessage",
            message(None, Some(&a.task), "what was said?"),
            task_not_found,
        ),
        (
            "B reads A's task",
            "writer",
            "GetTask",
            json!({"id": a.task, "historyLength": 10}),
            task_not_found,
        ),
        (
            "B reads A's HTTP run as a task",
            "writer",
            "GetTask",
            json!({"id": a.writer_run}),
            task_not_found,
        ),
        (
            "B reads A's waiting run as a task",
            "clerk",
            "GetTask",
            json!({"id": a.clerk_run}),
            task_not_found,
        ),
        ("B lists tasks", "writer", "ListTasks", json!({}), Own),
        (
            "B lists the tasks of A's context",
            "writer",
            "ListTasks",
            json!({"contextId": a.context, "includeArtifacts": true}),
            Own,
        ),
        (
            "B cancels A's waiting task",
            "clerk",
            "CancelTask",
            json!({"id": a.clerk_run}),
            task_not_found,
        ),
        (
            "B subscribes to A's waiting task",
            "clerk",
            "SubscribeToTask",
            json!({"id": a.clerk_run}),
            task_not_found,
        ),
        (
            "B sets a push configuration on A's task",
            "writer",
            "CreateTaskPushNotificationConfig",
            push_config.clone(),
            push,
        ),
        (
            "B reads a push configuration of A's task",
            "writer",
            "GetTaskPushNotificationConfig",
            push_config.clone(),
            push,
        ),
        (
            "B lists the push configurations of A's task",
            "writer",
            "ListTaskPushNotificationConfigs",
            push_config.clone(),
            push,
        ),
        (
            "B deletes a push configuration of A's task",
            "writer",
            "DeleteTaskPushNotificationConfig",
            push_config,
            push,
        ),
        (
            "B asks for the extended card",
            "writer",
            "GetExtendedAgentCard",
            json!({}),
            card,
        ),
    ];
    table
        .into_iter()
        .map(|(what, agent, method, params, refusal)| Case {
            what: format!("{what} ({method})"),
            request: Request::post(format!("/a2a/{agent}{slash}"), rpc(method, params)),
            refusal,
        })
        .collect()
}

/// The JSON-RPC method a case calls.
fn method_of(case: &Case) -> Option<String> {
    case.request.body.as_ref()?["method"]
        .as_str()
        .map(str::to_string)
}

/// Whether an answer says the method or call is not one the host has (on
/// B's own task, "no such task" says the path named no call on it).
fn unknown(answer: &Answer) -> bool {
    answer.rpc_error() == Some(-32601)
        || matches!(
            answer.status_reason(),
            Some("METHOD_NOT_FOUND" | "TASK_NOT_FOUND")
        )
        || matches!(answer.status, 404 | 405)
}

/// Every A2A call the host answers is in the tables: each JSON-RPC method
/// probed, each verb of the HTTP+JSON binding, each binding the card
/// offers. Violations are pushed to `found`.
pub async fn probe_a2a(base: &str, a: &Owned, found: &mut Vec<String>) {
    let table: BTreeSet<String> = rpc_cases(a, "").iter().filter_map(method_of).collect();
    // On B's own task: a method the host has answers it (or says what is
    // wrong with the call), one it has not says so.
    let params = json!({"id": a.b_task, "taskId": a.b_task});
    for method in RPC_PROBES {
        let answer = send(
            base,
            &Request::post("/a2a/writer", rpc(method, params.clone())),
            Some(KEY_B),
        )
        .await;
        let answered = !unknown(&answer);
        if answered && !table.contains(method) {
            found.push(format!(
                "A2A JSON-RPC method {method} is answered ({}) and has no case in access_enumeration: add one",
                answer.brief()
            ));
        }
        if !answered && table.contains(method) {
            found.push(format!(
                "A2A JSON-RPC method {method} in the table is not answered: {}",
                answer.brief()
            ));
        }
    }
    // The HTTP+JSON binding: `POST /a2a/{agent}/{verb}`, and the calls on
    // a task (`tasks/{id}:{call}`, a plain `GET tasks/{id}` reads it).
    let mut rest: BTreeSet<(String, String)> = BTreeSet::new();
    for (method, template) in [
        (Method::POST, "/a2a/{agent}/{verb}"),
        (Method::GET, "/a2a/{agent}/tasks/{id}"),
        (Method::POST, "/a2a/{agent}/tasks/{id}"),
    ] {
        for case in super::cases::cases_of(&method, template, a).unwrap_or_default() {
            rest.insert((method.to_string(), call_of(&case.request.path)));
        }
    }
    let mut probes: Vec<(Method, String)> = [
        "message:send",
        "message:stream",
        "message:subscribe",
        "message",
        "tasks:list",
        "card",
        "extendedAgentCard",
    ]
    .iter()
    .map(|verb| (Method::POST, format!("/a2a/writer/{verb}")))
    .collect();
    for call in [
        "",
        ":cancel",
        ":subscribe",
        ":resubscribe",
        ":get",
        ":delete",
        ":pause",
    ] {
        for method in [Method::GET, Method::POST] {
            probes.push((method, format!("/a2a/writer/tasks/{}{call}", a.b_task)));
        }
    }
    for (method, path) in probes {
        let mut request = Request::new(method.clone(), &path);
        if method == Method::POST {
            request = request.json(json!({"message": {"messageId": "b-probe", "role": "ROLE_USER", "parts": [{"text": "B's probe"}]}}));
        }
        let answer = send(base, &request, Some(KEY_B)).await;
        let call = (method.to_string(), call_of(&path));
        if !unknown(&answer) && !rest.contains(&call) {
            found.push(format!(
                "A2A HTTP+JSON call {method} {path} is answered ({}) and has no case in access_enumeration: add one",
                answer.brief()
            ));
        }
    }
    let card = send(
        base,
        &Request::get("/a2a/writer/.well-known/agent-card.json"),
        None,
    )
    .await;
    for interface in card.json["supportedInterfaces"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let binding = interface["protocolBinding"].as_str().unwrap_or_default();
        if !matches!(binding, "JSONRPC" | "HTTP+JSON") {
            found.push(format!("the agent card offers binding {binding}, which has no table in access_enumeration: add one"));
        }
    }
}

/// The call a path of the HTTP+JSON binding makes: its verb, or the part
/// after the task id's last `:` ("" reads the task).
fn call_of(path: &str) -> String {
    let last = path.rsplit('/').next().unwrap_or_default();
    match path.contains("/tasks/") {
        true => last
            .rsplit_once(':')
            .map_or_else(String::new, |(_, call)| call.to_string()),
        false => last.to_string(),
    }
}

/// MCP's methods the table has, and why each is safe for B to call.
const MCP_METHODS: [(&str, &str); 4] = [
    ("initialize", "opens a session of the caller's own"),
    ("ping", "answers nothing of anyone's"),
    ("tools/list", "the tools served: the same for every caller"),
    ("tools/call", "every tool has its case (mcp_cases)"),
];

/// MCP methods (of the 2025-06-18 spec and the drafts) the probe asks.
const MCP_PROBES: [&str; 15] = [
    "ping",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
    "tasks/list",
    "tasks/get",
    "tasks/result",
    "tasks/cancel",
];

/// Every MCP method the host answers is in [`MCP_METHODS`].
pub async fn probe_mcp(base: &str, a: &Owned, found: &mut Vec<String>) {
    for method in MCP_PROBES {
        let answer = send(
            base,
            &mcp_call(&a.b_mcp_session, method, json!({})),
            Some(KEY_B),
        )
        .await;
        let answered = answer.rpc_error() != Some(-32601);
        if answered && !MCP_METHODS.iter().any(|(m, _)| *m == method) {
            found.push(format!(
                "MCP method {method} is answered ({}) and has no case in access_enumeration: add one",
                answer.brief()
            ));
        }
    }
}

/// B's calls over MCP: each tool B is offered, on A's thread or instance
/// where A has one; and A's MCP session, used with B's key. `tools` is
/// B's `tools/list`.
pub fn mcp_cases(a: &Owned, tools: &[String], found: &mut Vec<String>) -> Vec<Case> {
    let on = |session: &str, method: &str, params: Value| mcp_call(session, method, params);
    let mut cases = vec![
        Case {
            what: "B lists tools".into(),
            request: on(&a.b_mcp_session, "tools/list", json!({})),
            refusal: Refusal::Own,
        },
        Case {
            what: "B lists tools on A's MCP session".into(),
            request: on(&a.mcp_session, "tools/list", json!({})),
            refusal: Refusal::Status(404),
        },
        Case {
            what: "B calls on A's MCP session".into(),
            request: on(
                &a.mcp_session,
                "tools/call",
                json!({"name": "writer", "arguments": {"query": "and you?"}}),
            ),
            refusal: Refusal::Status(404),
        },
        Case {
            what: "B opens the stream of A's MCP session".into(),
            request: Request::get(MCP)
                .header("accept", "text/event-stream")
                .header("mcp-session-id", a.mcp_session.clone())
                .header("mcp-protocol-version", "2025-06-18"),
            refusal: Refusal::Status(404),
        },
        Case {
            what: "B ends A's MCP session".into(),
            request: Request::delete(MCP)
                .header("mcp-session-id", a.mcp_session.clone())
                .header("mcp-protocol-version", "2025-06-18"),
            refusal: Refusal::Status(404),
        },
    ];
    // While starts are not owned, B's first start under A's finished id
    // replaces it; `wait_event` first, so that the replacement waits and
    // the later starts find it running rather than each replacing the last.
    let mut tools = tools.to_vec();
    tools.sort_by_key(|t| (t != "start_wait_event", t.clone()));
    for tool in tools {
        let (what, arguments, refusal) = match tool.as_str() {
            "writer" => (
                "B continues A's MCP thread",
                json!({"query": "what was said?", "threadId": a.thread}),
                Refusal::Mcp,
            ),
            "clerk" => (
                "B continues A's clerk conversation",
                json!({"query": "what was said?", "threadId": a.clerk_session}),
                Refusal::Mcp,
            ),
            "tuned" | "fetcher" => (
                "B asks an agent A has no thread of",
                json!({"query": "B's own"}),
                Refusal::Own,
            ),
            start if start.starts_with("start_") => (
                "B starts an instance under A's finished instance's id",
                json!({"instanceId": a.finished}),
                Refusal::Mcp,
            ),
            other => {
                found.push(format!(
                    "MCP tool {other} has no case in access_enumeration: add one"
                ));
                continue;
            }
        };
        cases.push(Case {
            what: format!("{what} (tool {tool})"),
            request: on(
                &a.b_mcp_session,
                "tools/call",
                json!({"name": tool, "arguments": arguments}),
            ),
            refusal,
        });
    }
    cases
}
