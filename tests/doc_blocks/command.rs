//! A doc's `agenthost serve …`/`agenthost worker …` line run for real: the
//! built binary in place of `agenthost`, the test's components directory,
//! store, task hub and a free port in place of the doc's, and nothing else
//! changed.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::workspace;

/// What a doc's command line names that a test replaces.
pub struct Substitutions {
    /// For `--components DIR`.
    pub components: PathBuf,
    /// For `--store postgres://…` (a `sqlite://` store is kept: it is a file
    /// in the directory the command runs in).
    pub store: String,
    /// For `--taskhub NAME`: a hub no other test uses.
    pub hub: String,
}

/// `line` without a trailing `# comment`.
pub fn strip_comment(line: &str) -> &str {
    match line.find(" #") {
        Some(at) => line[..at].trim_end(),
        None => line,
    }
}

/// Starts with a clean environment: none of the host's settings or model
/// endpoints of the machine running the tests.
pub fn clean_env(command: &mut Command) {
    for (key, _) in std::env::vars() {
        if key.starts_with("AGENTHOST_")
            || key.starts_with("OPENAI_")
            || key.starts_with("AZURE_")
            || key.starts_with("OTEL_")
            || key.starts_with("IDENTITY_")
            || [
                "TASKHUB_NAME",
                "TASKHUB",
                "ENDPOINT",
                "DURABLE_TASK_SCHEDULER_CONNECTION_STRING",
                "REDIS_CONNECTION_STRING",
            ]
            .contains(&key.as_str())
        {
            command.env_remove(key);
        }
    }
    // Compiled components are shared with the other tests' hosts.
    command.env(
        "AGENTHOST_CACHE_DIR",
        workspace().join("target/test-artifact-cache"),
    );
}

/// The words of a doc's `agenthost …` line with the substitutions made.
pub fn substituted(line: &str, subs: &Substitutions) -> Vec<String> {
    let mut words: Vec<String> = strip_comment(line)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(
        words.first().map(String::as_str),
        Some("agenthost"),
        "{line}"
    );
    let mut port = false;
    let mut i = 1;
    while i + 1 < words.len() {
        let replacement = match words[i].as_str() {
            "--components" => subs.components.display().to_string(),
            "--store" if words[i + 1].starts_with("postgres://") => subs.store.clone(),
            "--taskhub" => subs.hub.clone(),
            "--port" => {
                port = true;
                "0".into()
            }
            _ => {
                i += 1;
                continue;
            }
        };
        words[i + 1] = replacement;
        i += 2;
    }
    if words[1] == "serve" && !port {
        words.extend(["--port".to_string(), "0".to_string()]);
    }
    // A doc's `--grpc` listens on the emulator's 8080: a free port here.
    if words.iter().any(|w| w == "--grpc") && !words.iter().any(|w| w == "--grpc-port") {
        words.extend(["--grpc-port".to_string(), "0".to_string()]);
    }
    words
}

/// A running command and everything it printed.
pub struct Spawned {
    child: Option<Child>,
    output: Arc<Mutex<Vec<String>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
    /// Its URL once it listens (empty before, and for a worker).
    pub base: String,
    line: String,
}

impl Spawned {
    /// Runs the doc's `line` (substituted) in `dir`.
    pub fn start(line: &str, dir: &Path, subs: &Substitutions) -> Self {
        Self::start_with_env(line, dir, subs, &[])
    }

    /// [`Self::start`] with variables the doc sets before the line.
    pub fn start_with_env(
        line: &str,
        dir: &Path,
        subs: &Substitutions,
        env: &[(String, String)],
    ) -> Self {
        let words = substituted(line, subs);
        let mut command = Command::new(env!("CARGO_BIN_EXE_agenthost"));
        command
            .args(&words[1..])
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        clean_env(&mut command);
        command.envs(env.iter().map(|(k, v)| (k, v)));
        let mut child = command.spawn().expect("start agenthost");
        let output = Arc::new(Mutex::new(Vec::new()));
        let streams: [Box<dyn std::io::Read + Send>; 2] = [
            Box::new(child.stdout.take().unwrap()),
            Box::new(child.stderr.take().unwrap()),
        ];
        let readers = streams
            .into_iter()
            .map(|stream| {
                let output = output.clone();
                std::thread::spawn(move || {
                    for line in BufReader::new(stream).lines().map_while(Result::ok) {
                        output.lock().unwrap().push(line);
                    }
                })
            })
            .collect();
        Self {
            child: Some(child),
            output,
            readers,
            base: String::new(),
            line: words.join(" "),
        }
    }

    pub fn output(&self) -> String {
        self.output.lock().unwrap().join("\n")
    }

    /// Waits for a printed line containing `text`; returns it.
    pub fn wait_output(&mut self, text: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(line) = self
                .output
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(text))
            {
                return line.clone();
            }
            let exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            assert!(
                exited.is_none() && Instant::now() < deadline,
                "`{}` never printed `{text}` (exit: {exited:?}); output:\n{}",
                self.line,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until it prints `agenthost listening on URL`; returns the URL.
    pub fn wait_listening(&mut self, limit: Duration) -> String {
        let line = self.wait_output("agenthost listening on ", limit);
        line["agenthost listening on ".len()..].trim().to_string()
    }

    /// Waits for it to exit; its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        let child = self.child.as_mut()?;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                // The pipes are closed: the readers take the last lines and end.
                for reader in self.readers.drain(..) {
                    let _ = reader.join();
                }
                self.child = None;
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "`{}` did not exit; output:\n{}",
                self.line,
                self.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- {} ---\n{}\n---", self.line, self.output());
        }
    }
}
