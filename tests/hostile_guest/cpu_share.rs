//! Guest CPU shared between components (`host/src/wasm/cpu_share.rs`).

use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::durable::{start, status as status_of, wait_for};
use crate::support::FakeModel;

/// How many of the attacker's activities compute at once.
const SPINNERS: usize = 100;

/// A component whose activities compute without end (100 of them, each
/// stopped at its 2 s CPU limit or its 12 s wall-clock limit) took the
/// cores from everyone: guest code yields at each 10 ms tick, every worker
/// thread ran the attacker's slices back to back, and each guest call and
/// each hop of another component's work (its HTTP handler, a commit's
/// answer, the next episode) queued behind them: a 10-step orchestration
/// took 3.6 s (1.4 s for 3 steps). Runners are now handed out per
/// component, and calls that compute hold all but one of them
/// (`host/src/wasm/cpu_share.rs`): the same orchestration takes 0.1 s,
/// while every attacking activity still computes and ends at its own
/// deadline. The tenant's one-step orchestration and agent run are
/// measured during the attack too.
#[tokio::test(flavor = "multi_thread")]
async fn a_component_computing_on_every_core_leaves_another_its_share() {
    let (dir, model) = (tempfile::tempdir().unwrap(), FakeModel::start().await);
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    // Each activity's wall-clock limit is 6× its CPU limit: 12 s, long
    // beside the victim's run, short for the test.
    std::fs::write(components.join("hostile.toml"), "cpu_time = \"2s\"\n").unwrap();
    let host = super::beside(dir.path(), &model, &[]).start();
    let flood = start(&host, "spin_flood", &json!({ "count": SPINNERS })).await;
    // Until its activities compute (its first episode schedules them all).
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let started = Instant::now();
    let victim = start(&host, "sequence", &json!({ "n": 10 })).await;
    let done = wait_for(&host, &victim, &["Completed", "Failed"]).await;
    let took = started.elapsed();
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    super::tenant::measure(&host, "100 activities computing").await;
    // It ran during the attack: the flood waits for every one of its
    // activities, and each is stopped only at its deadline (12 s).
    let (_, flood_now) = status_of(&host, &flood).await;
    assert_eq!(flood_now["runtimeStatus"], "Running", "{flood_now}");
    let rss = host.rss_kib().unwrap_or_default() / 1024;
    eprintln!(
        "the victim's 10-step orchestration took {took:?} beside {SPINNERS} activities \
         computing; host RSS {rss} MiB"
    );
    // Without the shares: 3.6 s (`--guest-runners 1000` lifts them);
    // with them 0.07-0.2 s on a busy machine.
    assert!(
        took < Duration::from_millis(2_000),
        "the victim took {took:?}"
    );
    assert!(rss < 1_024, "host RSS {rss} MiB");
    // Each of the attacker's activities ends at its own deadline.
    let done = wait_for(&host, &flood, &["Completed", "Failed"]).await;
    assert_eq!(done["output"], json!(SPINNERS), "{done}");
}
