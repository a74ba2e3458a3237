//! A second tenant: another component's one-step orchestration and agent
//! run, measured while an attack is under way, and the host's memory.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::durable::{start, wait_for_within};
use crate::support::host::Host;

/// What the host must serve besides the attacker: the sample agent
/// `writer`, and `orchestration-tests` (its `sequence`, one activity).
pub(crate) const COMPONENTS: [&str; 2] = ["writer", "orchestration-tests"];

/// The tenant's one-step orchestration, start to `Completed`. It takes
/// about 0.1 s on an idle debug build; the bound leaves room for a busy
/// machine (two cores, other builds) and still tells a tenant held
/// behind an attack (30 s before issue 54) from one that is not.
pub(crate) const TENANT_ORCHESTRATION_BOUND: Duration = Duration::from_secs(5);

/// The tenant's agent run, `POST /api/agents/writer/run` to its 200
/// (one model turn against the fake model).
pub(crate) const TENANT_RUN_BOUND: Duration = Duration::from_secs(5);

/// The host's peak resident memory (`VmHWM`) at the end of the
/// measurement: a debug build serving the three components peaks at
/// 72 to 95 MiB under these attacks; one attack (an await naming one
/// task 6,000 times) used to take a host to 5.9 GB.
pub(crate) const RSS_BOUND_MIB: u64 = 512;

/// What was measured.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Measured {
    pub(crate) orchestration: Duration,
    pub(crate) run: Duration,
    pub(crate) rss_mib: u64,
    pub(crate) peak_rss_mib: u64,
}

impl Measured {
    /// Prints what was measured during `attack`, and asserts each
    /// against its bound.
    pub(crate) fn check(&self, attack: &str) {
        let Self {
            orchestration,
            run,
            rss_mib,
            peak_rss_mib,
        } = *self;
        eprintln!(
            "tenant during {attack}: orchestration {:.2} s, run {:.2} s, RSS {rss_mib} MiB (peak {peak_rss_mib} MiB)",
            orchestration.as_secs_f64(),
            run.as_secs_f64(),
        );
        assert!(
            orchestration < TENANT_ORCHESTRATION_BOUND,
            "during {attack} the tenant's orchestration took {orchestration:?} (bound {TENANT_ORCHESTRATION_BOUND:?})"
        );
        assert!(
            run < TENANT_RUN_BOUND,
            "during {attack} the tenant's agent run took {run:?} (bound {TENANT_RUN_BOUND:?})"
        );
        assert!(
            peak_rss_mib < RSS_BOUND_MIB,
            "during {attack} the host's RSS peaked at {peak_rss_mib} MiB (bound {RSS_BOUND_MIB} MiB)"
        );
    }
}

/// Runs the tenant's orchestration and agent run at once, on `host`
/// (which serves [`COMPONENTS`]), while `attack` is under way; asserts
/// each against its bound, prints and returns what was measured.
pub(crate) async fn measure(host: &Host, attack: &str) -> Measured {
    let (orchestration, run) = tokio::join!(one_step(host, attack), agent_run(host, attack));
    let measured = Measured {
        orchestration,
        run,
        rss_mib: host.rss_kib().unwrap_or(0) / 1024,
        peak_rss_mib: peak_rss_kib(host) / 1024,
    };
    measured.check(attack);
    measured
}

async fn one_step(host: &Host, attack: &str) -> Duration {
    let began = Instant::now();
    let id = start(host, "sequence", &json!({ "n": 1 })).await;
    // Waited for past its bound, so that a slow tenant fails on its
    // time (said above) rather than on the wait.
    let done = wait_for_within(host, &id, &["Completed", "Failed"], Duration::from_secs(60)).await;
    let took = began.elapsed();
    assert_eq!(
        done["runtimeStatus"], "Completed",
        "during {attack} the tenant's orchestration: {done}"
    );
    assert_eq!(done["output"], json!(0), "{done}");
    took
}

async fn agent_run(host: &Host, attack: &str) -> Duration {
    let began = Instant::now();
    let response = crate::support::client()
        .post(host.url("/api/agents/writer/run"))
        .header("accept", "application/json")
        .json(&json!({ "message": "a tenant's question" }))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or_default();
    let took = began.elapsed();
    assert_eq!(status, 200, "during {attack} the tenant's run: {body}");
    assert!(
        body["response"]
            .as_str()
            .is_some_and(|r| r.contains("a tenant's question")),
        "during {attack} the tenant's run: {body}"
    );
    took
}

/// The host's peak resident memory so far (`VmHWM`), in KiB.
fn peak_rss_kib(host: &Host) -> u64 {
    host.pid()
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Measures the tenant while the hostile component's `attacks` are started
/// again and again, until the measurement ends: an attack that fails in a
/// millisecond is still under way for the whole measurement.
pub(crate) async fn measure_while_attacking(
    host: &Host,
    what: &str,
    attacks: &[(&str, Value)],
) -> Measured {
    let measuring = measure(host, what);
    tokio::pin!(measuring);
    let mut rounds = 0;
    loop {
        let round = async {
            for (name, input) in attacks {
                crate::support::durable::start(host, name, input).await;
            }
        };
        tokio::select! {
            measured = &mut measuring => {
                eprintln!("{what}: {rounds} more rounds of the attack started whole while measuring, one in part");
                return measured;
            }
            () = round => rounds += 1,
        }
    }
}
