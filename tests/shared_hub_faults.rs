//! Several hosts on one PostgreSQL hub under faults (issue 18): a worker
//! paused past its lease, a COMMIT whose answer is lost, connections that
//! go silent. Every write of a host that lost its work is refused, nothing
//! is applied twice, and the hosts serve again without a restart.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::host::test_store;
use crate::support::{client, health, FakeModel, HostBuilder};

mod paused;
mod takeover;

/// The answer to a commit lost with its connection: the writer asks the
/// database whether the batch committed instead of writing it again. Two
/// answers are lost: that of a raised event (see [`raise_losing_the_answer`]
/// for its two paths), then that of a start (one statement with no
/// transaction around it: the proxy cuts right after it, so it committed).
/// The event is delivered once (a second delivery would complete
/// `two_events` with the same payload twice), and the start is answered
/// 202, not 409 by its own instance, its batch found committed.
/// PostgreSQL only.
#[tokio::test(flavor = "multi_thread")]
async fn an_ambiguous_commit_is_resolved_by_its_batch_id_and_never_applied_twice() {
    let Some(url) = test_store() else {
        return;
    };
    let (proxy, _dir, host) = host_behind_a_proxy(&url).await;
    // The event's journal entry travels in the statement's parameters.
    raise_losing_the_answer(&proxy, &host, "ambiguous", |p, bytes| p.cut_after(bytes)).await;
    let committed = host.output().matches(COMMITTED).count();
    start_losing_the_answer(&proxy, &host, "second-start", |p, id| p.cut_after(id)).await;
    // The log is read from the host's pipe by another thread: wait for it.
    host.wait_logged(COMMITTED, committed).await;
}

/// A batch's one statement that commits on the server while its answer
/// never comes back (the connection stays open, nothing arrives: the
/// writer's deadline is what gives up, and the answer was dropped with the
/// deadline, not lost by an error). The start's batch is found committed
/// and its answers stand: it is answered 202 (a second write would answer
/// 409 by its own instance); the raised event is delivered once (twice,
/// `two_events` would end with the first payload twice) on whichever of
/// its two paths it took. PostgreSQL only.
#[tokio::test(flavor = "multi_thread")]
async fn a_commit_whose_answer_never_comes_is_found_committed_and_not_written_again() {
    let Some(url) = test_store() else {
        return;
    };
    let (proxy, _dir, host) = host_behind_a_proxy(&url).await;
    raise_losing_the_answer(&proxy, &host, "unanswered", |p, bytes| p.hush_after(bytes)).await;
    let committed = host.output().matches(COMMITTED).count();
    start_losing_the_answer(&proxy, &host, "unanswered-start", |p, id| p.hush_after(id)).await;
    // The log is read from the host's pipe by another thread: wait for it.
    host.wait_logged(COMMITTED, committed).await;
}

/// A start's statement that reaches the server only after the host gave up
/// on its connection (the client is cut, the server gets the statement half
/// a second later): the writer ends that connection's server process before
/// it asks whether the batch committed, so the answer it gets is final and
/// the late statement never runs after it. The start is answered 202.
/// PostgreSQL only.
#[tokio::test(flavor = "multi_thread")]
async fn a_commit_still_on_its_way_to_the_server_is_waited_for_not_written_twice() {
    let Some(url) = test_store() else {
        return;
    };
    let (proxy, _dir, host) = host_behind_a_proxy(&url).await;
    start_losing_the_answer(&proxy, &host, "late-start", |p, id| {
        p.cut_after_late(id, Duration::from_millis(500))
    })
    .await;
    host.wait_logged("the server process of the lost connection has ended", 0)
        .await;
}

/// An event raised at an instance that is not hot on the host (it restarted)
/// goes into its inbox in a transaction; the statement that writes it
/// reaches the server only after the host gave up on the connection, inside
/// a transaction still open there. The host ends that server process, finds
/// the batch not committed and writes the event again: it is delivered once
/// (twice, `two_events` would end with the first payload twice).
/// PostgreSQL only.
#[tokio::test(flavor = "multi_thread")]
async fn an_event_on_its_way_to_the_server_after_its_writer_gave_up_is_delivered_once() {
    use crate::support::durable::{raise, start_with_id, wait_for};
    let Some(url) = test_store() else {
        return;
    };
    let (proxy, dir, mut host) = host_behind_a_proxy(&url).await;
    let id = start_with_id(&host, "two_events", "cold-late", &serde_json::json!(null)).await;
    wait_for(&host, &id, &["Running"]).await;
    // A new process: nothing of the instance is in memory.
    host.terminate();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .store(&proxy.postgres_url(&url))
        .start();
    proxy.cut_after_late(b"event_raised", Duration::from_millis(500));
    assert_eq!(raise(&host, &id, "step", &serde_json::json!(1)).await, 202);
    assert_eq!(
        proxy.cuts_after_done(),
        1,
        "the statement's answer was lost"
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(raise(&host, &id, "step", &serde_json::json!(2)).await, 202);
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(
        done["output"],
        serde_json::json!([1, 2]),
        "{done}\n{}",
        host.output()
    );
}

/// One host on the PostgreSQL database `url`, through a proxy that can cut
/// its connections.
async fn host_behind_a_proxy(
    url: &str,
) -> (
    crate::support::tcp_proxy::TcpProxy,
    tempfile::TempDir,
    crate::support::host::Host,
) {
    let proxy = crate::support::tcp_proxy::TcpProxy::start("127.0.0.1:5432".parse().unwrap()).await;
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests"])
        .store(&proxy.postgres_url(url))
        .start();
    (proxy, dir, host)
}

/// What the writer logs when the batch whose answer it lost is found
/// committed.
const COMMITTED: &str = "the batch had committed";

/// Starts `two_events` as `id` and raises its two events, the first after
/// `lose` armed the proxy to lose the answer to the statement that writes
/// it (the event's journal entry names it: `event_raised`). Which statement
/// that is depends on a race the test does not decide: an instance idle
/// here takes the event into its episode, one statement that is its own
/// commit (the lost answer is then of a commit made, found committed); one
/// whose worker has not yet let go of it after its first episode gets it
/// into its inbox, in a transaction whose COMMIT is never sent (rolled
/// back, written again). Either way the event is delivered once: a second
/// delivery would complete the instance with the first payload twice, none
/// would leave it waiting. (Which path ran, the CI of 2026-12-06 showed,
/// is up to the machine's load: the test checks the outcome, not the path.)
async fn raise_losing_the_answer(
    proxy: &crate::support::tcp_proxy::TcpProxy,
    host: &crate::support::host::Host,
    id: &str,
    lose: impl FnOnce(&crate::support::tcp_proxy::TcpProxy, &[u8]),
) {
    use crate::support::durable::{raise, start_with_id, status, wait_for};
    let id = start_with_id(host, "two_events", id, &serde_json::json!(null)).await;
    wait_for(host, &id, &["Running"]).await;
    let cuts = proxy.cuts_after_done();
    lose(proxy, b"event_raised");
    assert_eq!(raise(host, &id, "step", &serde_json::json!(1)).await, 202);
    assert_eq!(
        proxy.cuts_after_done(),
        cuts + 1,
        "the statement's answer was lost"
    );
    // The raise was answered once its write was settled: a second
    // delivery, were there one, shows within the half second.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, running) = status(host, &id).await;
    assert_eq!(
        running["runtimeStatus"], "Running",
        "delivered twice: {running}"
    );
    assert_eq!(raise(host, &id, "step", &serde_json::json!(2)).await, 202);
    let done = wait_for(host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], serde_json::json!([1, 2]), "{done}");
}

/// Starts `two_events` as `id` after `lose` armed the proxy to lose the
/// answer to the statement that writes it (given the bytes that name it):
/// the start must be answered 202, whether the batch had committed or was
/// written again.
async fn start_losing_the_answer(
    proxy: &crate::support::tcp_proxy::TcpProxy,
    host: &crate::support::host::Host,
    id: &str,
    lose: impl FnOnce(&crate::support::tcp_proxy::TcpProxy, &[u8]),
) {
    let cuts = proxy.cuts_after_done();
    // The id travels in the statement's parameters, and in no earlier one.
    lose(proxy, id.as_bytes());
    let started = client()
        .post(host.url(&format!("/api/orchestrators/two_events/{id}")))
        .json(&serde_json::json!(null))
        .send()
        .await
        .unwrap();
    assert_eq!(
        proxy.cuts_after_done(),
        cuts + 1,
        "the statement's answer was lost"
    );
    assert_eq!(started.status(), 202, "{}", started.text().await.unwrap());
    let (code, body) = crate::support::durable::status(host, id).await;
    assert_eq!(body["instanceId"], id, "{code}: {body}");
}

/// PostgreSQL connections that go silent (no reset, nothing flows: a silent
/// partition, a dropped NAT entry) for longer than the lease and every
/// deadline: once the database can be reached again the host serves again
/// within seconds, without a restart, and every start it acknowledged
/// completes once. PostgreSQL only.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_whose_database_connections_went_silent_serves_again_without_a_restart() {
    use crate::support::durable::{start, wait_for_within};
    use crate::support::tcp_proxy::TcpProxy;
    let Some(url) = test_store() else {
        return;
    };
    let proxy = TcpProxy::start("127.0.0.1:5432".parse().unwrap()).await;
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["orchestration-tests", "writer"])
        .openai(&model, "sk")
        .store(&proxy.postgres_url(&url))
        .arg("--lease")
        .arg("2s")
        .start();
    let input = serde_json::json!({"n": 3});
    let warm = start(&host, "sequence", &input).await;
    wait_for_within(&host, &warm, &["Completed"], Duration::from_secs(20)).await;

    // Silence: every open connection for good, new ones while it lasts.
    proxy.set_silent(true);
    proxy.abandon_open_connections();
    let during = {
        let url = host.url("/api/orchestrators/sequence");
        tokio::spawn(async move {
            client()
                .post(url)
                .json(&serde_json::json!({"n": 3}))
                .timeout(Duration::from_secs(40))
                .send()
                .await
        })
    };
    tokio::time::sleep(Duration::from_secs(12)).await;
    let (status, body) = health(&host.base, "/api/health/ready").await;
    assert_eq!(
        status, 503,
        "ready while the database is unreachable: {body}"
    );
    proxy.set_silent(false);

    // Serving again within seconds, on new connections.
    let healed = Instant::now();
    let after = loop {
        let response = client()
            .post(host.url("/api/orchestrators/sequence"))
            .json(&input)
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        if let Ok(response) = response {
            if response.status() == 202 {
                let body: Value = response.json().await.unwrap();
                break body["id"].as_str().unwrap().to_string();
            }
        }
        assert!(
            healed.elapsed() < Duration::from_secs(30),
            "no start answered 30 s after the database came back\n{}",
            host.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let done = wait_for_within(
        &host,
        &after,
        &["Completed", "Failed"],
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(done["output"], serde_json::json!(3), "{done}");
    let answer = client()
        .post(host.url("/api/agents/writer/run"))
        .body("Back again?")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    // What was acknowledged during the fault completes too.
    if let Ok(Ok(response)) = during.await {
        if response.status() == 202 {
            let body: Value = response.json().await.unwrap();
            let id = body["id"].as_str().unwrap().to_string();
            let done = wait_for_within(
                &host,
                &id,
                &["Completed", "Failed"],
                Duration::from_secs(30),
            )
            .await;
            assert_eq!(done["output"], serde_json::json!(3), "{done}");
        }
    }
    let started = Instant::now();
    while health(&host.base, "/api/health").await.0 != 200 {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "health stayed 503"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
