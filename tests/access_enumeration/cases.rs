//! The table: for each operation of the OpenAPI document, the calls key B
//! makes on key A's resources, and the answer the documented rule gives B
//! (docs/operations.md, "What each caller sees"). An operation missing here
//! fails the test by name.

use reqwest::Method;
use serde_json::json;

use super::owned::Owned;
use super::wire::{Answer, Request};
use super::MARK_A;

/// What B's call must get when the operation's scope is `invoke` (with the
/// scope `admin`, B gets 403 `forbidden`, whatever the operation).
#[derive(Clone, Copy, Debug)]
pub enum Refusal {
    /// This HTTP status: 404 as for an unknown run, task, instance or
    /// session; 409 for an id another key holds; 400 for what the binding
    /// refuses (A2A's invalid params, push notifications).
    Status(u16),
    /// 403 `session_of_another_caller`: a conversation another caller started.
    SessionOfAnother,
    /// A JSON-RPC error with this code (A2A's JSON-RPC binding answers 200).
    Rpc(i64),
    /// An MCP error: a JSON-RPC error, or a tool result marked `isError`.
    Mcp,
    /// B's own work (a listing, a start, a new task): any answer, as long as
    /// nothing of A's shows and A's resources stay as they were.
    Own,
}

/// One call of B's, on one of A's resources.
pub struct Case {
    pub what: String,
    pub request: Request,
    pub refusal: Refusal,
}

fn case(what: impl Into<String>, request: Request, refusal: Refusal) -> Case {
    Case {
        what: what.into(),
        request,
        refusal,
    }
}

/// Whether B's `answer` is the refusal due (`admin`: the operation's
/// documented scope is `admin`); the violation, if not.
pub fn judge(refusal: Refusal, admin: bool, answer: &Answer) -> Option<String> {
    if answer.text.contains(MARK_A) {
        return Some(format!("answered with A's data: {}", answer.brief()));
    }
    let refused = if admin {
        answer.status == 403 && answer.json["errorCode"] == "forbidden"
    } else {
        match refusal {
            Refusal::Status(status) => answer.status == status,
            Refusal::SessionOfAnother => {
                answer.status == 403 && answer.json["errorCode"] == "session_of_another_caller"
            }
            Refusal::Rpc(code) => answer.status == 200 && answer.rpc_error() == Some(code),
            Refusal::Mcp => {
                answer.rpc_error().is_some() || answer.json["result"]["isError"] == true
            }
            Refusal::Own => answer.status != 0,
        }
    };
    let due = if admin {
        "403 forbidden (admin scope)".to_string()
    } else {
        format!("{refusal:?}")
    };
    (!refused).then(|| format!("wanted {due}, got {}", answer.brief()))
}

/// The cases of operation `method` `template`, `None` for one the table
/// does not know.
pub fn cases_of(method: &Method, template: &str, a: &Owned) -> Option<Vec<Case>> {
    use Refusal::{Own, SessionOfAnother, Status};
    const INSTANCES: &str = "/runtime/webhooks/durabletask/instances";
    let not_found = Status(404);
    let run = |agent: &str, id: &str| format!("/api/agents/{agent}/runs/{id}");
    let instance = |id: &str| format!("{INSTANCES}/{id}");
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
    let cases = match (method.as_str(), template) {
        ("POST", "/api/agents/{name}/run") => {
            let mut cases = Vec::new();
            for (agent, session) in [
                ("writer", &a.writer_session),
                ("writer", &a.context),
                ("writer", &a.thread),
                ("clerk", &a.clerk_session),
            ] {
                let body = json!({"message": "what was said here?", "sessionId": session});
                let path = format!("/api/agents/{agent}/run");
                cases.push(case(
                    format!("B continues A's conversation {agent}/{session}"),
                    Request::post(&path, body.clone()),
                    SessionOfAnother,
                ));
                let mut later = body.clone();
                later["waitForResponse"] = json!(false);
                cases.push(case(
                    format!("B continues A's conversation {agent}/{session}, answered later"),
                    Request::post(&path, later),
                    SessionOfAnother,
                ));
                cases.push(case(
                    format!("B continues A's conversation {agent}/{session}, streamed"),
                    Request::post(&path, body).header("accept", "text/event-stream"),
                    SessionOfAnother,
                ));
            }
            cases
        }
        ("GET", "/api/agents/{name}/runs/{correlation_id}") => vec![
            case(
                "B reads A's run",
                Request::get(run("writer", &a.writer_run)),
                not_found,
            ),
            case(
                "B reads A's waiting run",
                Request::get(run("clerk", &a.clerk_run)),
                not_found,
            ),
            case(
                "B reads A's A2A task as a run",
                Request::get(run("writer", &a.task)),
                not_found,
            ),
            case(
                "B reads A's MCP run",
                Request::get(run("writer", &a.thread_run)),
                not_found,
            ),
            case(
                "B reads the agent run of A's orchestration",
                Request::get(run("writer", &a.orchestration_run)),
                not_found,
            ),
        ],
        ("GET", "/api/agents/{name}/runs/{correlation_id}/stream") => vec![
            case(
                "B reads A's run's stream",
                Request::get(format!("{}/stream", run("writer", &a.writer_run))),
                not_found,
            ),
            case(
                "B reads A's run's stream as text",
                Request::get(format!("{}/stream", run("writer", &a.writer_run)))
                    .header("accept", "text/plain"),
                not_found,
            ),
            case(
                "B follows A's waiting run's stream",
                Request::get(format!("{}/stream?cursor=0", run("clerk", &a.clerk_run))),
                not_found,
            ),
            case(
                "B reads the stream of A's orchestration's agent run",
                Request::get(format!("{}/stream", run("writer", &a.orchestration_run))),
                not_found,
            ),
        ],
        ("POST", "/api/agents/{name}/runs/{correlation_id}/cancel") => vec![
            case(
                "B cancels A's waiting run",
                Request::post(format!("{}/cancel", run("clerk", &a.clerk_run)), json!({})),
                not_found,
            ),
            case(
                "B cancels A's finished run",
                Request::post(
                    format!("{}/cancel", run("writer", &a.writer_run)),
                    json!({}),
                ),
                not_found,
            ),
            case(
                "B cancels the agent run of A's orchestration",
                Request::post(
                    format!("{}/cancel", run("writer", &a.orchestration_run)),
                    json!({}),
                ),
                not_found,
            ),
        ],
        ("POST", "/api/agents/{name}/runs/{correlation_id}/approvals") => vec![case(
            "B approves A's waiting tool call",
            Request::post(
                format!("{}/approvals", run("clerk", &a.clerk_run)),
                json!({"call_id": "call_refund", "approved": true}),
            ),
            not_found,
        )],
        ("GET", "/api/agents/{name}/runs") => vec![case(
            "B lists the runs of A's session",
            Request::get(format!(
                "/api/agents/writer/runs?sessionId={}",
                a.writer_session
            )),
            Own,
        )],
        ("GET", "/api/agents/{name}/sessions/{session_id}") => vec![
            case(
                "B reads A's conversation",
                Request::get(format!("/api/agents/writer/sessions/{}", a.writer_session)),
                not_found,
            ),
            case(
                "B reads A's A2A context",
                Request::get(format!("/api/agents/writer/sessions/{}", a.context)),
                not_found,
            ),
        ],
        ("DELETE", "/api/agents/{name}/sessions/{session_id}") => vec![case(
            "B deletes A's conversation",
            Request::delete(format!("/api/agents/writer/sessions/{}", a.writer_session)),
            not_found,
        )],
        ("GET", "/api/agents/{name}/{session_id}") => vec![case(
            "B reads A's conversation at the hosting route",
            Request::get(format!("/api/agents/writer/{}", a.thread)),
            not_found,
        )],
        ("GET", "/api/components") => vec![case(
            "B lists components",
            Request::get("/api/components"),
            Own,
        )],
        ("GET", "/api/components/{name}") => vec![case(
            "B reads a component and its replay check",
            Request::get("/api/components/writer"),
            Own,
        )],
        ("GET", "/metrics") => vec![case("B reads metrics", Request::get("/metrics"), Own)],
        ("POST", "/api/orchestrators/{name}") => vec![case(
            "B starts an instance of its own",
            Request::post("/api/orchestrators/child", json!({"note": "B's"})),
            Own,
        )],
        ("POST", "/api/orchestrators/{name}/{instance_id}") => vec![
            case(
                "B starts an instance under A's finished instance's id",
                Request::post(
                    format!("/api/orchestrators/child/{}", a.finished),
                    json!({"note": "B's"}),
                ),
                Status(409),
            ),
            case(
                "B starts an instance under A's waiting instance's id",
                Request::post(
                    format!("/api/orchestrators/wait_event/{}", a.waiting),
                    json!({"note": "B's"}),
                ),
                Status(409),
            ),
        ],
        ("POST", "/api/{path}") => vec![
            case(
                "B approves A's approval instance at its event route",
                Request::post(
                    format!("/api/approval/{}", a.approval),
                    json!({"approved": true}),
                ),
                not_found,
            ),
            case(
                "B raises go on A's waiting instance at its event route",
                Request::post(format!("/api/go/{}", a.waiting), json!({"by": "B"})),
                not_found,
            ),
            case(
                "B starts chaining at its declared start route",
                Request::post("/api/writer/run", json!({})),
                Own,
            ),
        ],
        ("GET", INSTANCES) => vec![case(
            "B lists instances with A's ids",
            Request::get(format!("{INSTANCES}?instanceIdPrefix=a-")),
            Own,
        )],
        ("DELETE", INSTANCES) => vec![case(
            "B purges instances with A's ids",
            Request::delete(format!("{INSTANCES}?instanceIdPrefix=a-")),
            Own,
        )],
        ("GET", "/runtime/webhooks/durabletask/instances/{id}") => vec![
            case(
                "B reads A's waiting instance",
                Request::get(instance(&a.waiting)),
                not_found,
            ),
            case(
                "B reads A's approval instance with its history",
                Request::get(format!("{}?showHistory=true", instance(&a.approval))),
                not_found,
            ),
            case(
                "B reads A's finished instance",
                Request::get(instance(&a.finished)),
                not_found,
            ),
        ],
        ("DELETE", "/runtime/webhooks/durabletask/instances/{id}") => vec![case(
            "B purges A's finished instance",
            Request::delete(instance(&a.finished)),
            not_found,
        )],
        ("POST", "/runtime/webhooks/durabletask/instances/{id}/raiseEvent/{event}") => vec![
            case(
                "B raises go on A's waiting instance",
                Request::post(
                    format!("{}/raiseEvent/go", instance(&a.waiting)),
                    json!("B"),
                ),
                not_found,
            ),
            case(
                "B approves A's approval instance",
                Request::post(
                    format!("{}/raiseEvent/approval_received", instance(&a.approval)),
                    json!({"approved": true}),
                ),
                not_found,
            ),
        ],
        ("POST", "/runtime/webhooks/durabletask/instances/{id}/terminate") => vec![case(
            "B terminates A's waiting instance",
            Request::post(
                format!("{}/terminate?reason=B", instance(&a.waiting)),
                json!({}),
            ),
            not_found,
        )],
        ("POST", "/runtime/webhooks/durabletask/instances/{id}/suspend") => vec![case(
            "B suspends A's approval instance",
            Request::post(
                format!("{}/suspend?reason=B", instance(&a.approval)),
                json!({}),
            ),
            not_found,
        )],
        ("POST", "/runtime/webhooks/durabletask/instances/{id}/resume") => vec![case(
            "B resumes A's approval instance",
            Request::post(
                format!("{}/resume?reason=B", instance(&a.approval)),
                json!({}),
            ),
            not_found,
        )],
        // A2A's JSON-RPC binding, at both of its URLs: every method of the
        // table in `protocols`.
        ("POST", "/a2a/{agent}") => super::protocols::rpc_cases(a, ""),
        ("POST", "/a2a/{agent}/") => super::protocols::rpc_cases(a, "/"),
        // The HTTP+JSON binding.
        ("POST", "/a2a/{agent}/{verb}") => vec![
            case(
                "B sends on A's context",
                Request::post(
                    "/a2a/writer/message:send",
                    message(Some(&a.context), None, "what was said?"),
                ),
                Status(400),
            ),
            case(
                "B sends on A's task",
                Request::post(
                    "/a2a/writer/message:send",
                    message(None, Some(&a.task), "what was said?"),
                ),
                not_found,
            ),
            case(
                "B decides A's waiting tool call by a message on its task",
                Request::post("/a2a/clerk/message:send", approve.clone()),
                not_found,
            ),
            case(
                "B streams on A's context",
                Request::post(
                    "/a2a/writer/message:stream",
                    message(Some(&a.context), None, "what was said?"),
                ),
                Status(400),
            ),
        ],
        ("GET", "/a2a/{agent}/tasks") => vec![case(
            "B lists the tasks of A's context",
            Request::get(format!("/a2a/writer/tasks?contextId={}", a.context)),
            Own,
        )],
        ("GET", "/a2a/{agent}/tasks/{id}") => vec![
            case(
                "B reads A's task",
                Request::get(format!("/a2a/writer/tasks/{}", a.task)),
                not_found,
            ),
            case(
                "B subscribes to A's waiting task",
                Request::get(format!("/a2a/clerk/tasks/{}:subscribe", a.clerk_run)),
                not_found,
            ),
        ],
        ("POST", "/a2a/{agent}/tasks/{id}") => vec![
            case(
                "B cancels A's waiting task",
                Request::post(
                    format!("/a2a/clerk/tasks/{}:cancel", a.clerk_run),
                    json!({}),
                ),
                not_found,
            ),
            case(
                "B subscribes to A's waiting task",
                Request::post(
                    format!("/a2a/clerk/tasks/{}:subscribe", a.clerk_run),
                    json!({}),
                ),
                not_found,
            ),
        ],
        ("POST", "/a2a/{agent}/tasks/{id}/pushNotificationConfigs") => vec![case(
            "B sets a push configuration on A's task",
            Request::post(
                format!("/a2a/writer/tasks/{}/pushNotificationConfigs", a.task),
                json!({"url": "http://127.0.0.1:9/hook"}),
            ),
            Status(400),
        )],
        ("GET", "/a2a/{agent}/tasks/{id}/pushNotificationConfigs") => vec![case(
            "B lists the push configurations of A's task",
            Request::get(format!(
                "/a2a/writer/tasks/{}/pushNotificationConfigs",
                a.task
            )),
            Status(400),
        )],
        ("GET", "/a2a/{agent}/tasks/{id}/pushNotificationConfigs/{config}") => vec![case(
            "B reads a push configuration of A's task",
            Request::get(format!(
                "/a2a/writer/tasks/{}/pushNotificationConfigs/c1",
                a.task
            )),
            Status(400),
        )],
        ("DELETE", "/a2a/{agent}/tasks/{id}/pushNotificationConfigs/{config}") => vec![case(
            "B deletes a push configuration of A's task",
            Request::delete(format!(
                "/a2a/writer/tasks/{}/pushNotificationConfigs/c1",
                a.task
            )),
            Status(400),
        )],
        _ => return None,
    };
    Some(cases)
}
