//! The TOML and YAML blocks of the docs, parsed and given to a host as the
//! docs say.

use super::*;

// ---------------------------------------------------------------- TOML blocks

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_agent_settings_file_sets_the_writers_temperature_and_max_tokens() {
    let block =
        claimed_one("the_readme_agent_settings_file_sets_the_writers_temperature_and_max_tokens");
    assert_eq!(block.info, "toml");
    let settings: toml::Table = toml::from_str(&block.text).unwrap();
    let writer = settings["agents"]["writer"].as_table().unwrap();
    let temperature = writer["temperature"].as_float().unwrap();
    let max_output_tokens = writer["max_output_tokens"].as_integer().unwrap();
    assert_eq!((temperature, max_output_tokens), (0.2, 800));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agents.toml");
    std::fs::write(&file, &block.text).unwrap();
    let model = FakeModel::start().await;
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .openai(&model, "sk-test")
        .arg("--agent-settings")
        .arg(file.to_str().unwrap())
        .start();
    let (status, answer) = run_agent(&host, "writer", "Write a haiku about tea").await;
    assert_eq!(status, 200, "{answer}");
    let sent = &model.requests()[0].body;
    assert_eq!(
        sent["temperature"].as_f64(),
        Some(temperature),
        "the temperature as the file writes it: {sent}"
    );
    assert_eq!(
        sent["max_tokens"].as_i64(),
        Some(max_output_tokens),
        "{sent}"
    );
}

/// `[dependencies]` names of a Cargo.toml.
fn dependency_names(manifest: &toml::Table) -> Vec<String> {
    let mut names: Vec<String> = manifest["dependencies"]
        .as_table()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    names.sort();
    names
}

#[test]
fn the_components_cargo_toml_lists_what_the_doc_guests_depend_on() {
    let block = claimed_one("the_components_cargo_toml_lists_what_the_doc_guests_depend_on");
    assert_eq!(block.info, "toml");
    let doc: toml::Table = toml::from_str(&block.text).unwrap();
    assert_eq!(
        doc["lib"]["crate-type"],
        toml::Value::Array(vec!["cdylib".into()])
    );
    for guest in ["doc-poet", "doc-review"] {
        let path = workspace().join(format!("tests/guests/{guest}/Cargo.toml"));
        let ours: toml::Table = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        assert_eq!(dependency_names(&doc), dependency_names(&ours), "{guest}");
        assert_eq!(ours["lib"]["crate-type"], doc["lib"]["crate-type"]);
    }
    // The SDK path is the repository's guests/rust, seen from a crate beside
    // a checkout named agenthost.
    let sdk = doc["dependencies"]["agenthost-guest"]["path"]
        .as_str()
        .unwrap();
    let sdk = sdk.strip_prefix("../agenthost/").unwrap();
    assert!(workspace().join(sdk).join("Cargo.toml").exists(), "{sdk}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_weather_grants_file_is_loaded_beside_its_component() {
    let block = claimed_one("the_weather_grants_file_is_loaded_beside_its_component");
    assert_eq!(block.info, "toml");
    // The block names its file; the doc's rule is NAME.toml beside NAME.wasm.
    let file = block
        .first_line()
        .trim_start_matches('#')
        .trim()
        .to_string();
    let rule = std::fs::read_to_string(workspace().join(&block.file)).unwrap();
    assert!(
        rule.contains("`NAME.toml` for `NAME.wasm`"),
        "the doc's naming rule"
    );
    // weather.toml grants the sample `weather` (weather.wasm).
    let name = file.strip_suffix(".toml").unwrap().to_string();
    let grants: toml::Table = toml::from_str(&block.text).unwrap();
    let variables: Vec<String> = grants["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();

    let start = |dir: &Path, set_env: bool| {
        std::fs::create_dir_all(dir.join("components")).unwrap();
        std::fs::write(dir.join("components").join(&file), &block.text).unwrap();
        let mut builder = HostBuilder::new(dir).components(&[name.as_str()]);
        if set_env {
            for name in &variables {
                builder = builder.env(name, "metric");
            }
        }
        builder.start()
    };

    // Loaded with the grants it names.
    let dir = tempfile::tempdir().unwrap();
    let host = start(dir.path(), true);
    let (status, health) = crate::support::health(&host.base, "/api/health").await;
    assert_eq!(status, 200);
    assert_eq!(
        health["agents"],
        json!([{"name": "weather", "status": "ready"}]),
        "{}",
        host.output()
    );
    let components: Value = crate::support::get_json(host.url("/api/components")).await;
    let weather = components["components"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name.as_str())
        .unwrap_or_else(|| panic!("{components:#}"));
    let served = &weather["grants"];
    assert_eq!(
        served["allowed_hosts"],
        serde_json::to_value(&grants["allowed_hosts"]).unwrap()
    );
    assert_eq!(served["env"], json!(variables));
    assert_eq!(
        served["memory_mb"],
        grants["memory_mb"].as_integer().unwrap()
    );
    assert_eq!(
        served["max_instances"],
        grants["max_instances"].as_integer().unwrap()
    );
    let cpu = humantime::parse_duration(grants["cpu_time"].as_str().unwrap()).unwrap();
    assert_eq!(served["cpu_time_ms"], cpu.as_millis() as u64);
    drop(host);

    // The variables come from the host's environment: unset, the load fails
    // and says which one.
    let dir = tempfile::tempdir().unwrap();
    let host = start(dir.path(), false);
    let components: Value = crate::support::get_json(host.url("/api/components")).await;
    let failures = components["failures"].to_string();
    assert!(
        failures.contains(&variables[0]) && failures.contains("not set"),
        "{components:#}"
    );
}

// ---------------------------------------------------------------- YAML block

#[tokio::test(flavor = "multi_thread")]
async fn the_prometheus_scrape_config_scrapes_metrics_with_the_admin_key() {
    let block = claimed_one("the_prometheus_scrape_config_scrapes_metrics_with_the_admin_key");
    assert_eq!(block.info, "yaml");
    let config: Value = serde_norway::from_str(&block.text).unwrap();
    let job = &config["scrape_configs"][0];
    assert_eq!(job["job_name"], "agenthost");
    let path = job["metrics_path"].as_str().unwrap();
    let authorization = &job["authorization"];
    assert_eq!(authorization["type"], "Bearer");
    // The targets are hosts on the port `serve` listens on by default.
    for target in job["static_configs"][0]["targets"].as_array().unwrap() {
        let (_, port) = target.as_str().unwrap().rsplit_once(':').unwrap();
        assert_eq!(port, "7071", "{target}");
    }

    let dir = tempfile::tempdir().unwrap();
    // Prometheus reads the key from credentials_file: so do we.
    let key_file = dir.path().join("admin.key");
    std::fs::write(&key_file, "doc-admin-key-0123456789\n").unwrap();
    assert!(authorization["credentials_file"]
        .as_str()
        .unwrap()
        .ends_with("admin.key"));
    let key = std::fs::read_to_string(&key_file)
        .unwrap()
        .trim()
        .to_string();
    let host = HostBuilder::new(dir.path())
        .components(&["writer"])
        .arg("--api-key")
        .arg(&format!("admin:{key}"))
        .start();
    let scrape = client()
        .get(host.url(path))
        .header("authorization", format!("Bearer {key}"))
        .send()
        .await
        .unwrap();
    let text = crate::support::prometheus_text(scrape).await;
    assert!(text.contains("agenthost_component_loads_total"), "{text}");
    // Without the authorization the scrape is refused.
    let anonymous = client().get(host.url(path)).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
}

/// The side-by-side excerpts of docs/components.md are the samples' own
/// code, word for word (the samples run in tests/languages.rs).
#[test]
fn the_three_languages_of_components_md_are_the_samples_code() {
    let blocks = claimed("the_three_languages_of_components_md_are_the_samples_code");
    assert_eq!(blocks.len(), 3);
    for block in blocks {
        let sample = match block.info.as_str() {
            "rust" => "sample-agents/weather/src/lib.rs",
            "python" => "sample-agents/python/weather/app.py",
            "js" => "sample-agents/js/weather/app.js",
            other => panic!("{}: a ```{other} block", block.at()),
        };
        let code = std::fs::read_to_string(workspace().join(sample)).unwrap();
        assert!(
            code.contains(block.text.trim_end()),
            "{} is not the code of {sample}:\n{}",
            block.at(),
            block.text
        );
    }
}
