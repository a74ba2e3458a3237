//! Native code from disk runs outside the sandbox, so a host loads it only
//! from where its operator put it and no other user may write: a folder
//! carrying `.agenthost/cache/<digest>-<engine>.cwasm` (a cloned repository,
//! say) is not a cache to `agenthost serve` started there, and a cache
//! folder another user may write to is neither read nor written. The
//! crafted artifact is another component's real compiled code (spam's),
//! named as writer's: loaded, it would serve spam's agents as `writer`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::host::test_artifact_cache;
use crate::support::{component, get_json, HostBuilder};

/// `agenthost inspect FILE` with `AGENTHOST_CACHE_DIR=cache`: its digest.
fn inspect(file: &Path, cache: &Path) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_agenthost"))
        .arg("inspect")
        .arg(file)
        .env("AGENTHOST_CACHE_DIR", cache)
        .env("AGENTHOST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let described: Value = serde_json::from_slice(&output.stdout).unwrap();
    let digest = described["digest"].as_str().unwrap();
    digest.trim_start_matches("sha256:").to_string()
}

/// Spam's compiled code, by this binary's engine, written into `folder`
/// under the name writer's would have there: `<sha256 of writer.wasm>-<engine
/// suffix>.cwasm`, the suffix read off the file the binary wrote.
fn spam_named_as_writer(scratch: &Path, folder: &Path) -> PathBuf {
    let made = scratch.join("made");
    let spam = inspect(&component("spam"), &made);
    let artifact = std::fs::read_dir(&made)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .expect("inspect cached spam's compiled code");
    let name = artifact.file_name().unwrap().to_string_lossy().into_owned();
    let engine = name
        .strip_prefix(&format!("{spam}-"))
        .unwrap_or_else(|| panic!("{name} is not spam's artifact"));
    let writer = inspect(&component("writer"), &test_artifact_cache());
    std::fs::create_dir_all(folder).unwrap();
    let crafted = folder.join(format!("{writer}-{engine}"));
    std::fs::copy(&artifact, &crafted).unwrap();
    crafted
}

/// The agents `/api/health` lists.
async fn agents(host: &crate::support::host::Host) -> Vec<String> {
    let health: Value = get_json(host.url("/api/health")).await;
    let mut names: Vec<String> = health["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_started_in_a_folder_with_a_crafted_agenthost_cache_does_not_run_it() {
    let dir = tempfile::tempdir().unwrap();
    let crafted = spam_named_as_writer(dir.path(), &dir.path().join(".agenthost/cache"));
    let user_cache = dir.path().join("user-cache");
    // `cd folder && agenthost serve`: the working folder is the cloned one,
    // no cache flag; the user's cache is the test's own.
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .default_cache()
        .env("XDG_CACHE_HOME", user_cache.to_str().unwrap())
        .start();
    assert_eq!(agents(&host).await, ["writer"], "{}", host.output());
    assert_eq!(host.artifact_of("writer").await, "compiled");
    assert!(crafted.exists());
    // What it compiled went to the user's cache folder, made private.
    let compiled = user_cache.join("agenthost/compiled");
    let kept = std::fs::read_dir(&compiled)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "cwasm"))
        })
        .count();
    assert_eq!(kept, 1, "{}", compiled.display());
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&compiled).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    drop(host);

    // The control: named as the cache by its operator (a folder nobody
    // else may write), the same file is loaded, and serves spam's agents as
    // `writer`: what a host reading the working folder's cache ran.
    let told = HostBuilder::new(dir.path())
        .components(&["writer"])
        .cache_dir(crafted.parent().unwrap())
        .start();
    assert_eq!(agents(&told).await, ["email_assistant", "spam_detector"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cache_folder_another_user_may_write_to_is_neither_read_nor_written() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open-cache");
    spam_named_as_writer(dir.path(), &open);
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let listing = || {
        let mut names: Vec<_> = std::fs::read_dir(&open)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        names
    };
    let before = listing();
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .cache_dir(&open)
        .start();
    assert_eq!(agents(&host).await, ["writer"], "{}", host.output());
    assert_eq!(host.artifact_of("writer").await, "compiled");
    assert_eq!(listing(), before, "nothing written to the open folder");
    let output = host.output();
    assert!(
        output.contains("not using this folder for compiled components"),
        "{output}"
    );
}

/// A relative `--cache-dir` (or `AGENTHOST_CACHE_DIR`, left set from when
/// the cache was `.agenthost/cache`) names a folder of wherever the host is
/// started: a cloned folder's own. It is refused at start, naming the fix,
/// before anything is loaded.
#[test]
fn a_relative_cache_folder_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    spam_named_as_writer(dir.path(), &dir.path().join(".agenthost/cache"));
    let components = dir.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::copy(component("writer"), components.join("writer.wasm")).unwrap();
    for (flag, env) in [(true, false), (false, true)] {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agenthost"));
        command
            .current_dir(dir.path())
            .args(["serve", "--components", "components", "--port"])
            .arg(crate::support::free_port().to_string())
            .args(["--store", "sqlite://agenthost.db"])
            .env("XDG_CACHE_HOME", dir.path().join("user-cache"))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        if flag {
            command.args(["--cache-dir", ".agenthost/cache"]);
        }
        if env {
            command.env("AGENTHOST_CACHE_DIR", ".agenthost/cache");
        }
        let mut child = command.spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("the host started on a relative cache folder (flag {flag}, env {env})");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let output = child.wait_with_output().unwrap();
        let said = String::from_utf8_lossy(&output.stderr);
        assert!(!status.success(), "{said}");
        assert!(said.contains("absolute path"), "{said}");
        // Once on the error line: the reason was printed twice, as the
        // message's and again as its cause's.
        let error_line = said
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_else(|| panic!("no error line:\n{said}"));
        assert_eq!(
            error_line.matches("absolute path").count(),
            1,
            "{error_line}"
        );
    }
}
