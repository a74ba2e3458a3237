//! The shell blocks of the docs: `$` sessions run command by command and
//! compared with what the docs show, and command lines run for real.

use super::*;

// ---------------------------------------------------------------- transcripts

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_curl_session_gets_the_answers_it_shows() {
    let block = claimed_one("the_readme_curl_session_gets_the_answers_it_shows");
    let dir = tempfile::tempdir().unwrap();
    // `make run`: every sample, no model configured (the offline model).
    let host = HostBuilder::new(dir.path())
        .components(&[
            "writer",
            "weather",
            "scientists",
            "chaining",
            "parallel",
            "spam",
            "approval",
        ])
        .start();
    transcript::run(&block, &host, &[]).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_client_session_of_stores_and_hubs_md_gets_the_answers_it_shows() {
    let block = claimed_one("the_client_session_of_stores_and_hubs_md_gets_the_answers_it_shows");
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "approval"])
        .start();
    // The client's default endpoint is 127.0.0.1:7071; its environment twin
    // points it at the test host.
    transcript::run(&block, &host, &[("AGENTHOST_ENDPOINT", host.base.as_str())]).await;
}

// ---------------------------------------------------------------- commands

/// The `make …` commands of a block: each line's, and those its comments
/// quote (`(another port: make run PORT=8080)`).
fn make_commands(block: &Block) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    for line in block.text.lines() {
        let mut rest = line;
        while let Some(at) = rest.find("make ") {
            let words: Vec<String> = rest[at + 5..]
                .split_whitespace()
                .map(|w| w.trim_end_matches([')', ',', ';']).to_string())
                .take_while(|w| {
                    w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
                        || w.split_once('=').is_some_and(|(k, _)| {
                            !k.is_empty() && k.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                        })
                })
                .filter(|w| !w.is_empty())
                .collect();
            if !words.is_empty() {
                commands.push(words);
            }
            rest = &rest[at + 5..];
        }
    }
    commands
}

#[test]
fn the_make_lines_name_targets_and_variables_the_makefile_has() {
    let blocks = claimed("the_make_lines_name_targets_and_variables_the_makefile_has");
    let mut ran = Vec::new();
    for block in &blocks {
        for words in make_commands(block) {
            let output = std::process::Command::new("make")
                .arg("-n")
                .args(&words)
                .current_dir(workspace())
                .env_remove("MAKEFLAGS")
                .env_remove("MFLAGS")
                .env_remove("MAKELEVEL")
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "{}: `make -n {}` fails: {}",
                block.at(),
                words.join(" "),
                String::from_utf8_lossy(&output.stderr)
            );
            ran.push(words.join(" "));
        }
        // `cat FILE`: the file the bench writes.
        for line in block.text.lines().filter(|l| l.starts_with("cat ")) {
            let path = line["cat ".len()..].trim();
            let (dir, file) = path.rsplit_once('/').unwrap();
            let bench =
                std::fs::read_to_string(workspace().join("host/benches/common/mod.rs")).unwrap();
            assert!(
                bench.contains(&format!("join(\"{dir}\")"))
                    && bench.contains(&format!("join(\"{file}\")")),
                "{}: the benches do not write {path}",
                block.at()
            );
            assert!(ran.iter().any(|c| c.starts_with("bench")), "{}", block.at());
        }
    }
    for expected in ["run", "test", "run PORT=8080", "bench"] {
        assert!(ran.iter().any(|c| c == expected), "{expected} in {ran:?}");
    }
}

/// The samples, copied into `dir/components` (as `make components` lays them out).
pub(super) fn samples_in(dir: &Path) -> PathBuf {
    let components = dir.join("components");
    std::fs::create_dir_all(&components).unwrap();
    for name in [
        "writer",
        "weather",
        "scientists",
        "chaining",
        "parallel",
        "spam",
        "approval",
    ] {
        std::fs::copy(component(name), components.join(format!("{name}.wasm"))).unwrap();
    }
    components
}

/// The suite's store: its PostgreSQL database, else a SQLite file in `dir`.
pub(super) fn suite_store(dir: &Path) -> String {
    store_location(dir, None).0
}

/// Runs the `serve` line `line` until its health answers; returns it
/// running and its health.
pub(super) async fn serve_until_healthy(
    line: &str,
    dir: &Path,
    subs: &Substitutions,
) -> (Spawned, Value) {
    let mut served = Spawned::start(line, dir, subs);
    let base = served.wait_listening(Duration::from_secs(60));
    let (status, health) = crate::support::health(&base, "/api/health").await;
    assert_eq!(status, 200, "{health}\n{}", served.output());
    served.base = base;
    (served, health)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_serve_line_serves_its_components() {
    let block = claimed_one("the_readme_serve_line_serves_its_components");
    let dir = tempfile::tempdir().unwrap();
    let subs = Substitutions {
        components: samples_in(dir.path()),
        store: suite_store(dir.path()),
        hub: hub_for(dir.path()),
    };
    let line = block.first_line();
    let (served, health) = serve_until_healthy(line, dir.path(), &subs).await;
    assert_eq!(health["status"], "healthy");
    assert_eq!(health["agents"].as_array().unwrap().len(), 6, "{health}");
    // `--store sqlite://agenthost.db`: the file is where the host runs.
    assert!(line.contains("--store sqlite://agenthost.db"));
    assert!(
        dir.path().join("agenthost.db").exists(),
        "{}",
        served.output()
    );
    // `--host 127.0.0.1`.
    assert!(
        served.base.starts_with("http://127.0.0.1:"),
        "{}",
        served.base
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_serve_line_with_a_postgres_store_and_a_taskhub_serves() {
    let block = claimed_one("the_serve_line_with_a_postgres_store_and_a_taskhub_serves");
    let dir = tempfile::tempdir().unwrap();
    let subs = Substitutions {
        components: samples_in(dir.path()),
        store: suite_store(dir.path()),
        hub: hub_for(dir.path()),
    };
    let (served, health) = serve_until_healthy(block.first_line(), dir.path(), &subs).await;
    assert_eq!(health["status"], "healthy");
    // The host says which hub it opened.
    assert!(
        served.output().contains(&format!("taskhub={}", subs.hub)),
        "{}",
        served.output()
    );
    let host_answer = client()
        .post(format!("{}/api/agents/writer/run", served.base))
        .body("Write about tea.")
        .send()
        .await
        .unwrap();
    assert_eq!(host_answer.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_workers_and_fronts_of_one_hub_run_as_the_doc_says() {
    let block = claimed_one("the_workers_and_fronts_of_one_hub_run_as_the_doc_says");
    let lines: Vec<&str> = block
        .text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 4);
    let dir = tempfile::tempdir().unwrap();
    let subs = Substitutions {
        components: samples_in(dir.path()),
        store: suite_store(dir.path()),
        hub: hub_for(dir.path()),
    };
    if test_store().is_some() {
        // PostgreSQL: two workers and two fronts on one hub; a run asked of
        // either front is done by a worker.
        let mut processes = Vec::new();
        for line in &lines {
            let mut process = Spawned::start(line, dir.path(), &subs);
            if line.starts_with("agenthost worker") {
                process.wait_output("agenthost worker serving task hub", Duration::from_secs(60));
            } else {
                process.base = process.wait_listening(Duration::from_secs(60));
            }
            processes.push(process);
        }
        for front in processes.iter().filter(|p| !p.base.is_empty()) {
            let answer = client()
                .post(format!("{}/api/agents/writer/run", front.base))
                .body("Write about tea.")
                .send()
                .await
                .unwrap();
            assert_eq!(answer.status(), 200);
            let text = answer.text().await.unwrap();
            assert!(text.contains("[offline model]"), "{text}");
        }
    } else {
        // SQLite: one process serves a file. The first worker runs; the
        // second is refused (the file is served), and so are the fronts
        // (`--no-worker` on SQLite is refused), each with the remedy.
        let refused = |line: &str, refusal: &str| {
            let mut refused = Spawned::start(line, dir.path(), &subs);
            let code = refused.wait_exit(Duration::from_secs(60));
            assert_ne!(code, Some(0), "{line}");
            assert!(
                refused.output().contains(refusal),
                "{line}: {}",
                refused.output()
            );
        };
        let mut worker = Spawned::start(lines[0], dir.path(), &subs);
        worker.wait_output("agenthost worker serving task hub", Duration::from_secs(60));
        refused(lines[1], "is already served by another process");
        drop(worker);
        refused(lines[2], "--no-worker needs a task hub");
        refused(lines[3], "--no-worker needs a task hub");
    }
}

/// One log line of the text format: level and target.
fn log_line(line: &str) -> Option<(&str, &str)> {
    let mut words = line.split_whitespace();
    words.next()?; // timestamp
    let level = words.next()?;
    if !["TRACE", "DEBUG", "INFO", "WARN", "ERROR"].contains(&level) {
        return None;
    }
    let target = words.find(|w| {
        w.ends_with(':')
            && w[..w.len() - 1]
                .split("::")
                .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    })?;
    Some((level, &target[..target.len() - 1]))
}

fn severity(level: &str) -> u8 {
    match level.to_ascii_uppercase().as_str() {
        "ERROR" => 1,
        "WARN" => 2,
        "INFO" => 3,
        "DEBUG" => 4,
        _ => 5,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_log_filters_of_operations_md_are_accepted_and_pick_the_lines_they_say() {
    let block =
        claimed_one("the_log_filters_of_operations_md_are_accepted_and_pick_the_lines_they_say");
    for line in block.text.lines().filter(|l| !l.trim().is_empty()) {
        let value = command::strip_comment(line)
            .trim()
            .strip_prefix("AGENTHOST_LOG=")
            .unwrap_or_else(|| panic!("{line}"))
            .to_string();
        // The default level, and one per module.
        let mut default = 3;
        let mut modules = Vec::new();
        for directive in value.split(',') {
            match directive.split_once('=') {
                Some((module, level)) => modules.push((module.to_string(), severity(level))),
                None => default = severity(directive),
            }
        }
        let allowed = |target: &str| {
            modules
                .iter()
                .filter(|(m, _)| target == m || target.starts_with(&format!("{m}::")))
                .max_by_key(|(m, _)| m.len())
                .map_or(default, |(_, level)| *level)
        };

        let dir = tempfile::tempdir().unwrap();
        let host = HostBuilder::new(dir.path())
            .components(&["writer", "orchestration-tests"])
            .env("AGENTHOST_LOG", &value)
            .start();
        // Some work for every layer: an agent run and an orchestration of
        // two activities.
        assert_eq!(run_agent(&host, "writer", "hi").await.0, 200);
        let id = crate::support::durable::start(&host, "sequence", &json!({"n": 2})).await;
        wait_for(&host, &id, &["Completed"]).await;

        // Each module named more verbose than the default shows at its level
        // (the host's output is read as it writes it: wait a bounded time).
        let shows = |output: &str, module: &str, level: u8| {
            output.lines().filter_map(log_line).any(|(l, t)| {
                severity(l) == level && (t == module || t.starts_with(&format!("{module}::")))
            })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        for (module, level) in modules.iter().filter(|(_, l)| *l > default) {
            while !shows(&host.output(), module, *level) {
                assert!(
                    Instant::now() < deadline,
                    "{line}: no line of {module} at its level:\n{}",
                    host.output()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        let output = host.output();
        assert!(!output.contains("is not a filter"), "{line}: {output}");
        let lines: Vec<(&str, &str)> = output.lines().filter_map(log_line).collect();
        assert!(!lines.is_empty(), "{output}");
        for (level, target) in &lines {
            assert!(
                severity(level) <= allowed(target),
                "{line}: a {level} line of {target} passed:\n{output}"
            );
        }
        // "say where it listens".
        if line.contains("say where it listens") {
            assert!(
                output
                    .lines()
                    .any(|l| log_line(l) == Some(("INFO", "agenthost::server"))
                        && l.contains("listening")),
                "{output}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn vacuum_into_copies_a_serving_hosts_sqlite_file() {
    let block = claimed_one("vacuum_into_copies_a_serving_hosts_sqlite_file");
    let line = block.first_line();
    let dir = tempfile::tempdir().unwrap();
    // A host serving `agenthost.db` (the default hub's file) in its directory.
    let file = dir.path().join("agenthost.db");
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .store(&format!("sqlite://{}", file.display()))
        .taskhub("default")
        .start();
    let (status, _) = run_agent(&host, "writer", "Write about tea.").await;
    assert_eq!(status, 200);

    // The doc's command, run where the file is, into a backups directory of our own.
    let backups = dir.path().join("backups");
    std::fs::create_dir_all(&backups).unwrap();
    let command = line.replace("'/backups/", &format!("'{}/", backups.display()));
    assert_ne!(command, line, "the command writes under /backups/");
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .current_dir(dir.path())
        .output()
        .expect("sh");
    assert!(
        output.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let copies: Vec<PathBuf> = std::fs::read_dir(&backups)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    let name = copies[0].file_name().unwrap().to_string_lossy().to_string();
    assert!(
        name.starts_with("agenthost-20") && name.ends_with(".db"),
        "{name}"
    );

    // The copy holds the host's tables and the conversation just had.
    let tables = |path: &Path| -> Vec<String> {
        let db =
            rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let mut statement = db
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .unwrap();
        let names = statement
            .query_map([], |row| row.get::<_, String>(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        names
    };
    let copied = tables(&copies[0]);
    assert_eq!(copied, tables(&file));
    for table in ["instances", "runs", "sessions"] {
        assert!(copied.iter().any(|t| t == table), "{table} in {copied:?}");
    }
    let copy = rusqlite::Connection::open(&copies[0]).unwrap();
    let runs: i64 = copy
        .query_row("SELECT count(*) FROM runs", [], |row| row.get(0))
        .unwrap();
    assert_eq!(runs, 1);
    drop(host);
}

/// The doc's `check-replay` line, run where a host serves `approval`
/// (version 1 of the `versioned` test guest, as that name) with one
/// instance waiting, the new build at the doc's path (a compatible build),
/// the store the host's: it reads the store beside the running host and
/// finds the instance compatible.
#[tokio::test(flavor = "multi_thread")]
async fn the_check_replay_line_of_orchestrations_md_judges_the_instances_of_a_store() {
    let block =
        claimed_one("the_check_replay_line_of_orchestrations_md_judges_the_instances_of_a_store");
    let command = block.text.replace("\\\n", " ");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agenthost.db");
    let store = format!("sqlite://{}", file.display());
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::copy(component("versioned-v1"), components.join("approval.wasm")).unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&[])
        .store(&store)
        .taskhub("default")
        .start();
    crate::support::components::wait_served(&host, "approval", None).await;
    let id = crate::support::durable::start(&host, "versioned", &json!(null)).await;
    wait_for(&host, &id, &["Running"]).await;
    // The new build where the doc builds it.
    let built = dir.path().join("target/wasm32-wasip2/release");
    std::fs::create_dir_all(&built).unwrap();
    std::fs::copy(component("versioned-logged"), built.join("approval.wasm")).unwrap();

    let documented = "postgres://agenthost@db:5432/agenthost";
    assert!(command.contains(documented), "{command}");
    let command = command.replace(documented, &store).replacen(
        "agenthost ",
        &format!("{} ", env!("CARGO_BIN_EXE_agenthost")),
        1,
    );
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .current_dir(dir.path())
        .env(
            "AGENTHOST_CACHE_DIR",
            crate::support::host::test_artifact_cache(),
        )
        .output()
        .expect("sh");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{command}: {printed}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_str(&printed).unwrap();
    assert_eq!(report["component"], "approval", "{report}");
    assert_eq!(
        (&report["instances"], &report["compatible"]),
        (&json!(1), &json!(1)),
        "{report}"
    );
    drop(host);
}

// ---------------------------------------------------------------- A2A and MCP

#[tokio::test(flavor = "multi_thread")]
async fn the_agent_card_transcript_of_a2a_md_gets_the_card_it_shows() {
    let block = claimed_one("the_agent_card_transcript_of_a2a_md_gets_the_card_it_shows");
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path()).components(&["writer"]).start();
    transcript::run(&block, &host, &[]).await;
}

/// Runs `text` with `program` (and `args` before it), every `localhost:7071`
/// made the test host's address; its stdout, after it exited 0.
fn run_against(host: &Host, program: &std::path::Path, args: &[&str], text: &str) -> String {
    let address = host.base.trim_start_matches("http://");
    let script = text.replace("localhost:7071", address);
    let mut command = std::process::Command::new(program);
    command.args(args).arg(&script);
    command::clean_env(&mut command);
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "{script}\n{stdout}\n{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        host.output()
    );
    stdout
}

fn protocol_python() -> PathBuf {
    crate::support::venv_python("a2a-venv")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_json_rpc_curl_lines_of_a2a_md_get_answers() {
    let block = claimed_one("the_json_rpc_curl_lines_of_a2a_md_get_answers");
    let dir = tempfile::tempdir().unwrap();
    // No model configured: the offline model answers.
    let host = HostBuilder::new(dir.path()).components(&["writer"]).start();
    let text = block.text.clone();
    let stdout = {
        let host = &host;
        run_against(host, std::path::Path::new("sh"), &["-c"], &text)
    };
    // Blocking, streamed, listed: the two tasks of context `tea`, done; the
    // cancel of a placeholder id is the spec's "no such task".
    assert!(stdout.contains("TASK_STATE_COMPLETED"), "{stdout}");
    assert!(stdout.contains("\"artifactUpdate\""), "{stdout}");
    assert!(stdout.contains("\"contextId\":\"tea\""), "{stdout}");
    assert!(stdout.contains("-32001"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_a2a_sdk_example_of_a2a_md_streams_an_answer() {
    let block = claimed_one("the_a2a_sdk_example_of_a2a_md_streams_an_answer");
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path()).components(&["writer"]).start();
    let python = protocol_python();
    let text = block.text.clone();
    let stdout = run_against(&host, &python, &["-c"], &text);
    assert!(stdout.contains("artifact_update"), "{stdout}");
    assert!(stdout.contains("TASK_STATE_COMPLETED"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_curl_lines_of_a2a_md_list_the_tools_and_call_one() {
    let block = claimed_one("the_mcp_curl_lines_of_a2a_md_list_the_tools_and_call_one");
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .arg("--mcp")
        .start();
    let text = block.text.clone();
    let stdout = run_against(&host, std::path::Path::new("sh"), &["-c"], &text);
    // The session id was taken (else every later call is refused), the
    // writer is listed, and its call answered with a thread id.
    assert!(stdout.contains("\"tools\""), "{stdout}");
    assert!(stdout.contains("\"name\":\"writer\""), "{stdout}");
    assert!(stdout.contains("\"threadId\""), "{stdout}");
    assert!(
        stdout.contains("offline"),
        "the offline model answered: {stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_mcp_sdk_example_of_a2a_md_continues_a_thread() {
    let block = claimed_one("the_mcp_sdk_example_of_a2a_md_continues_a_thread");
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .arg("--mcp")
        .start();
    // The MCP package's two majors, each in its own virtualenv.
    for python in [protocol_python(), crate::support::venv_python("mcp2-venv")] {
        let address = host.base.trim_start_matches("http://");
        let script = block.text.replace("localhost:7071", address);
        let mut command = std::process::Command::new(&python);
        command.arg("-c").arg(&script);
        command::clean_env(&mut command);
        let output = command.output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&output.stdout).to_string(),
            String::from_utf8_lossy(&output.stderr).to_string(),
        );
        let which = python.display();
        assert!(output.status.success(), "{which}\n{stdout}\n{stderr}");
        assert!(
            stdout.contains("'writer'"),
            "{which}: the tools listed\n{stdout}"
        );
        // The offline model counts the turns of a conversation: the second
        // call continued the first one's thread.
        assert!(
            stdout.contains("turn 2 of this conversation"),
            "{which}\n{stdout}"
        );
        // The session's end is answered as the clients expect.
        assert!(
            !stderr.contains("Session termination failed"),
            "{which}\n{stderr}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_hubs_of_one_host_are_served_as_the_doc_says() {
    let block = claimed_one("the_hubs_of_one_host_are_served_as_the_doc_says");
    let lines: Vec<&str> = block
        .text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 2, "{}", block.text);
    for (n, line) in lines.iter().enumerate() {
        // Each line on a store of its own, SQLite as the line leaves it.
        let dir = tempfile::tempdir().unwrap();
        let subs = Substitutions {
            components: samples_in(dir.path()),
            store: suite_store(dir.path()),
            hub: hub_for(dir.path()),
        };
        let mut served = Spawned::start(line, dir.path(), &subs);
        served.base = served.wait_listening(Duration::from_secs(60));
        let status = |hub: &str| {
            let url = format!(
                "{}/runtime/webhooks/durabletask/instances?taskHub={hub}",
                served.base
            );
            async move { client().get(url).send().await.unwrap().status().as_u16() }
        };
        let (named, other) = (status("billing").await, status("never-named").await);
        if n == 0 {
            // The hubs listed are served; any other is refused.
            assert_eq!(
                (named, status("reports").await, other),
                (200, 200, 404),
                "{line}"
            );
        } else {
            // Any hub a caller names.
            assert_eq!((named, other), (200, 200), "{line}");
        }
    }
}
