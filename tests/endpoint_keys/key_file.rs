//! Keys from a file (`--api-key-file`: one `SCOPE:KEY` a line, blank lines
//! and `#` comments skipped), and the warning of a host that listens beyond
//! this machine without keys.

use std::process::Command;

use super::{ADMIN, INVOKE};
use crate::support::host::Host;
use crate::support::{client, HostBuilder};

const WARNING: &str = "listening beyond this machine without endpoint keys";

/// `GET /api/components` with `key`: its status.
async fn components(host: &Host, key: Option<&str>) -> u16 {
    // The host prints the address it listens on: 0.0.0.0 is reached here.
    let url = host
        .url("/api/components")
        .replace("://0.0.0.0:", "://127.0.0.1:");
    let mut request = client().get(url);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_file_gives_its_keys_by_scope_and_its_comments_are_no_keys() {
    let dir = tempfile::tempdir().unwrap();
    let commented = "commented-out-0123456789abcdef";
    let file = dir.path().join("keys.txt");
    std::fs::write(
        &file,
        format!(
            "# the operators' keys\n\nadmin:{ADMIN}\n   invoke:{INVOKE}   \n# admin:{commented}\n"
        ),
    )
    .unwrap();
    // Beyond loopback, with keys: no warning.
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .arg("--api-key-file")
        .arg(file.to_str().unwrap())
        .arg("--host")
        .arg("0.0.0.0")
        .start();
    assert_eq!(components(&host, Some(ADMIN)).await, 200);
    assert_eq!(components(&host, Some(INVOKE)).await, 403);
    assert_eq!(components(&host, Some(commented)).await, 401);
    assert_eq!(components(&host, None).await, 401);
    assert!(!host.output().contains(WARNING), "{}", host.output());
    drop(host);

    // A file the host cannot use: it does not start, and says why without
    // printing a key.
    let store = format!("sqlite://{}", dir.path().join("other.db").display());
    let refused = |file: &std::path::Path| {
        let output = Command::new(env!("CARGO_BIN_EXE_agenthost"))
            .args(["serve", "--port", "0", "--store", &store, "--api-key-file"])
            .arg(file)
            .env_remove("AGENTHOST_API_KEYS")
            .env_remove("AGENTHOST_API_KEY_FILE")
            .output()
            .unwrap();
        assert!(!output.status.success());
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let bad = dir.path().join("bad.txt");
    std::fs::write(&bad, "root:0123456789abcdef-secret\n").unwrap();
    let stderr = refused(&bad);
    assert!(stderr.contains("SCOPE:KEY"), "{stderr}");
    assert!(!stderr.contains("secret"), "{stderr}");
    let stderr = refused(&dir.path().join("missing.txt"));
    assert!(stderr.contains("cannot read the key file"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_host_beyond_loopback_without_keys_warns_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .arg("--host")
        .arg("0.0.0.0")
        .start();
    let output = host.output();
    drop(host);
    let warning = output
        .lines()
        .find(|line| line.contains(WARNING))
        .unwrap_or_else(|| panic!("no warning:\n{output}"));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("0.0.0.0"), "{warning}");
    assert!(warning.contains("--api-key"), "{warning}");

    // On loopback, without keys: no warning.
    let dir = tempfile::tempdir().unwrap();
    let host = HostBuilder::new(dir.path()).components(&["writer"]).start();
    assert!(!host.output().contains(WARNING), "{}", host.output());
}
