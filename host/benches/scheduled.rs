//! `make bench` (last part): what instances that wait cost a host that has
//! nothing to do. A host on a fresh store idles for a while, then again
//! with 100,000 instances scheduled a year ahead (as many `StartInstance`
//! calls with a `scheduledStartTimestamp` would leave its store), then with
//! 100,000 more waiting for an event (Running, their inboxes empty): the
//! CPU time the whole machine spent per second (host and database together,
//! from `/proc/stat`), and the host's own. The instances are written
//! straight into the store the host's own migrations made, the host
//! stopped. Before 05ee1d1 and e8a38ef every scheduler pass on SQLite, one
//! a second, read every one of them.
//!
//! SQLite always; PostgreSQL when `AGENTHOST_BENCH_POSTGRES` is set (`make
//! bench` sets it). Appends to `target/bench/report.md`; asserts nothing.

mod common;

use std::path::Path;
use std::time::Duration;

use common::BenchHost;
use sqlx::Connection;

const SCHEDULED: i64 = 100_000;
const IDLE: Duration = Duration::from_secs(10);

fn main() -> anyhow::Result<()> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut rows = Vec::new();
    rows.extend(tokio.block_on(measure(&Store::Sqlite))?);
    match std::env::var("AGENTHOST_BENCH_POSTGRES")
        .ok()
        .filter(|u| !u.is_empty())
    {
        Some(url) => rows.extend(tokio.block_on(measure(&Store::Postgres(url)))?),
        None => {
            rows.push("| PostgreSQL | not run: set AGENTHOST_BENCH_POSTGRES | – | – |\n".into())
        }
    }
    let mut out = format!(
        "\n## Instances that wait, an idle host\n\nA host idle for {} s on a fresh store, then with {SCHEDULED} instances \
         scheduled a year ahead, then with {SCHEDULED} more waiting for an event. CPU time per second of idling: the whole \
         machine's (host and database) and the host's.\n\n\
         | store | instances | machine CPU ms/s | host CPU ms/s |\n|---|---|---|---|\n",
        IDLE.as_secs()
    );
    rows.iter().for_each(|r| out += r);
    common::report(&out, false)
}

enum Store {
    Sqlite,
    Postgres(String),
}

impl Store {
    fn name(&self) -> &'static str {
        match self {
            Store::Sqlite => "SQLite",
            Store::Postgres(_) => "PostgreSQL",
        }
    }

    fn start(&self, dir: &Path, hub: &str) -> anyhow::Result<BenchHost> {
        match self {
            Store::Sqlite => BenchHost::start(dir, &["orchestration-tests"]),
            Store::Postgres(url) => BenchHost::launch(
                dir,
                &["orchestration-tests"],
                "serve",
                &["--store", url, "--taskhub", hub],
            ),
        }
    }

    /// Writes `SCHEDULED` instances in one statement, with the host
    /// stopped: Pending ones due a year from now, or Running ones (`waits`).
    async fn schedule(&self, dir: &Path, hub: &str, waits: bool) -> anyhow::Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_millis() as i64;
        let later = now + 365 * 24 * 3600 * 1000;
        let (prefix, status, start_at) = if waits {
            ("waits-", "Running", "NULL")
        } else {
            ("later-", "Pending", "$3 + i")
        };
        let columns = "id, name, status, input, component_digest, created_at, updated_at, start_at, execution";
        match self {
            Store::Sqlite => {
                let url = format!("sqlite://{}", dir.join("bench.db").display());
                let mut db = sqlx::SqliteConnection::connect(&url).await?;
                sqlx::query(&format!(
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $1) \
                     INSERT INTO instances ({columns}) \
                     SELECT '{prefix}' || i, 'sequence', '{status}', 'null', '', $2, $2, {start_at}, 0 FROM n"
                ))
                .bind(SCHEDULED)
                .bind(now)
                .bind(later)
                .execute(&mut db)
                .await?;
                db.close().await?;
            }
            Store::Postgres(url) => {
                let mut db = sqlx::PgConnection::connect(url).await?;
                sqlx::query(&format!(
                    "INSERT INTO \"taskhub_{hub}\".instances ({columns}) \
                     SELECT '{prefix}' || i, 'sequence', '{status}', 'null', '', $2, $2, {start_at}, 0 \
                     FROM generate_series(1, $1) AS i"
                ))
                .bind(SCHEDULED)
                .bind(now)
                .bind(later)
                .execute(&mut db)
                .await?;
                // Autovacuum's pass over the new rows is not the host's idling.
                sqlx::query(&format!("VACUUM (ANALYZE) \"taskhub_{hub}\".instances"))
                    .execute(&mut db)
                    .await?;
                db.close().await?;
            }
        }
        Ok(())
    }
}

/// The rows of one store: idle empty, with the scheduled ones, with the
/// waiting ones too.
async fn measure(store: &Store) -> anyhow::Result<Vec<String>> {
    let dir = tempfile::tempdir()?;
    let hub = format!("benchlater{}", std::process::id());
    let mut rows = Vec::new();
    let mut host = store.start(dir.path(), &hub)?;
    rows.push(idle(store, "none", &host).await?);
    for waits in [false, true] {
        host.kill();
        store.schedule(dir.path(), &hub, waits).await?;
        host = store.start(dir.path(), &hub)?;
        let what = if waits {
            "and 100,000 waiting for an event"
        } else {
            "100,000 scheduled a year ahead"
        };
        rows.push(idle(store, what, &host).await?);
    }
    Ok(rows)
}

/// One row: CPU spent while `host` does nothing but wait.
async fn idle(store: &Store, instances: &str, host: &BenchHost) -> anyhow::Result<String> {
    // What starting costs (components compiled, caches warmed) is not idling.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (machine, own) = (machine_cpu_ms()?, host.cpu_ms()?);
    tokio::time::sleep(IDLE).await;
    let seconds = IDLE.as_secs_f64();
    let machine = (machine_cpu_ms()? - machine) / seconds;
    let own = (host.cpu_ms()? - own) / seconds;
    Ok(format!(
        "| {} | {instances} | {machine:.1} | {own:.1} |\n",
        store.name()
    ))
}

/// CPU time the machine spent on anything but idling, in ms.
fn machine_cpu_ms() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let fields: Vec<f64> = stat
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("cpu "))
        .ok_or_else(|| anyhow::anyhow!("no cpu line in /proc/stat"))?
        .split_whitespace()
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    // user nice system idle iowait irq softirq steal: all but idle, iowait.
    let busy: f64 = fields
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    Ok(busy * 1000.0 / common::CLOCK_TICKS)
}
