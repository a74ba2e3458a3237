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
mod config;
mod durable_task;
mod examples;
mod shell;
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
    // docs/a2a-and-mcp.md
    Claim {
        file: "docs/a2a-and-mcp.md",
        first_line: "$ curl -s localhost:7071/a2a/writer/.well-known/agent-card.json",
        check: "the_agent_card_transcript_of_a2a_md_gets_the_card_it_shows",
    },
    Claim {
        file: "docs/a2a-and-mcp.md",
        first_line: "A=localhost:7071/a2a/writer; V='A2A-Version: 1.0'",
        check: "the_json_rpc_curl_lines_of_a2a_md_get_answers",
    },
    Claim {
        file: "docs/a2a-and-mcp.md",
        first_line: "import asyncio, httpx",
        check: "the_a2a_sdk_example_of_a2a_md_streams_an_answer",
    },
    Claim {
        file: "docs/a2a-and-mcp.md",
        first_line: "use agenthost_guest::{Component, Context, Orchestration};",
        check: "the_ask_remote_orchestration_of_a2a_md_holds_one_conversation_with_another_host",
    },
    Claim {
        file: "docs/a2a-and-mcp.md",
        first_line: "M=localhost:7071/runtime/webhooks/mcp;",
        check: "the_mcp_curl_lines_of_a2a_md_list_the_tools_and_call_one",
    },
    Claim {
        file: "docs/a2a-and-mcp.md",
        first_line: "from mcp import ClientSession",
        check: "the_mcp_sdk_example_of_a2a_md_continues_a_thread",
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
        first_line: "fn get_weather(query: WeatherQuery)",
        check: "the_three_languages_of_components_md_are_the_samples_code",
    },
    Claim {
        file: "docs/components.md",
        first_line: "def get_weather(city: Annotated[str,",
        check: "the_three_languages_of_components_md_are_the_samples_code",
    },
    Claim {
        file: "docs/components.md",
        first_line: "function getWeather({ city }) {",
        check: "the_three_languages_of_components_md_are_the_samples_code",
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
        first_line: "agenthost check-replay target/wasm32-wasip2/release/approval.wasm",
        check: "the_check_replay_line_of_orchestrations_md_judges_the_instances_of_a_store",
    },
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
    Claim {
        file: "docs/a2a-and-mcp.md",
        first_line: "git clone -b 1.0-dev https://github.com/a2aproject/a2a-tck /tmp/a2a-tck",
        check: "the_make_lines_name_targets_and_variables_the_makefile_has",
    },
    // docs/stores-and-hubs.md
    Claim {
        file: "docs/stores-and-hubs.md",
        first_line: "git clone https://github.com/microsoft/durabletask-python",
        check: "the_make_lines_name_targets_and_variables_the_makefile_has",
    },
    Claim {
        file: "docs/stores-and-hubs.md",
        first_line: "agenthost serve --store postgres://",
        check: "the_serve_line_with_a_postgres_store_and_a_taskhub_serves",
    },
    Claim {
        file: "docs/stores-and-hubs.md",
        first_line: "agenthost serve --grpc --taskhub orders --taskhubs billing,reports",
        check: "the_hubs_of_one_host_are_served_as_the_doc_says",
    },
    Claim {
        file: "docs/stores-and-hubs.md",
        first_line: "agenthost worker --store postgres://",
        check: "the_workers_and_fronts_of_one_hub_run_as_the_doc_says",
    },
    Claim {
        file: "docs/stores-and-hubs.md",
        first_line: "from durabletask import client",
        check: "the_python_client_of_stores_and_hubs_md_gets_a_draft_published",
    },
    Claim {
        file: "docs/stores-and-hubs.md",
        first_line: "# worker.py",
        check: "the_python_worker_of_stores_and_hubs_md_serves_an_activity_to_a_wasm_orchestration",
    },
    Claim {
        file: "docs/stores-and-hubs.md",
        first_line: "export ENDPOINT=",
        check: "the_sample_variables_of_stores_and_hubs_md_serve_the_python_worker_and_client",
    },
    Claim {
        file: "docs/stores-and-hubs.md",
        first_line: "# client.py",
        check: "the_sample_variables_of_stores_and_hubs_md_serve_the_python_worker_and_client",
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
    let source = [
        include_str!("doc_blocks.rs"),
        include_str!("doc_blocks/examples.rs"),
        include_str!("doc_blocks/config.rs"),
        include_str!("doc_blocks/shell.rs"),
        include_str!("doc_blocks/durable_task.rs"),
    ]
    .concat();
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
