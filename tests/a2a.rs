//! A2A 1.0 over JSON-RPC, driven by the a2a-sdk Python client (PyPI,
//! pinned, installed into target/a2a-venv by `make test`): the card is
//! resolved, messages are sent blocking and streamed, a conversation goes on
//! by `contextId`, tasks are read and listed in pages, a long task is
//! canceled, a tool call is approved through INPUT_REQUIRED, a dropped stream
//! is resubscribed and gets exactly the rest, and the errors carry the
//! spec's codes; the same client over the HTTP+JSON binding. Malformed JSON-RPC gets its error object, never a 5xx.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use serde_json::{json, Value};

use crate::support::fake_model::echo_of;
use crate::support::{client, workspace, FakeModel, HostBuilder, Reply};

fn python() -> std::path::PathBuf {
    crate::support::venv_python("a2a-venv")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_a2a_sdk_client_sends_streams_lists_cancels_approves_and_resubscribes() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .openai(&model, "sk")
        .start();
    // The model's replies, in the order the script asks.
    model.push(Reply::Echo); // hello
    model.push(Reply::Echo); // again
    model.push(Reply::Paced(
        Duration::from_millis(20),
        Box::new(Reply::Echo),
    )); // stream me
    model.push(Reply::Delay(Duration::from_secs(60), Box::new(Reply::Echo))); // slow
    model.push(Reply::ToolCall(
        "refund".into(),
        json!({"order": "A1", "amount": 2000}),
    ));
    model.push(Reply::ToolResult);
    let long = "one two three four five six seven eight";
    model.push(Reply::Paced(
        Duration::from_millis(300),
        Box::new(Reply::Text(long.into())),
    ));
    model.push(Reply::Echo); // rest hello
    model.push(Reply::Paced(
        Duration::from_millis(20),
        Box::new(Reply::Echo),
    )); // rest stream

    let mut child = Command::new(python())
        .arg(workspace().join("tests/a2a/client.py"))
        .arg(&host.base)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stdout = String::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(120), lines.next_line()).await;
        let Ok(Ok(Some(line))) = next else { break };
        stdout.push_str(&line);
        stdout.push('\n');
        // The slow task is canceled once the model took its reply (else
        // the reply would be left for the next task's turn).
        if line.contains("\"step\": \"slow\"") {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while model.requests().len() < 4 {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the slow task never asked the model"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            stdin.write_all(b"go\n").await.unwrap();
            stdin.flush().await.unwrap();
        }
    }
    let output = child.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{stdout}\n{stderr}\n{}",
        host.output()
    );
    let steps: HashMap<String, Value> = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| (v["step"].as_str().unwrap().to_string(), v))
        .collect();
    let step = |name: &str| {
        steps
            .get(name)
            .unwrap_or_else(|| panic!("no step {name}: {stdout}"))
    };

    let card = step("card");
    assert_eq!(card["name"], "clerk");
    assert_eq!(card["binding"], "JSONRPC");
    assert_eq!(card["url"], format!("{}/a2a/clerk", host.base));
    let skills: Vec<&str> = card["skills"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        skills.contains(&"clerk") && skills.contains(&"clerk.refund"),
        "{card}"
    );

    let sent = step("send");
    assert_eq!(sent["state"], "TASK_STATE_COMPLETED");
    assert_eq!(sent["answer"], echo_of("hello"));
    let context = sent["context"].as_str().unwrap();
    let again = step("continue");
    assert_eq!(again["context"], context);
    assert_eq!(again["answer"], echo_of("again"));
    let transcript = model.requests()[1].transcript();
    assert!(
        transcript.contains(&"user: hello".to_string()),
        "one conversation: {transcript:?}"
    );

    let streamed = step("stream");
    assert_eq!(streamed["first"], "TASK_STATE_SUBMITTED", "{streamed}");
    assert_eq!(streamed["last"], "TASK_STATE_COMPLETED", "{streamed}");
    assert_eq!(streamed["text"], echo_of("stream me"), "{streamed}");
    let kinds = streamed["kinds"].as_array().unwrap();
    assert_eq!(kinds[0], "task");
    assert!(
        kinds.iter().filter(|k| *k == "artifact_update").count() >= 3,
        "{streamed}"
    );

    let got = step("get");
    assert_eq!(got["state"], "TASK_STATE_COMPLETED");
    assert_eq!(got["history"], 1, "historyLength keeps the last message");
    assert_eq!(got["last"], echo_of("hello"));

    let listed = step("list");
    assert_eq!(listed["first"].as_array().unwrap().len(), 2, "{listed}");
    assert_eq!(
        listed["second"],
        json!([sent["task"]]),
        "oldest on the last page: {listed}"
    );
    assert_eq!(listed["more"], true);
    assert_eq!(listed["end"], "");

    let canceled = step("cancel");
    assert_eq!(canceled["submitted"], "TASK_STATE_SUBMITTED");
    assert_eq!(canceled["state"], "TASK_STATE_CANCELED");
    assert_eq!(step("cancel-again")["error"], "TaskNotCancelableError");
    let unknown = step("unknown");
    assert_eq!(unknown["error"], "TaskNotFoundError");
    assert_eq!(unknown["data"]["taskId"], "no-such-task");

    let approval = step("approval");
    assert_eq!(
        approval["waiting"], "TASK_STATE_INPUT_REQUIRED",
        "{approval}"
    );
    assert_eq!(
        approval["pending"][0]["pendingApprovals"][0]["callId"], "call_refund",
        "{approval}"
    );
    assert_eq!(approval["same"], true);
    assert_eq!(approval["state"], "TASK_STATE_COMPLETED", "{approval}");
    assert!(
        approval["answer"].as_str().unwrap().contains("tool said"),
        "{approval}"
    );

    let resubscribed = step("resubscribe");
    let before = resubscribed["before"].as_str().unwrap();
    let snapshot = resubscribed["snapshot"].as_str().unwrap();
    let rest = resubscribed["rest"].as_str().unwrap();
    assert_eq!(resubscribed["first"], "task");
    assert!(
        !before.is_empty() && snapshot.starts_with(before),
        "{resubscribed}"
    );
    assert_eq!(
        format!("{snapshot}{rest}"),
        long,
        "nothing twice, nothing missing: {resubscribed}"
    );
    assert!(
        !rest.is_empty(),
        "the task was still under way: {resubscribed}"
    );
    assert_eq!(resubscribed["last"], "TASK_STATE_COMPLETED");

    let rest = step("rest");
    assert_eq!(rest["state"], "TASK_STATE_COMPLETED", "{rest}");
    assert_eq!(rest["answer"], echo_of("rest hello"), "{rest}");
    assert_eq!(rest["got"], "TASK_STATE_COMPLETED", "{rest}");
    assert_eq!(rest["listed"].as_array().unwrap().len(), 1, "{rest}");
    assert_eq!(rest["missing"], "TaskNotFoundError", "{rest}");
    assert_eq!(rest["ended"], "TaskNotCancelableError", "{rest}");
    assert_eq!(rest["streamed"], echo_of("rest stream"), "{rest}");
    assert_eq!(rest["last"], "TASK_STATE_COMPLETED", "{rest}");

    let no_version = step("no-version");
    assert_eq!(no_version["code"], -32009);
    assert_eq!(no_version["reason"], "VERSION_NOT_SUPPORTED");
}

/// A blocking `SendMessage` to the `clerk` agent; the JSON-RPC result's task.
async fn send_to_clerk(base: &str, message: Value) -> Value {
    let answer: Value = client()
        .post(format!("{base}/a2a/clerk"))
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
            "params": {"message": message}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    answer["result"]["task"].clone()
}

/// Two calls decided in one message: the first decision already wakes the
/// run, which finds the second call undecided and says it waits; that word
/// must not end the wait of the message that decided both (it would answer
/// INPUT_REQUIRED with nothing pending). Rounds, to give the race its chance.
#[tokio::test(flavor = "multi_thread")]
async fn a_message_deciding_every_pending_call_is_answered_once_the_task_completed() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .openai(&model, "sk")
        .start();
    for round in 0..5 {
        model.push(Reply::ToolCalls(vec![
            ("refund".into(), json!({"order": "A1", "amount": 100})),
            ("refund".into(), json!({"order": "B2", "amount": 200})),
        ]));
        model.push(Reply::ToolResult);
        let asked = send_to_clerk(
            &host.base,
            json!({"messageId": format!("ask-{round}"), "role": "ROLE_USER",
                "parts": [{"text": "Refund A1 and B2."}]}),
        )
        .await;
        assert_eq!(
            asked["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
            "{asked}"
        );
        let task = asked["id"].as_str().unwrap();
        let decided = send_to_clerk(
            &host.base,
            json!({"messageId": format!("decide-{round}"), "role": "ROLE_USER", "taskId": task,
            "parts": [{"data": {"approvals": [
                {"callId": "call_0_refund", "approved": true},
                {"callId": "call_1_refund", "approved": true},
            ]}}]}),
        )
        .await;
        assert_eq!(decided["id"], task, "{decided}");
        assert_eq!(
            decided["status"]["state"],
            "TASK_STATE_COMPLETED",
            "round {round}: {decided}\n{}",
            host.output()
        );
        let answer = decided["artifacts"][0]["parts"][0]["text"]
            .as_str()
            .unwrap_or("");
        assert!(answer.contains("tool said"), "{decided}");
    }
}

async fn rpc(base: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let response = client()
        .post(format!("{base}/a2a/writer"))
        .header("A2A-Version", "1.0")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_json_rpc_gets_its_error_object_and_never_a_server_error() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let cases: Vec<(&str, String, i64)> = vec![
        ("not JSON", "{\"jsonrpc\": ".into(), -32700),
        ("a batch", r#"[{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}]"#.into(), -32600),
        ("no method", r#"{"jsonrpc":"2.0","id":1}"#.into(), -32600),
        ("not 2.0", r#"{"jsonrpc":"1.0","id":1,"method":"GetTask"}"#.into(), -32600),
        ("an object id", r#"{"jsonrpc":"2.0","id":{},"method":"GetTask"}"#.into(), -32600),
        ("unknown method", r#"{"jsonrpc":"2.0","id":1,"method":"message/send"}"#.into(), -32601),
        ("params not an object", r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":[1]}"#.into(), -32602),
        ("wrong params", r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":5}}"#.into(), -32602),
        ("no text", r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"parts":[]}}}"#.into(), -32602),
        ("a file part", r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"parts":[{"url":"https://x/y.png"}]}}}"#.into(), -32005),
        ("page too large", r#"{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{"pageSize":1000}}"#.into(), -32602),
        ("push config", r#"{"jsonrpc":"2.0","id":1,"method":"CreateTaskPushNotificationConfig","params":{}}"#.into(), -32003),
        ("unknown task", r#"{"jsonrpc":"2.0","id":"t","method":"CancelTask","params":{"id":"nope"}}"#.into(), -32001),
        ("subscribe to none", r#"{"jsonrpc":"2.0","id":"t","method":"SubscribeToTask","params":{"id":"nope"}}"#.into(), -32001),
    ];
    for (what, body, code) in cases {
        let (status, answer) = rpc(&host.base, body).await;
        assert_eq!(status, 200, "{what}: {answer}");
        assert_eq!(answer["error"]["code"], code, "{what}: {answer}");
        assert_eq!(answer["jsonrpc"], "2.0", "{what}");
        assert_eq!(
            answer["error"]["data"][0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo",
            "{what}: {answer}"
        );
        assert!(
            !answer["error"]["message"].as_str().unwrap().is_empty(),
            "{what}"
        );
    }
    // 64 MiB: refused as soon as the limit is read past (the host does not
    // read the rest), as an error object, not a 413 or a 5xx. (Past what the
    // kernel's socket buffers take on loopback, up to 32 MiB here: 10 MiB
    // fitted in them under load and read as "all sent".)
    let base = host.base.clone();
    let (status, body) = tokio::task::spawn_blocking(move || {
        crate::hostile_input::send_chunked(&base, "/a2a/writer", 64 << 20)
    })
    .await
    .unwrap();
    assert!(status.contains(" 200 "), "{status} {body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["error"]["code"], -32600, "{answer}");
    // A version the server does not speak, however it is dressed.
    for version in ["1.0junk", "0.3, 1.0", "2.0", "1.x"] {
        let response = client()
            .post(host.url("/a2a/writer"))
            .header("A2A-Version", version)
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"x"}}"#)
            .send()
            .await
            .unwrap();
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], -32009, "{version}: {answer}");
    }
    // A message on an ended task with decisions that decide nothing, or
    // with text beside them, is refused: nothing is dropped unread.
    let (_, sent) = rpc(
        &host.base,
        r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"parts":[{"text":"hi"}]}}}"#,
    )
    .await;
    let task = sent["result"]["task"]["id"].as_str().unwrap().to_string();
    for (parts, code) in [
        (r#"[{"text":"more"},{"data":{"approvals":[]}}]"#, -32602),
        (r#"[{"data":{"approvals":[]}}]"#, -32004),
    ] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"SendMessage","params":{{"message":{{"taskId":"{task}","parts":{parts}}}}}}}"#
        );
        let (_, answer) = rpc(&host.base, body).await;
        assert_eq!(answer["error"]["code"], code, "{parts}: {answer}");
    }
    // The id comes back as it was sent.
    let (_, answer) = rpc(
        &host.base,
        r#"{"jsonrpc":"2.0","id":"abc","method":"GetTask","params":{"id":"nope"}}"#,
    )
    .await;
    assert_eq!(answer["id"], "abc");
    // An agent nobody serves is not a JSON-RPC matter: 404 in JSON.
    let response = client()
        .post(host.url("/a2a/nobody"))
        .header("A2A-Version", "1.0")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], "agent_not_found");
    // The HTTP+JSON binding: a google.rpc.Status body with the spec's status.
    for (method, path, body, status, reason) in [
        (
            reqwest::Method::POST,
            "/a2a/writer/message:send",
            "{\"message\": ",
            400,
            "PARSE_ERROR",
        ),
        (
            reqwest::Method::POST,
            "/a2a/writer/message:send",
            "[]",
            400,
            "INVALID_REQUEST",
        ),
        (
            reqwest::Method::GET,
            "/a2a/writer/tasks/nope",
            "",
            404,
            "TASK_NOT_FOUND",
        ),
        (
            reqwest::Method::POST,
            "/a2a/writer/tasks/nope:cancel",
            "",
            404,
            "TASK_NOT_FOUND",
        ),
        (
            reqwest::Method::POST,
            "/a2a/writer/tasks/nope:frobnicate",
            "",
            404,
            "METHOD_NOT_FOUND",
        ),
        (
            reqwest::Method::GET,
            "/a2a/writer/tasks?pageSize=many",
            "",
            400,
            "INVALID_PARAMS",
        ),
    ] {
        let response = client()
            .request(method.clone(), host.url(path))
            .header("A2A-Version", "1.0")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), status, "{method} {path}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], status, "{method} {path}: {answer}");
        assert_eq!(
            answer["error"]["details"][0]["reason"], reason,
            "{method} {path}: {answer}"
        );
    }
    assert_eq!(
        model.requests().len(),
        1,
        "nothing malformed reached the model (one well-formed message did)"
    );
}

/// What the A2A kit (a2aproject/a2a-tck, `make a2a-tck`) checks of any
/// agent, in our words, on both bindings: the interface URL with a trailing
/// slash (the kit joins paths to it), a body that says it is not JSON
/// refused as `ContentTypeNotSupportedError`, each error with the spec's
/// code, HTTP status and `ErrorInfo`, push configuration answered
/// `PushNotificationNotSupportedError`.
#[tokio::test(flavor = "multi_thread")]
async fn what_the_a2a_kit_checks_of_any_agent_holds_on_both_bindings() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let post = |path: &str, content_type: &str, body: String| {
        client()
            .post(host.url(path))
            .header("A2A-Version", "1.0")
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    let json_of = |text: String| serde_json::from_str::<Value>(&text).unwrap_or(Value::Null);
    let send = r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"kit-1","role":"ROLE_USER","parts":[{"text":"hi"}]}}}"#;
    // The interface URL with a trailing slash is the same endpoint.
    let answer = post("/a2a/writer/", "application/json", send.into())
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let answer = json_of(answer.text().await.unwrap());
    assert_eq!(
        answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answer}"
    );
    // A body that says it is text, not JSON: -32005 with its ErrorInfo.
    let refused = json_of(
        post("/a2a/writer", "text/plain", send.into())
            .await
            .unwrap()
            .text()
            .await
            .unwrap(),
    );
    assert_eq!(refused["error"]["code"], -32005, "{refused}");
    assert_eq!(
        refused["error"]["data"][0]["reason"], "CONTENT_TYPE_NOT_SUPPORTED",
        "{refused}"
    );
    assert_eq!(
        refused["error"]["data"][0]["domain"], "a2a-protocol.org",
        "{refused}"
    );

    // HTTP+JSON: each error with the spec's HTTP status (section 5.4).
    let rest = |status: u16, body: &Value, reason: &str, grpc: &str| {
        assert_eq!(body["error"]["code"], status, "{body}");
        assert_eq!(body["error"]["status"], grpc, "{body}");
        assert_eq!(body["error"]["details"][0]["reason"], reason, "{body}");
        assert_eq!(
            body["error"]["details"][0]["@type"], "type.googleapis.com/google.rpc.ErrorInfo",
            "{body}"
        );
    };
    let file = r#"{"message":{"messageId":"kit-2","role":"ROLE_USER","parts":[{"raw":"dGNr","mediaType":"application/x-tck"}]}}"#;
    let answer = post("/a2a/writer/message:send", "application/json", file.into())
        .await
        .unwrap();
    assert_eq!(answer.status(), 415);
    rest(
        415,
        &json_of(answer.text().await.unwrap()),
        "CONTENT_TYPE_NOT_SUPPORTED",
        "INVALID_ARGUMENT",
    );
    let answer = post("/a2a/writer/message:send", "text/plain", "{}".into())
        .await
        .unwrap();
    assert_eq!(answer.status(), 415);
    // A task that ended cannot be canceled: 409.
    let task = answer_task(&host, "kit-3").await;
    let answer = post(
        &format!("/a2a/writer/tasks/{task}:cancel"),
        "application/json",
        "{}".into(),
    )
    .await
    .unwrap();
    assert_eq!(answer.status(), 409);
    rest(
        409,
        &json_of(answer.text().await.unwrap()),
        "TASK_NOT_CANCELABLE",
        "FAILED_PRECONDITION",
    );
    // Push notifications: the card says none; each operation says so.
    let configs = format!("/a2a/writer/tasks/{task}/pushNotificationConfigs");
    let requests = [
        client()
            .post(host.url(&configs))
            .header("content-type", "application/json")
            .body(r#"{"url":"https://example.com"}"#),
        client().get(host.url(&configs)),
        client().get(host.url(&format!("{configs}/c1"))),
        client().delete(host.url(&format!("{configs}/c1"))),
    ];
    for request in requests {
        let answer = request.header("A2A-Version", "1.0").send().await.unwrap();
        assert_eq!(answer.status(), 400);
        rest(
            400,
            &json_of(answer.text().await.unwrap()),
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            "UNIMPLEMENTED",
        );
    }
}

/// A completed task of `writer`, started over HTTP+JSON; its id.
async fn answer_task(host: &crate::support::host::Host, message_id: &str) -> String {
    let body = json!({"message": {"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "hi"}]}});
    let answer: Value = client()
        .post(host.url("/a2a/writer/message:send"))
        .header("A2A-Version", "1.0")
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        answer["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answer}"
    );
    answer["task"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}
