//! Starts the real `agenthost` binary on a free port and captures its output.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use super::{component, workspace, FakeModel};

pub const MODEL_ENV: [&str; 17] = [
    "AGENTHOST_MODEL_CREDENTIAL",
    "AGENTHOST_IMDS_ENDPOINT",
    "IDENTITY_ENDPOINT",
    "IDENTITY_HEADER",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_CLIENT_ID",
    "AZURE_TENANT_ID",
    "AZURE_AUTHORITY_HOST",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_MODEL",
    "AZURE_OPENAI_ENDPOINT",
    "AZURE_OPENAI_DEPLOYMENT_NAME",
    "AZURE_OPENAI_CHAT_DEPLOYMENT_NAME",
    "AZURE_OPENAI_API_KEY",
    "AZURE_OPENAI_API_VERSION",
    "AGENTHOST_LOG",
];

enum Started {
    Url(String),
    LogsIn,
    Worker,
}

/// How to start a host. Each test gets its own directory for the store and
/// the components; the compiled-artifact cache is shared by default so that
/// tests do not each recompile the samples.
pub struct HostBuilder {
    dir: PathBuf,
    components: Vec<String>,
    env: Vec<(String, String)>,
    args: Vec<String>,
    /// `None`: no `--cache-dir`, the host's default.
    cache_dir: Option<PathBuf>,
    hub: Option<String>,
    connection_string: bool,
    /// A store URL in place of the suite's (a proxy to it, say).
    store: Option<String>,
    /// 0: a free port the host picks.
    port: u16,
}

pub struct Host {
    child: Option<Child>,
    pub base: String,
    pub dir: PathBuf,
    output: Arc<Mutex<Vec<String>>>,
}

impl HostBuilder {
    /// A host in `dir` (store at `dir/agenthost.db`, components in `dir/components`).
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            components: vec!["writer".into(), "weather".into()],
            env: Vec::new(),
            args: Vec::new(),
            cache_dir: Some(test_artifact_cache()),
            hub: None,
            connection_string: false,
            store: None,
            port: 0,
        }
    }

    /// Listens on `port` instead of a free one the host picks.
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Uses the store at `url` (the directory's hub on it).
    pub fn store(mut self, url: &str) -> Self {
        self.store = Some(url.into());
        self
    }

    /// Works on task hub `name` of the directory's store (instead of the
    /// directory's own hub).
    pub fn taskhub(mut self, name: &str) -> Self {
        self.hub = Some(name.into());
        self
    }

    /// Names the store and hub through `DURABLE_TASK_SCHEDULER_CONNECTION_STRING`
    /// instead of flags.
    pub fn via_connection_string(mut self) -> Self {
        self.connection_string = true;
        self
    }

    pub fn components(mut self, names: &[&str]) -> Self {
        self.components = names.iter().map(|s| s.to_string()).collect();
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn arg(mut self, arg: &str) -> Self {
        self.args.push(arg.into());
        self
    }

    pub fn cache_dir(mut self, dir: &Path) -> Self {
        self.cache_dir = Some(dir.to_path_buf());
        self
    }

    /// No `--cache-dir`: the host's default cache, the user's cache folder
    /// (give the test's own with `.env("XDG_CACHE_HOME", …)`).
    pub fn default_cache(mut self) -> Self {
        self.cache_dir = None;
        self
    }

    /// Points the host at the fake model with the OpenAI settings.
    pub fn openai(self, model: &FakeModel, key: &str) -> Self {
        self.env("OPENAI_BASE_URL", &model.openai_base_url())
            .env("OPENAI_API_KEY", key)
            .env("OPENAI_MODEL", "gpt-test")
    }

    /// `agenthost serve`, once it listens and has loaded its components.
    pub fn start(&self) -> Host {
        self.spawn("serve")
    }

    /// `agenthost worker` (no HTTP), once it says what it serves.
    pub fn start_worker(&self) -> Host {
        self.spawn("worker")
    }

    fn spawn(&self, mode: &str) -> Host {
        let components = self.dir.join("components");
        std::fs::create_dir_all(&components).unwrap();
        for name in &self.components {
            let file = name.rsplit('/').next().unwrap_or(name);
            let target = components.join(format!("{file}.wasm"));
            if !target.exists() {
                std::fs::copy(component(name), target).unwrap();
            }
        }
        let mut command = Command::new(env!("CARGO_BIN_EXE_agenthost"));
        command
            .current_dir(&self.dir)
            .arg(mode)
            .arg("--components")
            .arg(&components)
            .args(match (&self.store, self.connection_string) {
                (Some(url), _) => {
                    let (_, hub) = store_location(&self.dir, self.hub.as_deref());
                    vec!["--store".into(), url.clone(), "--taskhub".into(), hub]
                }
                (None, true) => Vec::new(),
                (None, false) => store_args(&self.dir, self.hub.as_deref()),
            })
            .arg("--port")
            .arg(self.port.to_string())
            .args(
                self.cache_dir
                    .iter()
                    .flat_map(|dir| [std::ffi::OsStr::new("--cache-dir"), dir.as_os_str()]),
            )
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for key in MODEL_ENV {
            command.env_remove(key);
        }
        command.env("AGENTHOST_LOG", "info,sqlx=warn");
        // On PostgreSQL a host killed with SIGKILL is taken over when its
        // lease expires: the tests that restart one wait for that.
        command.env("AGENTHOST_LEASE", "3s");
        command
            .env_remove("AGENTHOST_STORE")
            .env_remove("TASKHUB_NAME")
            // What the Durable Task SDKs' samples set: aliases of our settings.
            .env_remove("TASKHUB")
            .env_remove("ENDPOINT")
            .env_remove("REDIS_CONNECTION_STRING");
        if self.connection_string {
            let (store, hub) = store_location(&self.dir, self.hub.as_deref());
            command.env(
                "DURABLE_TASK_SCHEDULER_CONNECTION_STRING",
                format!("Endpoint={store};TaskHub={hub};Authentication=None"),
            );
        } else {
            command.env_remove("DURABLE_TASK_SCHEDULER_CONNECTION_STRING");
        }
        for (k, v) in &self.env {
            command.env(k, v);
        }
        let mut child = command.spawn().expect("start agenthost");
        let pid = child.id();
        let echo = echoes_output();
        let output = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        for (stream, tx) in [
            (
                Box::new(stdout) as Box<dyn std::io::Read + Send>,
                tx.clone(),
            ),
            (Box::new(stderr), tx),
        ] {
            let output = output.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    if echo {
                        eprintln!("[agenthost {pid}] {line}");
                    }
                    output.lock().unwrap().push(line.clone());
                    if let Some(url) = line.strip_prefix("agenthost listening on ") {
                        let _ = tx.send(Started::Url(url.to_string()));
                    } else if line.starts_with("agenthost worker serving") {
                        let _ = tx.send(Started::Worker);
                    } else if line.contains("agenthost::server: listening")
                        || (line.contains("\"target\":\"agenthost::server\"")
                            && line.contains("\"message\":\"listening"))
                    {
                        // Logged after every component load: the logs before it are all in.
                        let _ = tx.send(Started::LogsIn);
                    }
                }
            });
        }
        let mut host = Host {
            child: Some(child),
            base: String::new(),
            dir: self.dir.clone(),
            output,
        };
        let mut logs_in = false;
        let mut worker = false;
        while !worker && (host.base.is_empty() || !logs_in) {
            match rx.recv_timeout(Duration::from_secs(120)) {
                Ok(Started::Url(url)) => host.base = url,
                Ok(Started::LogsIn) => logs_in = true,
                Ok(Started::Worker) => worker = true,
                Err(_) => panic!("agenthost did not start; output:\n{}", host.output()),
            }
        }
        host
    }
}

/// The compiled-artifact cache the suite's hosts share, and its commands
/// (`build`, `inspect`, `tool call`, `dev`) compile into: each component is
/// compiled once per run, and nothing lands in the user's own cache.
pub fn test_artifact_cache() -> PathBuf {
    workspace().join("target/test-artifact-cache")
}

/// The store a test host uses: SQLite in its directory, or, when
/// `AGENTHOST_TEST_STORE` names a PostgreSQL database, that database. The
/// hub is `hub`, or one named after the directory (so a host restarted on
/// the same directory finds its data again, and no two tests share a hub).
pub fn store_location(dir: &Path, hub: Option<&str>) -> (String, String) {
    let hub = hub.map_or_else(|| hub_for(dir), str::to_string);
    match test_store() {
        Some(url) => (url, hub),
        None => (
            format!("sqlite://{}", dir.join("agenthost.db").display()),
            hub,
        ),
    }
}

pub fn store_args(dir: &Path, hub: Option<&str>) -> Vec<String> {
    let (store, hub) = store_location(dir, hub);
    vec!["--store".into(), store, "--taskhub".into(), hub]
}

/// The PostgreSQL URL the suite runs against, if any.
pub fn test_store() -> Option<String> {
    std::env::var("AGENTHOST_TEST_STORE")
        .ok()
        .filter(|url| !url.is_empty())
}

/// A task hub name unique to a test directory.
pub fn hub_for(dir: &Path) -> String {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    dir.hash(&mut hasher);
    format!("t{:016x}", hasher.finish())
}

impl Host {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Where the compiled code of the component serving `agent` came from,
    /// as `/api/components` says (`compiled`, `cache`, `precompiled`).
    pub async fn artifact_of(&self, agent: &str) -> String {
        let listed: serde_json::Value = super::get_json(self.url("/api/components")).await;
        let components = listed["components"].as_array().cloned().unwrap_or_default();
        components
            .iter()
            .find(|c| {
                c["agents"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|a| a["name"] == agent))
            })
            .and_then(|c| c["artifact"].as_str())
            .unwrap_or_else(|| panic!("no component serves {agent}: {listed}"))
            .to_string()
    }

    /// Everything the host printed so far.
    pub fn output(&self) -> String {
        self.output.lock().unwrap().join("\n")
    }

    /// `HOST:PORT` of the gRPC endpoint (`--grpc`), from the line it printed.
    pub fn grpc_address(&self) -> String {
        let output = self.output();
        output
            .lines()
            .find_map(|l| l.strip_prefix("agenthost gRPC listening on http://"))
            .unwrap_or_else(|| panic!("no gRPC listening line:\n{output}"))
            .to_string()
    }

    /// Waits until the host has logged `line` more than `before` times.
    pub async fn wait_logged(&self, line: &str, before: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while self.output().matches(line).count() <= before {
            assert!(
                std::time::Instant::now() < deadline,
                "never logged '{line}':\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The host's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The host process's resident memory, in KiB (Linux).
    pub fn rss_kib(&self) -> Option<u64> {
        let pid = self.child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    }

    /// SIGSTOP: the host freezes (a stall, a partition) without dying.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT: a paused host goes on where it stopped.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .arg(signal)
                .arg(child.id().to_string())
                .status();
        }
    }

    /// SIGKILL: the host dies without any chance to clean up.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits for the process to exit; returns its exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        for _ in 0..600 {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        panic!("agenthost did not exit within 30 s of SIGTERM");
    }

    /// Sends SIGTERM without waiting.
    pub fn signal_terminate(&self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
        }
    }

    pub fn wait_exit(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        for _ in 0..600 {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        panic!("agenthost did not exit within 30 s");
    }
}

/// Whether hosts echo each line they print to the test's own stderr as it
/// comes: under cargo-nextest, which keeps a test's output and shows it only
/// when the test fails or is stopped by its time limit (a test killed there
/// unwinds nothing, so a host's log printed on drop would be lost).
fn echoes_output() -> bool {
    std::env::var_os("NEXTEST").is_some()
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() && !echoes_output() {
            eprintln!(
                "--- agenthost output ---\n{}\n--- end of agenthost output ---",
                self.output()
            );
        }
    }
}
