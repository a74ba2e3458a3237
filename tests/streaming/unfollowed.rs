//! A run nobody streams writes no stream entries: its stream is its answer,
//! written from its record when a reader asks, however late (after the
//! run, after a kill -9 and a restart), and a reader arriving mid-run gets
//! every chunk from the first. Counted in the store itself. On a shared
//! PostgreSQL hub only runs whose caller waits for the whole answer are
//! held (nobody else knows their ids before they end): an asynchronous
//! run's entries are written, for a reader on any host.

use serde_json::{json, Value};

use super::{post_run, read_events, slow_run, stream_url, text_of};
use crate::support::fake_model::echo_of;
use crate::support::host::{hub_for, test_store};
use crate::support::{client, FakeModel, HostBuilder};

/// Rows in the hub's `stream_entries`.
async fn stream_rows(dir: &std::path::Path) -> i64 {
    let hub = hub_for(dir);
    match test_store() {
        Some(url) => {
            let pool = sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(&url)
                .await
                .unwrap();
            let sql = format!("SELECT COUNT(*) FROM \"taskhub_{hub}\".stream_entries");
            let rows = sqlx::query_scalar(&sql).fetch_one(&pool).await.unwrap();
            pool.close().await;
            rows
        }
        None => {
            let file = dir.join(format!("agenthost.{hub}.db"));
            let pool = sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(1)
                .connect(&format!("sqlite://{}", file.display()))
                .await
                .unwrap();
            let rows = sqlx::query_scalar("SELECT COUNT(*) FROM stream_entries")
                .fetch_one(&pool)
                .await
                .unwrap();
            pool.close().await;
            rows
        }
    }
}

async fn whole_text(url: &str) -> (u16, String) {
    let response = client()
        .get(url)
        .header("accept", "text/plain")
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_nobody_streams_writes_no_entries_and_its_stream_is_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let builder = HostBuilder::new(dir.path()).openai(&model, "sk");
    let mut host = builder.start();
    let mut runs = Vec::new();
    for i in 0..6 {
        let message = format!("Tell me about tea, part {i}");
        let answer: Value = post_run(
            &host,
            "writer",
            json!({ "message": message }),
            "application/json",
        )
        .await
        .json()
        .await
        .unwrap();
        let correlation = answer["correlation_id"].as_str().unwrap().to_string();
        runs.push((correlation, echo_of(&message)));
    }
    assert_eq!(
        stream_rows(dir.path()).await,
        0,
        "6 whole answers: no entry"
    );
    // An asynchronous run nobody follows either.
    let accepted: Value = post_run(
        &host,
        "writer",
        json!({"message": "Later, about coffee", "wait_for_response": false}),
        "application/json",
    )
    .await
    .json()
    .await
    .unwrap();
    let correlation = accepted["correlation_id"].as_str().unwrap().to_string();
    crate::support::wait_run_finished(&host.url(&format!("/api/agents/writer/runs/{correlation}")))
        .await;
    runs.push((correlation, echo_of("Later, about coffee")));
    let asynchronous = stream_rows(dir.path()).await;
    if test_store().is_some() {
        assert!(asynchronous > 0, "on a shared hub, written for any host");
    } else {
        assert_eq!(asynchronous, 0, "alone on its store, held");
    }

    // A reader after the run: the answer, whole, as events and as text.
    let (first, answer) = &runs[0];
    let events = read_events(
        client()
            .get(stream_url(&host, "writer", first))
            .send()
            .await
            .unwrap(),
        |_| false,
    )
    .await;
    assert_eq!(text_of(&events), *answer, "{events:?}");
    assert_eq!(events.last().unwrap().event, "complete", "{events:?}");
    assert_eq!(
        whole_text(&stream_url(&host, "writer", &runs[1].0)).await,
        (200, runs[1].1.clone())
    );
    // A reader holding every entry is told nothing follows.
    let last_id = events.last().unwrap().id.clone().unwrap();
    let done = client()
        .get(stream_url(&host, "writer", first))
        .header("last-event-id", &last_id)
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 204);
    assert_eq!(
        stream_rows(dir.path()).await,
        asynchronous + 4,
        "two streams asked for: an answer and an end each"
    );

    // After kill -9 and a restart, the rest still read as their answers.
    host.kill();
    let host = builder.start();
    for (correlation, answer) in &runs[2..] {
        assert_eq!(
            whole_text(&stream_url(&host, "writer", correlation)).await,
            (200, answer.clone()),
            "{correlation}"
        );
    }
}

/// A run held in memory until a reader comes mid-run: the reader gets every
/// chunk from the first, and a second reader after the end the same text.
#[tokio::test(flavor = "multi_thread")]
async fn a_reader_arriving_mid_run_gets_every_chunk_from_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path()).openai(&model, "sk").start();
    let (correlation, text) = slow_run(&host, &model, 20).await;
    // Let a few chunks be held before anyone asks.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let url = stream_url(&host, "writer", &correlation);
    let live = read_events(client().get(&url).send().await.unwrap(), |_| false).await;
    assert_eq!(text_of(&live), text, "{live:?}");
    assert!(
        live.iter().filter(|e| e.event == "chunk").count() > 2,
        "chunk by chunk: {live:?}"
    );
    let again = read_events(client().get(&url).send().await.unwrap(), |_| false).await;
    assert_eq!(text_of(&again), text);
}
