//! The container image's command line (the Kubernetes manifests:
//! kubernetes.rs),
//! parsed and run as written. A container runtime builds and runs the image
//! itself in `make image-test` (scripts/image-test.sh), which takes minutes
//! and is not part of `make test`.

use std::time::Duration;

use std::path::Path;

use super::{binary, free_port, serve};
use crate::support::{client, component, workspace};

/// The Dockerfile's instructions: `(instruction, rest)` of each line (its
/// continuations joined).
fn dockerfile() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(workspace().join("Dockerfile")).unwrap();
    let mut lines = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        current.push_str(line.trim_end_matches('\\'));
        current.push(' ');
        if !line.ends_with('\\') {
            let (instruction, rest) = current
                .trim()
                .split_once(' ')
                .unwrap_or((current.trim(), ""));
            lines.push((instruction.to_uppercase(), rest.trim().to_string()));
            current.clear();
        }
    }
    lines
}

/// `text` with each `${NAME}` the Dockerfile's `ARG NAME=default` gives
/// replaced by that default: what `docker build .` builds.
fn with_arg_defaults(lines: &[(String, String)], text: &str) -> String {
    lines
        .iter()
        .filter(|(i, _)| i == "ARG")
        .filter_map(|(_, rest)| rest.split_once('='))
        .fold(text.to_string(), |text, (name, default)| {
            text.replace(&format!("${{{name}}}"), default)
        })
}

/// `docker build .` compiles in the Rust image (`make image-test` takes the
/// prebuilt stage instead, where that image cannot be pulled), and the
/// build context leaves out what a built checkout holds.
#[test]
fn a_plain_build_compiles_in_the_rust_image_from_a_context_without_target() {
    let lines = dockerfile();
    let from = |stage: &str| {
        lines
            .iter()
            .find(|(i, rest)| i == "FROM" && rest.ends_with(&format!(" AS {stage}")))
            .map(|(_, rest)| with_arg_defaults(&lines, rest))
            .unwrap_or_else(|| panic!("no stage {stage}"))
    };
    let chosen = from("build");
    let chosen = chosen.trim_end_matches(" AS build");
    let source = from(chosen);
    assert!(source.starts_with("rust:"), "{chosen}: {source}");
    let builds = lines
        .iter()
        .skip_while(|(i, rest)| !(i == "FROM" && rest.ends_with(&format!(" AS {chosen}"))))
        .skip(1)
        .take_while(|(i, _)| i != "FROM")
        .any(|(i, rest)| i == "RUN" && rest.contains("make release components"));
    assert!(builds, "the {chosen} stage runs make release components");
    from("build-prebuilt");

    let ignored = std::fs::read_to_string(workspace().join(".dockerignore")).unwrap();
    let patterns: Vec<&str> = ignored
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for left_out in ["**/target", ".git", "**/*.db", "**/node_modules"] {
        assert!(patterns.contains(&left_out), "{left_out}: {patterns:?}");
    }
    // The one way back into target/: the folder the prebuilt stage copies.
    let kept: Vec<_> = patterns.iter().filter(|p| p.starts_with('!')).collect();
    assert_eq!(kept, [&"!target/image/prebuilt"]);
    let copies_prebuilt = lines
        .iter()
        .filter(|(i, _)| i == "COPY")
        .filter(|(_, rest)| rest.starts_with("target/"))
        .all(|(_, rest)| rest.starts_with("target/image/prebuilt/"));
    assert!(copies_prebuilt);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_runs_its_command_line_unprivileged_with_volumes_probes_and_a_drain() {
    let lines = dockerfile();
    let last = |instruction: &str| {
        lines
            .iter()
            .rev()
            .find(|(i, _)| i == instruction)
            .map(|(_, rest)| rest.clone())
            .unwrap_or_else(|| panic!("no {instruction} in the Dockerfile"))
    };
    let array = |text: String| -> Vec<String> {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{text}: {e}"))
    };
    // Multi-stage, a small runtime image, not root, volumes for the
    // components and the store.
    assert!(lines.iter().filter(|(i, _)| i == "FROM").count() >= 2);
    assert!(with_arg_defaults(&lines, &last("FROM")).contains("slim"));
    let user = last("USER");
    assert!(!user.starts_with('0') && user != "root", "{user}");
    let volumes = array(last("VOLUME"));
    assert!(
        volumes.contains(&"/components".to_string())
            && volumes.contains(&"/var/lib/agenthost".to_string())
    );
    assert_eq!(last("STOPSIGNAL"), "SIGTERM");
    let entrypoint = array(last("ENTRYPOINT"));
    let cmd = array(last("CMD"));
    assert_eq!(entrypoint, ["/usr/local/bin/agenthost"]);
    let store_env = last("ENV");
    assert!(
        store_env.starts_with("AGENTHOST_STORE=sqlite:///var/lib/agenthost/"),
        "{store_env}"
    );

    // The same command line, with the image's paths in a temporary folder
    // and a free port for 7071.
    let root = tempfile::tempdir().unwrap();
    let components = root.path().join("components");
    let data = root.path().join("var/lib/agenthost");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::copy(component("writer"), components.join("writer.wasm")).unwrap();
    // The build stage's last step, on the image's components folder: their
    // compiled code beside them, which the new host (its cache empty) loads.
    let build = lines
        .iter()
        .find(|(i, rest)| i == "RUN" && rest.contains(" compile /out/components"))
        .map(|(_, rest)| rest.clone())
        .expect("the build stage compiles the components");
    assert!(
        build.contains("/out/agenthost compile /out/components"),
        "{build}"
    );
    // Twice, the second from the folder above with a relative path and a
    // new cache: compiling again what is already beside it still works.
    for (cache, folder) in [
        ("build-stage-cache", components.clone()),
        ("second-cache", "components".into()),
    ] {
        let compiled = std::process::Command::new(binary())
            .current_dir(root.path())
            .arg("compile")
            .arg(&folder)
            .env("AGENTHOST_CACHE_DIR", root.path().join(cache))
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&compiled.stderr);
        assert!(compiled.status.success(), "{said}");
        assert!(!said.contains("warning"), "{said}");
    }
    let port = free_port();
    let local = |arg: &String| {
        arg.replace("/var/lib/agenthost", &data.display().to_string())
            .replace("/components", &components.display().to_string())
            .replace("7071", &port.to_string())
    };
    let args: Vec<String> = cmd.iter().map(local).collect();
    let store = local(&store_env["AGENTHOST_STORE=".len()..].to_string());
    let mut served = serve(
        Path::new(binary()),
        root.path(),
        &args,
        &[("AGENTHOST_STORE", store)],
        port,
    )
    .await;
    for probe in ["/api/health/live", "/api/health/ready"] {
        let answer = client()
            .get(served.url(probe))
            .header("host", "10.1.2.3:7071")
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200, "{probe}");
    }
    let answer = client()
        .post(served.url("/api/agents/writer/run"))
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert!(
        data.join("agenthost.db").is_file(),
        "the store is on the data volume"
    );
    served
        .assert_served_precompiled("what the build stage compiled")
        .await;
    // SIGTERM drains and exits 0 well within a pod's grace period.
    let pid = served.0.id().unwrap_or_default();
    std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .unwrap();
    let exited = tokio::time::timeout(Duration::from_secs(30), served.0.wait()).await;
    assert!(
        exited.is_ok_and(|status| status.is_ok_and(|s| s.success())),
        "drained and exited 0"
    );
}
