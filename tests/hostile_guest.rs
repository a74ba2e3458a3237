//! A component built to attack the host from inside (issue 54): each attack
//! ends in a clear error for the attacker's own instance or run, and a
//! second tenant's work is measured while the attack is under way
//! ([`tenant::measure`]): its one-step orchestration and its agent run
//! answer within the bounds stated in `docs/reliability.md`, and the host's
//! memory stays under its bound.

use serde_json::{json, Value};

use crate::support::durable::{start, status as status_of, wait_for, wait_for_custom_status};
use crate::support::host::Host;
use crate::support::{client, FakeModel, HostBuilder, Reply};

/// A host serving the attacker (`hostile`), the second tenant
/// ([`tenant::COMPONENTS`]) and `others` (what an attack meets), on the
/// fake model, answering as [`script_the_model`] says.
fn beside(dir: &std::path::Path, model: &FakeModel, others: &[&str]) -> HostBuilder {
    script_the_model(model);
    let mut components = vec!["hostile"];
    components.extend(tenant::COMPONENTS);
    for other in others {
        if !components.contains(other) {
            components.push(other);
        }
    }
    HostBuilder::new(dir)
        .components(&components)
        .openai(model, "sk-test")
}

/// The hostile agent's requests are answered from its user message (a JSON
/// list of tool calls, `[[name, arguments], …]`) and then with what its
/// tools said; every other agent's with the echo. Scripted replies would
/// go to whichever agent asks first, the tenant's included.
fn script_the_model(model: &FakeModel) {
    model.respond_with(std::sync::Arc::new(|request| {
        if !is_hostile(request) {
            return Reply::Echo;
        }
        let last = request.messages().last().cloned().unwrap_or_default();
        if last["role"] == "tool" {
            return Reply::ToolResult;
        }
        let calls: Vec<(String, Value)> =
            serde_json::from_str(&request.last_user_message()).unwrap_or_default();
        Reply::ToolCalls(calls)
    }));
}

/// Whether `request` is the hostile agent's (by its instructions).
fn is_hostile(request: &crate::support::fake_model::Recorded) -> bool {
    request
        .messages()
        .first()
        .is_some_and(|m| m["content"].as_str() == Some("Call the tool the user names."))
}

/// The hostile agent's last request to the model.
fn last_hostile_request(model: &FakeModel) -> crate::support::fake_model::Recorded {
    model
        .requests()
        .into_iter()
        .rev()
        .find(is_hostile)
        .expect("a request of the hostile agent")
}

/// The cores shared between components.
mod cpu_share;

/// A second tenant: another component's one-step orchestration and agent
/// run, measured while an attack is under way, and the host's memory.
pub(crate) mod tenant;
use tenant::measure_while_attacking;

/// The attacks that were contained before the suite measured a tenant
/// beside them, and the floods.
mod contained;

/// The findings whose poison reached the scheduler's reads.
mod scheduler_rows;

/// A component's event route reaches only the instances of the
/// orchestrations its own component serves. The hostile component declares
/// `evil/{instanceId}` raising `go`, the event another component's
/// `wait_event` waits for: called on that instance, it answers as for an
/// unknown instance (404, the same body) and the instance keeps waiting,
/// then completes by its own route. The route still raises on the hostile
/// component's own instance. (Before, it completed the other component's
/// instance with the attacker's payload.)
#[tokio::test(flavor = "multi_thread")]
async fn a_components_event_route_reaches_only_its_own_components_instances() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let victim = start(&host, "wait_event", &json!(null)).await;
    wait_for_custom_status(&host, &victim, "", &json!("waiting")).await;

    let evil = format!("/api/evil/{victim}");
    let ((status, refused), _) = tokio::join!(
        post(&host, &evil, "attacker"),
        tenant::measure(
            &host,
            "an event route called on another component's instance"
        )
    );
    let never = "never-was-an-instance";
    let (unknown_status, unknown) = post(&host, &format!("/api/evil/{never}"), "attacker").await;
    assert_eq!(
        (status, unknown_status),
        (404, 404),
        "{refused} / {unknown}"
    );
    assert_eq!(
        refused.to_string().replace(&victim, never),
        unknown.to_string(),
        "another component's instance answers as an unknown one"
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (_, waiting) = status_of(&host, &victim).await;
    assert_eq!(waiting["runtimeStatus"], "Running", "{waiting}");

    // Its own component's route completes it, with its own payload.
    let (status, accepted) = post(&host, &format!("/api/go/{victim}"), "owner").await;
    assert_eq!(status, 202, "{accepted}");
    let done = wait_for(&host, &victim, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(done["output"], json!("owner"), "{done}");

    // The route works on the instances of its own component.
    let own = start(&host, "evil_route", &json!(null)).await;
    wait_for(&host, &own, &["Running"]).await;
    let (status, accepted) = post(&host, &format!("/api/evil/{own}"), "mine").await;
    assert_eq!(status, 202, "{accepted}");
    let done = wait_for(&host, &own, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], json!("mine"), "{done}");
}

/// `POST` `path` with the JSON string `payload`: status and body.
async fn post(host: &Host, path: &str, payload: &str) -> (u16, Value) {
    let response = client()
        .post(host.url(path))
        .json(&json!(payload))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A tool's result over `--max-tool-result-bytes` is refused to the model
/// with a tool error saying its size, and nothing of it is stored: a 30 MB
/// result went to the model in a 31.5 MB request and stayed in the session
/// for every later one. Results under the limit are held to the history
/// budget: while a turn is over it, its oldest results are left out.
#[tokio::test(flavor = "multi_thread")]
async fn a_tool_result_over_the_limit_is_refused_to_the_model_and_not_stored() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let calls = json!([["big_result", { "bytes": 30_000_000 }]]);
    let (answer, _) = tokio::join!(
        run(&host, "huge", &calls),
        tenant::measure(&host, "a 30 MB tool result")
    );
    let request = last_hostile_request(&model);
    let size = request.body.to_string().len();
    assert!(size < 1 << 20, "the model was sent {size} bytes");
    let said = request.last_tool_result().unwrap_or_default();
    assert!(
        said.contains("'big_result' was 30000002 bytes, over the host's limit of 131072 bytes"),
        "{said}"
    );
    assert!(answer.contains("over the host's limit"), "{answer}");
    let stored = session(&host, "huge").await;
    assert!(
        stored.len() < 1 << 20,
        "the session holds {} bytes",
        stored.len()
    );

    // Four results of 100 KB each (under the limit), about 100,000 tokens
    // in one turn: over the default budget of 64,000, the oldest two go.
    let calls: Vec<Value> = (0..4)
        .map(|_| json!(["big_result", { "bytes": 100_000 }]))
        .collect();
    run(&host, "four", &json!(calls)).await;
    let request = last_hostile_request(&model);
    let size = request.body.to_string().len();
    assert!(size < 300_000, "the model was sent {size} bytes");
    let results: Vec<String> = request
        .messages()
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"].as_str().map(str::to_string))
        .collect();
    assert_eq!(results.len(), 4, "one result per call");
    assert!(
        results[..2]
            .iter()
            .all(|r| r.contains("left out") && r.contains("history budget")),
        "{:?}",
        results.iter().map(|r| r.len()).collect::<Vec<_>>()
    );
    assert!(results[2..].iter().all(|r| r.len() > 100_000));
}

/// Runs the hostile agent in session `session`, the model asking for the
/// tool `calls` (`[[name, arguments], …]`): its answer.
async fn run(host: &Host, session: &str, calls: &Value) -> String {
    let response = client()
        .post(host.url("/api/agents/hostile/run"))
        .header("accept", "application/json")
        .json(&json!({ "message": calls.to_string(), "sessionId": session }))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["response"].as_str().unwrap_or_default().to_string()
}

/// The stored conversation of `session`, as the sessions API answers it.
async fn session(host: &Host, session: &str) -> String {
    client()
        .get(host.url(&format!("/api/agents/hostile/sessions/{session}")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// An orchestration's agent call acts for the instance (or, with keys, the
/// key that started it): a conversation a user started over HTTP cannot be
/// joined by a component naming its session id, and nothing of the call
/// lands in it; a conversation the instance starts is its own to continue.
#[tokio::test(flavor = "multi_thread")]
async fn an_orchestration_cannot_join_a_conversation_it_did_not_start() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let told = crate::support::client()
        .post(host.url("/api/agents/writer/run"))
        .json(&json!({"message": "my secret is 42", "sessionId": "bob-session-7"}))
        .send()
        .await
        .unwrap();
    assert_eq!(told.status(), 200);
    let attack = start(&host, "join_session", &json!({"session": "bob-session-7"})).await;
    let again = [("join_session", json!({"session": "bob-session-7"}))];
    measure_while_attacking(
        &host,
        "an orchestration joining another's conversation",
        &again,
    )
    .await;
    let done = wait_for(&host, &attack, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Failed", "{done}");
    assert!(
        done["output"]
            .as_str()
            .is_some_and(|o| o.contains("started by another caller")),
        "{done}"
    );
    assert!(
        !done.to_string().contains("secret is 42"),
        "the user's conversation leaked: {done}"
    );
    // The model never saw the user's message again, and the user's
    // conversation holds only the user's turn.
    let heard = model
        .requests()
        .iter()
        .filter(|r| r.body.to_string().contains("my secret is 42"))
        .count();
    assert_eq!(heard, 1, "the model was asked over the user's history");
    let session: serde_json::Value =
        crate::support::get_json(host.url("/api/agents/writer/sessions/bob-session-7")).await;
    assert!(
        !session.to_string().contains("what did I tell you"),
        "the component's turn landed in the user's conversation: {session}"
    );
    // A conversation of its own (the chaining sample continues one).
    let own = start(&host, "join_session", &json!({"session": "mine-1"})).await;
    let done = wait_for(&host, &own, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
}

/// An orchestration that continues as new at once, forever, ran ~3,500
/// generations a second (six held both cores; two ran ~270 a second each
/// in a debug build): each instance may continue as new 20 times at once,
/// then 10 times a second. Another component's one-step orchestration
/// completes meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_continue_as_new_loop_is_paced_and_others_run_meanwhile() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[]).start();
    let input = json!(0);
    let mut loops = Vec::new();
    for _ in 0..2 {
        loops.push(start(&host, "forever_new", &input).await);
    }
    let began = std::time::Instant::now();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    tenant::measure(&host, "two continue-as-new loops").await;
    let victim = start(&host, "sequence", &json!({ "n": 1 })).await;
    let done = crate::support::durable::wait_for_within(
        &host,
        &victim,
        &["Completed", "Failed"],
        std::time::Duration::from_secs(5),
    )
    .await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let seconds = began.elapsed().as_secs_f64();
    for id in &loops {
        let (_, status) = crate::support::durable::status(&host, id).await;
        // The input of the execution running now is its generation.
        let generation = status["input"]
            .as_str()
            .and_then(|i| i.parse::<f64>().ok())
            .or_else(|| status["input"].as_f64())
            .unwrap_or_else(|| panic!("{status}"));
        eprintln!("{id}: {generation} generations in {seconds:.1} s");
        // 20 at once, then 10 a second; unpaced it was hundreds a second.
        assert!(
            generation < 20.0 + 13.0 * seconds,
            "{id} ran {generation} generations in {seconds:.1} s"
        );
        assert!(
            generation >= 20.0,
            "{id} ran {generation} generations: {status}"
        );
    }
}

/// Activities that sleep (no CPU) holding every guest slot made another
/// component's one-step orchestration fail after the episode timeout,
/// "orchestration code must not block": its wait for a slot was counted as
/// its own running time. The timeout starts when the guest has a slot, and
/// a component without a `max_instances` grant holds half the host's slots
/// at most: the victim completes before any nap ends.
#[tokio::test(flavor = "multi_thread")]
async fn a_component_holding_every_slot_does_not_fail_another_components_episode() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[])
        .arg("--max-instances")
        .arg("8")
        .arg("--episode-timeout")
        .arg("2s")
        .start();
    // Naps far longer than the victim needs, so that the bound below
    // holds on a busy machine and still tells the two apart.
    let flood = start(&host, "nap_flood", &json!({ "count": 8, "ms": 8_000 })).await;
    // Until the naps hold their slots (none is free: an episode of the
    // flood itself needs one too).
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let started = std::time::Instant::now();
    let victim = start(&host, "sequence", &json!({ "n": 1 })).await;
    let done = wait_for(&host, &victim, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    let took = started.elapsed();
    eprintln!("the victim completed in {took:?}");
    // The flood holds its share, half the slots: the victim never waits for
    // a nap to end (without the share it waited for the first: 7.5 s here).
    assert!(
        took < std::time::Duration::from_secs(4),
        "the victim took {took:?}"
    );
    tenant::measure(&host, "eight naps holding the component's share").await;
    let (_, napping) = status_of(&host, &flood).await;
    assert!(
        ["Pending", "Running"].contains(&napping["runtimeStatus"].as_str().unwrap_or_default()),
        "measured after the attack: {napping}"
    );
    let done = wait_for(&host, &flood, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(done["output"], json!(8), "{done}");
}

/// Many instances of one component, each with an activity that sleeps:
/// their share of guest slots held, the rest of their episodes waited for
/// it holding the engine's episode slots (32), and another component's
/// episodes queued behind them for as long as the naps lasted. An episode
/// waits for its component's share without an engine slot.
#[tokio::test(flavor = "multi_thread")]
async fn episodes_waiting_for_their_components_share_do_not_hold_others_back() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let host = beside(dir.path(), &model, &[])
        .arg("--max-instances")
        .arg("64")
        .start();
    // 32 naps hold the share (half of 64); 34 more episodes wait for it.
    // Naps far longer than the victim needs (see the bound below).
    let input = json!({ "count": 1, "ms": 6_000 });
    let mut floods = Vec::new();
    for _ in 0..66 {
        floods.push(start(&host, "nap_flood", &input).await);
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let victim = start(&host, "sequence", &json!({ "n": 1 })).await;
    let done = wait_for(&host, &victim, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    let took = started.elapsed();
    eprintln!("the victim completed in {took:?}");
    // Queued behind the naps it waited about as long as they last (5.6 s
    // here); now it waits for none (0.1 s), half a nap is the bound.
    assert!(
        took < std::time::Duration::from_secs(3),
        "the victim took {took:?}"
    );
    tenant::measure(&host, "66 instances of naps holding their share").await;
    let (_, napping) = status_of(&host, &floods[65]).await;
    assert!(
        ["Pending", "Running"].contains(&napping["runtimeStatus"].as_str().unwrap_or_default()),
        "measured after the attack: {napping}"
    );
    for id in &floods {
        let done = wait_for(&host, id, &["Completed", "Failed"]).await;
        assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    }
}
