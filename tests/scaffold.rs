//! A newcomer's first component, in Rust, Python and JavaScript:
//! `agenthost new` writes a project (the language's guest SDK vendored, no
//! sibling checkout), `agenthost build --into` builds it (cargo for
//! wasm32-wasip2, componentize-py, rolldown + componentize-js) and drops it
//! into a serving host's components directory, and the agent's tool round
//! trip works through the offline model; the orchestration scaffold runs
//! to its approval and completes; the project's own tests pass natively;
//! `agenthost dev` serves a project and builds it again on save. Build
//! times are printed (measured, not asserted).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::durable::{wait_for, wait_for_custom_status};
use crate::support::{client, workspace, HostBuilder};

/// PATH with the guest toolchains `make guest-toolchains` installs
/// (componentize-py; rolldown and componentize-js) in front.
fn path_with_guest_tools() -> std::ffi::OsString {
    let tools = [
        workspace().join("target/guest-py-venv/bin"),
        workspace().join("target/guest-js-tools/node_modules/.bin"),
    ];
    let rest = std::env::var_os("PATH").unwrap_or_default();
    std::env::join_paths(tools.into_iter().chain(std::env::split_paths(&rest))).unwrap()
}

fn agenthost(dir: &Path, args: &[&str]) -> std::process::Output {
    agenthost_with_path(dir, args, path_with_guest_tools(), None)
}

/// `agenthost` with `path` as its PATH; with `user_cache`, as a user whose
/// cache folder (`XDG_CACHE_HOME`) that is, else on the suite's cache.
fn agenthost_with_path(
    dir: &Path,
    args: &[&str],
    path: std::ffi::OsString,
    user_cache: Option<&Path>,
) -> std::process::Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_agenthost"));
    command
        .current_dir(dir)
        .args(args)
        .env("PATH", path)
        // One target folder for every run of this test: a warm one takes
        // seconds, a cold one (CI) builds the SDK's dependencies once.
        .env("CARGO_TARGET_DIR", workspace().join("target/scaffold"))
        .env("AGENTHOST_LOG", "warn")
        // The Rust projects build with plain rustc, not `make test`'s
        // linting wrapper (scripts/clippy-rustc).
        .env_remove("RUSTC_WORKSPACE_WRAPPER");
    match user_cache {
        Some(cache) => command
            .env_remove("AGENTHOST_CACHE_DIR")
            .env("XDG_CACHE_HOME", cache),
        // What `build` compiles goes where the test hosts look (the
        // HostBuilder's default cache): a host loads it without compiling.
        None => command.env(
            "AGENTHOST_CACHE_DIR",
            crate::support::host::test_artifact_cache(),
        ),
    };
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "agenthost {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// POSTs `body` to `url` until it is served (the hot reload took the file;
/// a new Python or JavaScript component takes its host 15–40 s to compile
/// on this 2-core machine when other tests compile too).
async fn post_when_served(url: &str, body: &str) -> reqwest::Response {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let response = client()
            .post(url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        if response.status() != 404 {
            return response;
        }
        assert!(Instant::now() < deadline, "{url} never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A generous bound on a fresh host's start to a served component whose
/// compiled code is beside it: compiling a Python or JavaScript component
/// takes 10 s or more here, loading its compiled code well under one
/// (`make bench`, "Cold start").
const SERVED_WITHIN: Duration = Duration::from_secs(8);

/// A generous bound on a drop by `build --into` to the first answer of a
/// plain `serve` of the same user. What proves the dev loop is the artifact
/// `/api/components` reports (`cache`: the host loaded what `build` compiled,
/// it compiled nothing); the time is printed, and measured for the release
/// binary by `make bench` ("Cold start"; under 1 s is the aim). A bound near
/// that figure would fail a busy machine (5.2 s was seen with a PostgreSQL
/// pass beside it), and a compile here takes far longer than this.
const DROP_SERVED_WITHIN: Duration = Duration::from_secs(15);

/// The guest toolchain `make guest-toolchains` installed, linked into a
/// project where `agenthost build` looks first: `.venv` for Python,
/// `node_modules` for JavaScript.
fn toolchain_inside(project: &Path, lang: &str) {
    let (link, target) = match lang {
        "python" => (".venv", workspace().join("target/guest-py-venv")),
        _ => (
            "node_modules",
            workspace().join("target/guest-js-tools/node_modules"),
        ),
    };
    std::os::unix::fs::symlink(target, project.join(link)).unwrap();
}

/// `new` + `build --into` a running host's folder for `lang`: the agent's
/// tool round trip through the offline model, the orchestration to its
/// approval and done.
async fn new_and_build(lang: &str) {
    let projects = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A plain `serve` (no cache flag, no `--load-precompiled`), no model
    // configured, nothing served yet, and `build` run by the same user: both
    // on the user's cache folder, new and empty (XDG_CACHE_HOME).
    let user_cache = dir.path().join("user-cache");
    let host = HostBuilder::new(dir.path())
        .components(&[])
        .default_cache()
        .env("XDG_CACHE_HOME", user_cache.to_str().unwrap())
        .start();
    let components = dir.path().join("components");
    let agent = format!("greeter-{lang}");
    let flow = format!("review-flow-{lang}");

    let started = Instant::now();
    let created = agenthost(projects.path(), &["new", "agent", &agent, "--lang", lang]);
    let hint = String::from_utf8_lossy(&created.stdout).to_string();
    assert!(hint.contains(&format!("created {agent}")), "{hint}");
    // Built exactly as `new` says, from the folder it was made in (a
    // relative project path), with the language's toolchain inside the
    // project (`.venv/bin`, `node_modules/.bin`) and none on PATH.
    let said_build = hint
        .lines()
        .find_map(|l| l.trim().strip_prefix("build it: agenthost "))
        .unwrap_or_else(|| panic!("no build hint: {hint}"))
        .replace("COMPONENTS_DIR", components.to_str().unwrap());
    let build_args: Vec<&str> = said_build.split(' ').collect();
    let built = match lang {
        "python" | "js" => {
            toolchain_inside(&projects.path().join(&agent), lang);
            agenthost_with_path(
                projects.path(),
                &build_args,
                std::env::var_os("PATH").unwrap_or_default(),
                Some(&user_cache),
            )
        }
        _ => agenthost_with_path(
            projects.path(),
            &build_args,
            path_with_guest_tools(),
            Some(&user_cache),
        ),
    };
    let dropped = Instant::now();
    let said = String::from_utf8_lossy(&built.stdout);
    assert!(
        said.contains(&format!("{agent}.wasm")) && said.contains("tools: word_count"),
        "{said}"
    );
    let answer = post_when_served(
        &host.url(&format!("/api/agents/{agent}/run")),
        &json!({"message": r#"call word_count with {"text": "one two three"}"#}).to_string(),
    )
    .await;
    assert_eq!(answer.status(), 200);
    // Served from the compiled code `build` left in the user's cache, not
    // compiled by the host (seconds for Python and JavaScript).
    let served_after = dropped.elapsed();
    assert_eq!(host.artifact_of(&agent).await, "cache");
    assert!(
        served_after < DROP_SERVED_WITHIN,
        "{lang}: served {served_after:?} after the drop"
    );
    let text = answer.text().await.unwrap();
    assert!(text.contains(r#"The tool returned: {"words":3}"#), "{text}");
    eprintln!(
        "{lang}: agenthost new + build + served tool round trip: {:?}",
        started.elapsed()
    );

    agenthost(
        projects.path(),
        &["new", "orchestration", &flow, "--lang", lang],
    );
    agenthost_with_path(
        projects.path(),
        &["build", &flow, "--into", components.to_str().unwrap()],
        path_with_guest_tools(),
        Some(&user_cache),
    );
    let response = post_when_served(
        &host.url(&format!("/api/{flow}/run")),
        &json!({"topic": "tea"}).to_string(),
    )
    .await;
    assert_eq!(response.status(), 202);
    let started: Value = response.json().await.unwrap();
    let id = started["id"].as_str().unwrap().to_string();
    wait_for_custom_status(&host, &id, "/state", &json!("awaiting_approval")).await;
    let approved = client()
        .post(host.url(&format!("/api/{flow}/approve/{id}")))
        .json(&json!(true))
        .send()
        .await
        .unwrap();
    assert_eq!(approved.status(), 202);
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(done["output"]["approved"], true, "{done}");
    assert!(
        done["output"]["draft"]
            .as_str()
            .unwrap_or_default()
            .contains("[offline model]"),
        "{done}"
    );

    // A fresh host (the image's case: the components folder with what is
    // beside it, an empty cache of its own) answers its first run soon.
    let fresh_dir = tempfile::tempdir().unwrap();
    crate::support::copy_folder(&components, &fresh_dir.path().join("components"));
    let started = Instant::now();
    let fresh = HostBuilder::new(fresh_dir.path())
        .components(&[])
        .cache_dir(&fresh_dir.path().join("own-cache"))
        .arg("--load-precompiled")
        .start();
    let answer = post_when_served(
        &fresh.url(&format!("/api/agents/{agent}/run")),
        &json!({"message": "hello"}).to_string(),
    )
    .await;
    assert_eq!(answer.status(), 200);
    let first_answer = started.elapsed();
    assert_eq!(fresh.artifact_of(&agent).await, "precompiled");
    assert!(
        first_answer < SERVED_WITHIN,
        "{lang}: a fresh host answered after {first_answer:?}"
    );
    eprintln!(
        "{lang}: dropped → served {served_after:?}; fresh host → first answer {first_answer:?}"
    );

    // The projects' own tests pass natively.
    let native = match lang {
        "python" => Some(("python3", vec!["-m", "unittest", "-q"])),
        "js" => Some(("node", vec!["--test"])),
        _ => None,
    };
    if let Some((program, args)) = native {
        for project in [&agent, &flow] {
            let run = Command::new(program)
                .current_dir(projects.path().join(project))
                .args(&args)
                .output()
                .unwrap();
            assert!(
                run.status.success(),
                "{program} {args:?} in {project}: {}{}",
                String::from_utf8_lossy(&run.stdout),
                String::from_utf8_lossy(&run.stderr)
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn new_and_build_give_a_served_agent_and_orchestration_with_no_model() {
    new_and_build("rust").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn new_and_build_in_python_give_a_served_agent_and_orchestration() {
    new_and_build("python").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn new_and_build_in_javascript_give_a_served_agent_and_orchestration() {
    new_and_build("js").await;
}

/// TypeScript: the JavaScript scaffold with its `app.js` renamed `app.ts`
/// and typed; `agenthost build` bundles it the same way (rolldown strips
/// the types) and the component loads with its tool.
#[test]
fn a_typescript_app_builds_like_a_javascript_one() {
    let projects = tempfile::tempdir().unwrap();
    agenthost(projects.path(), &["new", "agent", "typed", "--lang", "js"]);
    let project = projects.path().join("typed");
    let js = std::fs::read_to_string(project.join("app.js")).unwrap();
    let ts = js.replace(
        "const app = new Component()",
        "interface Named { name: string }\nconst typed: Named = { name: 'typed' };\nconst app: Component = new Component()",
    );
    assert_ne!(ts, js, "the scaffold's app.js changed shape");
    std::fs::write(project.join("app.ts"), ts).unwrap();
    std::fs::remove_file(project.join("app.js")).unwrap();
    let built = agenthost(projects.path(), &["build", "typed"]);
    let said = String::from_utf8_lossy(&built.stdout);
    assert!(
        said.contains("typed.wasm") && said.contains("tools: word_count"),
        "{said}"
    );
}

/// Without its toolchain, `build` says the commands that install it where
/// it looks; the generated app shows how a tool asks for approval.
#[test]
fn a_build_without_its_toolchain_says_how_to_install_it_where_build_looks() {
    let projects = tempfile::tempdir().unwrap();
    // Nothing on PATH: neither toolchain can be found there.
    let nothing = tempfile::tempdir().unwrap();
    let bare_path = nothing.path().as_os_str().to_os_string();
    for (lang, file, wanted) in [
        (
            "python",
            "app.py",
            ".venv/bin/pip install componentize-py==0.25.1",
        ),
        (
            "js",
            "app.js",
            "npm install --save-dev @bytecodealliance/componentize-js@0.19.3 rolldown@1.3.2",
        ),
    ] {
        let name = format!("bare-{lang}");
        agenthost(projects.path(), &["new", "agent", &name, "--lang", lang]);
        let app = std::fs::read_to_string(projects.path().join(&name).join(file)).unwrap();
        // The commented example, uncommented in place of the line below it,
        // is code that runs (Python: the app imports natively; JavaScript:
        // it parses, with Approval imported as the comment says).
        let (comment, import) = match lang {
            "python" => ("    # .tool(", None),
            _ => (
                "  // .tool(",
                Some((
                    "import { Agent, Component, Tool,",
                    "import { Agent, Approval, Component, Tool,",
                )),
            ),
        };
        let lines: Vec<&str> = app.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with(comment))
            .unwrap_or_else(|| panic!("no commented approval example in {file}:\n{app}"));
        assert!(
            lines[at].contains("Approval.ALWAYS_REQUIRE"),
            "{}",
            lines[at]
        );
        let mut enabled: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        enabled[at] = lines[at].replacen(if lang == "python" { "# " } else { "// " }, "", 1);
        enabled.remove(at + 1);
        let mut enabled = enabled.join("\n");
        if let Some((from, to)) = import {
            assert!(enabled.contains(from), "{enabled}");
            enabled = enabled.replacen(from, to, 1);
        }
        let project = projects.path().join(&name);
        let original = project.join(file);
        let variant = project.join(format!("approved.{}", &file[4..]));
        std::fs::write(&variant, &enabled).unwrap();
        let checked = match lang {
            "python" => Command::new("python3")
                .current_dir(&project)
                .args(["-c", "import approved"])
                .output()
                .unwrap(),
            _ => Command::new("node")
                .current_dir(&project)
                .arg("--check")
                .arg(&variant)
                .output()
                .unwrap(),
        };
        assert!(
            checked.status.success(),
            "{lang}: the uncommented approval example fails: {}\n{enabled}",
            String::from_utf8_lossy(&checked.stderr)
        );
        std::fs::remove_file(&variant).unwrap();
        assert!(original.is_file());
        let build = Command::new(env!("CARGO_BIN_EXE_agenthost"))
            .current_dir(projects.path())
            .args(["build", &name])
            .env("PATH", &bare_path)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&build.stderr);
        assert!(!build.status.success(), "{said}");
        assert!(said.contains(wanted), "{lang}: {said}");
        if lang == "python" {
            assert!(said.contains("python3 -m venv"), "{said}");
        }
    }
}

#[test]
fn new_refuses_a_bad_name_a_used_folder_and_other_languages() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_agenthost"))
            .current_dir(dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    let bad = run(&["new", "agent", "Bad Name"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("is not a component name"));
    assert!(run(&["new", "agent", "twice"]).status.success());
    let again = run(&["new", "agent", "twice"]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("not empty"));
    let cobol = run(&["new", "agent", "co", "--lang", "cobol"]);
    assert!(!cobol.status.success());
    assert!(String::from_utf8_lossy(&cobol.stderr).contains("possible values: rust, python, js"));
    // dev on a port in use says so before it builds anything.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let busy = run(&["dev", "twice", "--port", &port]);
    assert!(!busy.status.success());
    assert!(
        String::from_utf8_lossy(&busy.stderr).contains("is not free"),
        "{busy:?}"
    );
    assert!(
        !dir.path().join("twice/target").exists(),
        "nothing was built"
    );
    let nothing = run(&["build", "nowhere"]);
    assert!(!nothing.status.success());
    assert!(String::from_utf8_lossy(&nothing.stderr).contains("has no Cargo.toml"));
}

#[tokio::test(flavor = "multi_thread")]
async fn dev_serves_the_project_and_builds_it_again_on_save() {
    use std::io::BufRead;
    let projects = tempfile::tempdir().unwrap();
    agenthost(projects.path(), &["new", "agent", "devbot"]);
    let mut command = Command::new(env!("CARGO_BIN_EXE_agenthost"));
    command
        .current_dir(projects.path())
        .args(["dev", "devbot", "--port", "0"])
        .env("CARGO_TARGET_DIR", workspace().join("target/scaffold"))
        .env(
            "AGENTHOST_CACHE_DIR",
            crate::support::host::test_artifact_cache(),
        )
        .env_remove("RUSTC_WORKSPACE_WRAPPER")
        .env("AGENTHOST_LOG", "info,sqlx=warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    for key in crate::support::host::MODEL_ENV {
        command.env_remove(key);
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let base = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(180))
            .expect("dev never served");
        if let Some(url) = line.strip_prefix("agenthost listening on ") {
            break url.to_string();
        }
    };
    let url = format!("{base}/api/agents/devbot/run");
    let ask = || {
        let url = url.clone();
        async move {
            client()
                .post(url)
                .body(r#"call word_count with {"text": "a b c"}"#)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let first = ask().await;
    assert!(first.contains(r#"{"words":3}"#), "{first}");
    // Saved: built again and served without a restart.
    let lib = projects.path().join("devbot/src/lib.rs");
    let code = std::fs::read_to_string(&lib).unwrap();
    let changed = code.replace(
        "words: input.text.split_whitespace().count(),",
        "words: input.text.split_whitespace().count() + 100,",
    );
    assert_ne!(code, changed, "the scaffold's tool changed");
    std::fs::write(&lib, changed).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let answer = ask().await;
        if answer.contains(r#"{"words":103}"#) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the saved change was never served: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let stopped = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        matches!(child.try_wait(), Ok(Some(_)))
    });
    if !stopped {
        let _ = child.kill();
    }
    assert!(stopped, "dev stops on SIGTERM");
}
