//! Every fenced code block of README.md and docs/*.md is run by a test here,
//! so the docs stay true: a block is claimed by exactly one check (the
//! `CLAIMS` table, by file and first line), and a block nobody claims fails
//! `every_code_block_in_the_docs_is_claimed_by_a_check` with its file and
//! line. The checks drive the real binary over HTTP:
//!
//! - Rust blocks are the code of two test guests (`tests/guests/doc-poet`,
//!   `tests/guests/doc-review`), whose build scripts copy them out of the
//!   markdown, so they compile as written and are served here;
//! - TOML and YAML blocks are parsed and given to a host as the docs say;
//! - transcripts (`$ ` lines) run each command with `sh -c` against a test
//!   host and compare what it prints with what the doc shows
//!   (`doc_blocks/transcript.rs`);
//! - command lines are run for real with their paths, ports and stores
//!   replaced by a test's own (`doc_blocks/command.rs`), `make` lines as
//!   `make -n`.

mod command;
mod transcript;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pulldown_cmark::{CodeBlockKind, Event, Parser, Tag, TagEnd};
use serde_json::{json, Value};

use crate::support::durable::{wait_for, wait_for_custom_status};
use crate::support::fake_model::{echo_of, Recorded};
use crate::support::host::{hub_for, store_location, test_store, Host};
use crate::support::{client, component, workspace, FakeModel, HostBuilder, Reply};

use command::{Spawned, Substitutions};

/// One fenced (or indented) code block of a doc.
#[derive(Debug, Clone)]
pub struct Block {
    /// Relative to the workspace root: `README.md`, `docs/NAME.md`.
    pub file: String,
    /// The line of its opening fence, from 1.
    pub line: usize,
    /// The info string after the fence (`rust`, `toml`, …; empty for none).
    pub info: String,
    pub text: String,
}

impl Block {
    fn first_line(&self) -> &str {
        self.text.lines().next().unwrap_or_default().trim()
    }

    fn at(&self) -> String {
        format!("{}:{}", self.file, self.line)
    }
}

/// README.md and every docs/*.md, in a stable order.
fn doc_files() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(workspace().join("docs"))
        .expect("docs/")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    let mut files = vec!["README.md".to_string()];
    files.extend(docs);
    files
}

/// Every code block of `file` (relative to the workspace root).
fn blocks_of_file(file: &str) -> Vec<Block> {
    let markdown =
        std::fs::read_to_string(workspace().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    for (event, range) in Parser::new(&markdown).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                open = Some(Block {
                    file: file.to_string(),
                    line: markdown[..range.start].matches('\n').count() + 1,
                    info: match kind {
                        CodeBlockKind::Fenced(info) => info.to_string(),
                        CodeBlockKind::Indented => String::new(),
                    },
                    text: String::new(),
                });
            }
            Event::Text(text) => {
                if let Some(block) = open.as_mut() {
                    block.text.push_str(&text);
                }
            }
            Event::End(TagEnd::CodeBlock) => blocks.extend(open.take()),
            _ => {}
        }
    }
    blocks
}

fn all_blocks() -> Vec<Block> {
    doc_files().iter().flat_map(|f| blocks_of_file(f)).collect()
}

/// A check's claim on a block: the block of `file` whose first line starts
/// with `first_line` is run by the test `check`.
struct Claim {
    file: &'static str,
    first_line: &'static str,
    check: &'static str,
}

const CLAIMS: &[Claim] = &[
    // README.md
    Claim {
        file: "README.md",
        first_line: "make run ",
        check: "the_make_lines_name_targets_and_variables_the_makefile_has",
    },
    Claim {
        file: "README.md",
        first_line: "$ curl -i -d 'Write a haiku about tea'",
        check: "the_readme_curl_session_gets_the_answers_it_shows",
    },
    Claim {
        file: "README.md",
        first_line: "[agents.writer]",
        check: "the_readme_agent_settings_file_sets_the_writers_temperature_and_max_tokens",
    },
    Claim {
        file: "README.md",
        first_line: "agenthost serve --components DIR",
        check: "the_readme_serve_line_serves_its_components",
    },
    // docs/components.md
    Claim {
        file: "docs/components.md",
        first_line: "cargo new --lib poet",
        check: "the_component_author_steps_build_the_poet_that_the_curl_line_runs",
    },
    Claim {
        file: "docs/components.md",
        first_line: "[package]",
        check: "the_components_cargo_toml_lists_what_the_doc_guests_depend_on",
    },
    Claim {
        file: "docs/components.md",
        first_line: "use agenthost_guest::{Agent, Component, Tool};",
        check: "the_poet_agent_of_components_md_runs_its_count_syllables_tool",
    },
    Claim {
        file: "docs/components.md",
        first_line: "cargo build --target wasm32-wasip2 --release",
        check: "the_component_author_steps_build_the_poet_that_the_curl_line_runs",
    },
    Claim {
        file: "docs/components.md",
        first_line: "# weather.toml",
        check: "the_weather_grants_file_is_loaded_beside_its_component",
    },
    // docs/operations.md
    Claim {
        file: "docs/operations.md",
        first_line: "scrape_configs:",
        check: "the_prometheus_scrape_config_scrapes_metrics_with_the_admin_key",
    },
    Claim {
        file: "docs/operations.md",
        first_line: "AGENTHOST_LOG=",
        check: "the_log_filters_of_operations_md_are_accepted_and_pick_the_lines_they_say",
    },
    Claim {
        file: "docs/operations.md",
        first_line: "sqlite3 agenthost.db \"VACUUM INTO",
        check: "vacuum_into_copies_a_serving_hosts_sqlite_file",
    },
    // docs/orchestrations.md
    Claim {
        file: "docs/orchestrations.md",
        first_line: "use std::time::Duration;",
        check: "the_review_orchestration_of_orchestrations_md_waits_for_approval_and_completes",
    },
    // docs/performance.md
    Claim {
        file: "docs/performance.md",
        first_line: "make bench ",
        check: "the_make_lines_name_targets_and_variables_the_makefile_has",
    },
    // docs/stores-and-hubs.md
    Claim {
        file: "docs/stores-and-hubs.md",
        first_line: "agenthost serve --store postgres://",
        check: "the_serve_line_with_a_postgres_store_and_a_taskhub_serves",
    },
    Claim {
        file: "docs/stores-and-hubs.md",
        first_line: "agenthost worker --store postgres://",
        check: "the_workers_and_fronts_of_one_hub_run_as_the_doc_says",
    },
    Claim {
        file: "docs/stores-and-hubs.md",
        first_line: "$ agenthost client agent run writer",
        check: "the_client_session_of_stores_and_hubs_md_gets_the_answers_it_shows",
    },
];

fn claims_of(block: &Block) -> Vec<&'static Claim> {
    CLAIMS
        .iter()
        .filter(|c| c.file == block.file && block.first_line().starts_with(c.first_line))
        .collect()
}

/// The blocks the test `check` claims (at least one).
fn claimed(check: &str) -> Vec<Block> {
    let blocks: Vec<Block> = all_blocks()
        .into_iter()
        .filter(|b| claims_of(b).iter().any(|c| c.check == check))
        .collect();
    assert!(
        !blocks.is_empty(),
        "no block of the docs is claimed by {check}: was it removed or its first line changed?"
    );
    blocks
}

/// The one block the test `check` claims.
fn claimed_one(check: &str) -> Block {
    let mut blocks = claimed(check);
    assert_eq!(blocks.len(), 1, "{check} claims one block");
    blocks.remove(0)
}

#[test]
fn every_code_block_in_the_docs_is_claimed_by_a_check() {
    let blocks = all_blocks();
    assert!(
        blocks.len() >= CLAIMS.len(),
        "the parser found {} blocks",
        blocks.len()
    );
    let mut problems = Vec::new();
    for block in &blocks {
        let claims = claims_of(block);
        match claims.len() {
            1 => {}
            0 => problems.push(format!(
                "{} (```{}, first line `{}`) is claimed by no check: add one to CLAIMS in tests/doc_blocks.rs",
                block.at(),
                block.info,
                block.first_line()
            )),
            n => problems.push(format!(
                "{} is claimed by {n} checks: {:?}",
                block.at(),
                claims.iter().map(|c| c.check).collect::<Vec<_>>()
            )),
        }
    }
    let source = include_str!("doc_blocks.rs");
    for claim in CLAIMS {
        if !blocks
            .iter()
            .any(|b| claims_of(b).iter().any(|c| std::ptr::eq(*c, claim)))
        {
            problems.push(format!(
                "the claim of {} on `{}` matches no block",
                claim.file, claim.first_line
            ));
        }
        if !source.contains(&format!("fn {}()", claim.check)) {
            problems.push(format!("no test named {}", claim.check));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------- helpers

/// Fails when the test guest `crate_name` (built by `make test-components`
/// into the component of the same name)
/// was not built from `block` as the doc has it now: its build script's copy
/// of the block must be the block, and the component newer than that copy.
fn assert_built_from(crate_name: &str, block: &Block) {
    let build = workspace().join(format!(
        "target/{}/release/build",
        makefile_variable("WASM_TARGET")
    ));
    let copy = std::fs::read_dir(&build)
        .unwrap_or_else(|e| panic!("{}: {e}: run `make test-components`", build.display()))
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{crate_name}-"))
        })
        .map(|e| e.path().join("out/example.rs"))
        .filter(|p| p.exists())
        .max_by_key(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok())
        .unwrap_or_else(|| panic!("{crate_name} was never built: run `make test-components`"));
    let copied = std::fs::read_to_string(&copy).unwrap();
    assert!(
        copied == block.text,
        "{} changed since {crate_name} was built: run `make test-components`",
        block.at()
    );
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).unwrap();
    let wasm = component(crate_name);
    assert!(
        modified(&wasm) >= modified(&copy),
        "{} is older than its source: run `make test-components`",
        wasm.display()
    );
}

/// `POST /api/agents/{agent}/run` with a text body: status and answer.
async fn run_agent(host: &Host, agent: &str, message: &str) -> (u16, String) {
    let response = client()
        .post(host.url(&format!("/api/agents/{agent}/run")))
        .body(message.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

/// The Makefile's value of `NAME := VALUE` (or `?=`).
fn makefile_variable(name: &str) -> String {
    let makefile = std::fs::read_to_string(workspace().join("Makefile")).unwrap();
    makefile
        .lines()
        .find_map(|l| {
            let (key, value) = l.split_once('=')?;
            let key = key.trim_end_matches([':', '?']).trim();
            (key == name).then(|| value.trim().to_string())
        })
        .unwrap_or_else(|| panic!("the Makefile sets no {name}"))
}

/// The recipe lines of Makefile target `target`.
fn makefile_recipe(target: &str) -> Vec<String> {
    let makefile = std::fs::read_to_string(workspace().join("Makefile")).unwrap();
    let mut lines = makefile
        .lines()
        .skip_while(|l| !l.starts_with(&format!("{target}:")));
    lines.next();
    lines
        .take_while(|l| l.starts_with('\t'))
        .map(|l| l.trim().to_string())
        .collect()
}

// ---------------------------------------------------------------- Rust blocks

#[tokio::test(flavor = "multi_thread")]
async fn the_poet_agent_of_components_md_runs_its_count_syllables_tool() {
    let block = claimed_one("the_poet_agent_of_components_md_runs_its_count_syllables_tool");
    assert_eq!(block.info, "rust");
    assert_built_from("doc-poet", &block);
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    let line = "An old silent pond";
    model.push(Reply::ToolCall(
        "count_syllables".into(),
        json!({ "text": line }),
    ));
    model.push(Reply::Text("Old pond, a frog leaps.".into()));
    let host = HostBuilder::new(dir.path())
        .components(&["doc-poet"])
        .openai(&model, "sk-test")
        .start();
    let (status, answer) = run_agent(&host, "poet", "A haiku about autumn").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer, "Old pond, a frog leaps.");

    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one tool round");
    // The instructions and the tool are the doc's.
    let system = requests[0].messages()[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        block.text.contains(&format!(".instructions(\"{system}\")")),
        "the model got the doc's instructions: {system}"
    );
    let tool = &requests[0].body["tools"][0]["function"];
    assert_eq!(tool["name"], "count_syllables");
    assert_eq!(tool["description"], "Counts the syllables of a line");
    // "Doc comments become the descriptions the model sees."
    assert_eq!(
        tool["parameters"]["properties"]["text"]["description"],
        "One line of the poem."
    );
    // The tool ran in the component and its result went back to the model:
    // five vowels (a, o, i, e, o) in the line.
    let result = requests[1].last_tool_result().expect("a tool result");
    let result: Value = serde_json::from_str(&result).unwrap();
    assert_eq!(result, json!({"syllables": 5}));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_review_orchestration_of_orchestrations_md_waits_for_approval_and_completes() {
    let block = claimed_one(
        "the_review_orchestration_of_orchestrations_md_waits_for_approval_and_completes",
    );
    assert_eq!(block.info, "rust");
    assert_built_from("doc-review", &block);
    let dir = tempfile::tempdir().unwrap();
    let model = FakeModel::start().await;
    // The detector (the only agent asked for structured output) says "fine";
    // every other agent echoes.
    model.respond_with(Arc::new(|request: &Recorded| {
        if request.body.get("response_format").is_some() {
            Reply::Text(r#"{"is_spam":false,"confidence":0.1,"reason":"fine"}"#.into())
        } else {
            Reply::Echo
        }
    }));
    // writer; spam_detector (in `spam`); physicist and chemist (in `scientists`).
    let host = HostBuilder::new(dir.path())
        .components(&["writer", "spam", "scientists", "doc-review"])
        .openai(&model, "sk-test")
        .start();

    // Started at its declared route, with the input as JSON.
    let response = client()
        .post(host.url("/api/review/run"))
        .json(&json!("tea"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let started: Value = response.json().await.unwrap();
    let id = started["id"].as_str().unwrap().to_string();

    let draft = echo_of("Write about tea");
    let waiting = wait_for_custom_status(&host, &id, "/state", &json!("awaiting_approval")).await;
    assert_eq!(waiting["runtimeStatus"], "Running");
    assert_eq!(waiting["customStatus"]["draft"], draft.as_str());

    // The event, through its declared event route.
    let raised = client()
        .post(host.url(&format!("/api/approval/{id}")))
        .json(&json!(true))
        .send()
        .await
        .unwrap();
    assert_eq!(raised.status(), 202);
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    let output = done["output"].as_str().unwrap();
    assert!(output.contains("approved: true"), "{output}");
    assert_eq!(output, format!("{draft} (2 opinions, approved: true)"));

    // Each agent was asked once; the detector for the verdict's schema.
    let requests = model.requests();
    assert_eq!(requests.len(), 4, "writer, detector, two scientists");
    let detector = requests
        .iter()
        .find(|r| r.body.get("response_format").is_some())
        .unwrap();
    let schema = &detector.body["response_format"]["json_schema"]["schema"];
    assert_eq!(schema["properties"]["is_spam"]["type"], "boolean");
    assert_eq!(detector.last_user_message(), draft);
}

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
    assert_eq!(scrape.status(), 200);
    let content_type = scrape.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = scrape.text().await.unwrap();
    openmetrics_parser::prometheus::parse_prometheus(&text)
        .unwrap_or_else(|e| panic!("{path} is not Prometheus text: {e:?}\n{text}"));
    assert!(text.contains("agenthost_component_loads_total"), "{text}");
    // Without the authorization the scrape is refused.
    let anonymous = client().get(host.url(path)).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
}

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
fn samples_in(dir: &Path) -> PathBuf {
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
fn suite_store(dir: &Path) -> String {
    store_location(dir, None).0
}

/// Runs the `serve` line `line` until its health answers; returns it
/// running and its health.
async fn serve_until_healthy(line: &str, dir: &Path, subs: &Substitutions) -> (Spawned, Value) {
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

#[tokio::test(flavor = "multi_thread")]
async fn the_component_author_steps_build_the_poet_that_the_curl_line_runs() {
    let blocks = claimed("the_component_author_steps_build_the_poet_that_the_curl_line_runs");
    let (create, build) = (&blocks[0], &blocks[1]);
    let target = makefile_variable("WASM_TARGET");
    let manifest: toml::Table = toml::from_str(
        &claimed_one("the_components_cargo_toml_lists_what_the_doc_guests_depend_on").text,
    )
    .unwrap();
    let crate_name = manifest["package"]["name"].as_str().unwrap().to_string();

    // 1. `cargo new --lib poet && cd poet`: a library crate (src/lib.rs,
    // where the doc's code goes) of the Cargo.toml block's name.
    let steps: Vec<&str> = create.text.lines().collect();
    let dir = tempfile::tempdir().unwrap();
    let cargo = option_env!("CARGO").unwrap_or("cargo");
    let new = std::process::Command::new("sh")
        .arg("-c")
        .arg(
            steps[0]
                .replacen("cargo ", &format!("{cargo} "), 1)
                .replace("cd poet", "cd poet && test -f src/lib.rs"),
        )
        .current_dir(dir.path())
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    assert!(
        new.status.success(),
        "{}: {}",
        steps[0],
        String::from_utf8_lossy(&new.stderr)
    );
    let created: toml::Table =
        toml::from_str(&std::fs::read_to_string(dir.path().join("poet/Cargo.toml")).unwrap())
            .unwrap();
    assert_eq!(
        created["package"]["name"].as_str(),
        Some(crate_name.as_str())
    );
    // `rustup target add T`: the target the Makefile builds components for.
    assert_eq!(steps[1].trim(), format!("rustup target add {target}"));

    // 3. `cargo build --target T --release`: what `make test-components`
    // runs for the doc guests, whose output is target/T/release/NAME.wasm.
    let lines: Vec<&str> = build.text.lines().collect();
    assert_eq!(
        lines[0].trim(),
        format!("cargo build --target {target} --release")
    );
    let recipe = makefile_recipe("test-components");
    assert!(
        recipe.iter().any(
            |l| l.starts_with("$(CARGO) build --target $(WASM_TARGET) --release")
                && l.contains("-p doc-poet")
        ),
        "{recipe:?}"
    );
    let built = workspace().join(format!("target/{target}/release/doc_poet.wasm"));
    assert!(
        built.exists(),
        "{}: run `make test-components`",
        built.display()
    );
    // `cp target/T/release/poet.wasm /path/to/components/`: the same rule
    // for a crate named poet. Done here with the doc guest's file.
    let cp: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        cp[1],
        format!(
            "target/{target}/release/{}.wasm",
            crate_name.replace('-', "_")
        )
    );
    let components = dir.path().join(cp[2].trim_start_matches('/'));
    std::fs::create_dir_all(&components).unwrap();
    std::fs::copy(&built, components.join(format!("{crate_name}.wasm"))).unwrap();

    // `agenthost serve --components /path/to/components`, then the curl line.
    let subs = Substitutions {
        components: components.clone(),
        store: suite_store(dir.path()),
        hub: hub_for(dir.path()),
    };
    let (served, health) = serve_until_healthy(lines[2], dir.path(), &subs).await;
    assert_eq!(
        health["agents"],
        json!([{"name": "poet", "status": "ready"}])
    );
    let curl = lines[3].replace("localhost:7071", served.base.trim_start_matches("http://"));
    let output = std::process::Command::new("sh")
        .arg("-c")
        .arg(&curl)
        .output()
        .unwrap();
    let answer = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(output.status.success(), "{curl}");
    // The offline model says what it was told: the message reached the poet.
    assert!(
        answer.starts_with("[offline model]") && answer.contains("A haiku about autumn"),
        "{curl}: {answer}"
    );
    drop(served);
}
