//! The faults the suite injects, and the cluster they land on.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::support::host::Host;
use crate::support::redis::PrivateRedis;
use crate::support::tcp_proxy::TcpProxy;
use crate::support::HostBuilder;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Fault {
    Kill,
    Pause,
    StoreLocked,
    ConnectionsCut,
    ConnectionsSilent,
    RedisRefuses,
    DiskFull,
}

/// The test's directory as a tmpfs of its own, so that a full disk can be
/// made (and unmade) under the SQLite store; `None` where mounting is not
/// allowed (not root): full-disk faults are then left out, and said so.
pub(super) struct OwnDisk {
    pub(super) path: std::path::PathBuf,
}

impl OwnDisk {
    pub(super) fn mount(path: &std::path::Path) -> Option<Self> {
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1g", "tmpfs"])
            .arg(path)
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        mounted.then(|| Self {
            path: path.to_path_buf(),
        })
    }

    /// Fills the disk at `path` for `pause`, then frees it.
    fn fill_for(path: &std::path::Path, pause: Duration) {
        use std::io::Write;
        let filler = path.join("filler");
        if let Ok(mut file) = std::fs::File::create(&filler) {
            let block = vec![0u8; 1 << 20];
            while file.write_all(&block).is_ok() {}
            let _ = file.sync_all();
        }
        std::thread::sleep(pause);
        let _ = std::fs::remove_file(&filler);
    }
}

impl Drop for OwnDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

/// The host (SQLite) or the front and its two workers (PostgreSQL).
pub(super) struct Cluster {
    pub(super) builder: HostBuilder,
    pub(super) front: Host,
    pub(super) workers: Vec<Host>,
    /// Where requests go: the front's URL (it changes when it restarts).
    pub(super) base: Arc<RwLock<String>>,
    pub(super) proxy: Option<TcpProxy>,
    pub(super) shared: bool,
}

impl Cluster {
    pub(super) fn base(&self) -> String {
        self.base.read().unwrap().clone()
    }
}

/// Injects one fault of `kind` and heals it; for a kill, returns how long
/// the killed process took to serve again.
pub(super) async fn inject(
    cluster: &mut Cluster,
    redis: &mut PrivateRedis,
    dir: &tempfile::TempDir,
    disk: Option<&OwnDisk>,
    kind: Fault,
    which: usize,
) -> Option<Duration> {
    match kind {
        Fault::DiskFull => {
            if let Some(disk) = disk {
                let path = disk.path.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    OwnDisk::fill_for(&path, Duration::from_millis(1500));
                })
                .await;
            }
            None
        }
        Fault::Kill if cluster.shared => {
            let worker = which % cluster.workers.len();
            cluster.workers[worker].kill();
            let restarted = Instant::now();
            cluster.workers[worker] = cluster.builder.start_worker();
            Some(restarted.elapsed())
        }
        Fault::Kill => {
            cluster.front.kill();
            let restarted = Instant::now();
            cluster.front = cluster.builder.start();
            *cluster.base.write().unwrap() = cluster.front.base.clone();
            Some(restarted.elapsed())
        }
        Fault::Pause => {
            let (host, pause) = if cluster.shared {
                (
                    &cluster.workers[which % cluster.workers.len()],
                    Duration::from_millis(1800),
                )
            } else {
                (&cluster.front, Duration::from_millis(800))
            };
            host.pause();
            tokio::time::sleep(pause).await;
            host.resume();
            None
        }
        Fault::StoreLocked => {
            let db = crate::support::sqlite_lock::sqlite_file(dir.path());
            let mut locker = crate::support::sqlite_lock::lock_sqlite(&db, 1.2);
            let _ = tokio::task::spawn_blocking(move || locker.wait()).await;
            None
        }
        Fault::ConnectionsCut => {
            if let Some(proxy) = &cluster.proxy {
                proxy.cut_all();
            }
            None
        }
        Fault::ConnectionsSilent => {
            if let Some(proxy) = &cluster.proxy {
                proxy.set_silent(true);
                if which == 0 {
                    proxy.abandon_open_connections();
                }
                tokio::time::sleep(Duration::from_millis(1500)).await;
                proxy.set_silent(false);
            }
            None
        }
        Fault::RedisRefuses => {
            let mut admin = redis::Client::open(redis.url.as_str())
                .ok()?
                .get_multiplexed_async_connection()
                .await
                .ok()?;
            let set = |value: &'static str| {
                let mut command = redis::cmd("CONFIG");
                command.arg("SET").arg("maxmemory").arg(value);
                command
            };
            let _: Result<(), _> = set("1").query_async(&mut admin).await;
            tokio::time::sleep(Duration::from_millis(700)).await;
            let _: Result<(), _> = set("0").query_async(&mut admin).await;
            None
        }
    }
}
