//! The Rust blocks of the docs, built as test guests from the docs' own
//! text and served: the `poet` agent of docs/components.md (and the steps
//! its author takes) and the `review` orchestration of docs/orchestrations.md.

use super::shell::{serve_until_healthy, suite_store};
use super::*;

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

#[tokio::test(flavor = "multi_thread")]
async fn the_ask_remote_orchestration_of_a2a_md_holds_one_conversation_with_another_host() {
    let block = claimed_one(
        "the_ask_remote_orchestration_of_a2a_md_holds_one_conversation_with_another_host",
    );
    assert_eq!(block.info, "rust");
    assert_built_from("doc-remote", &block);
    let (dir1, dir2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (model1, model2) = (FakeModel::start().await, FakeModel::start().await);
    let remote = HostBuilder::new(dir2.path())
        .components(&["writer"])
        .openai(&model2, "sk-test")
        .start();
    // The grant the doc names, for this remote's address.
    let authority = remote.base.trim_start_matches("http://").to_string();
    let components = dir1.path().join("components");
    std::fs::create_dir_all(&components).unwrap();
    std::fs::write(
        components.join("doc-remote.toml"),
        format!("allowed_hosts = [\"{authority}\"]\n"),
    )
    .unwrap();
    let host = HostBuilder::new(dir1.path())
        .components(&["doc-remote"])
        .openai(&model1, "sk-test")
        .start();
    let card = remote.url("/a2a/writer/.well-known/agent-card.json");
    let id = crate::support::durable::start(
        &host,
        "ask_remote",
        &json!({"card": card, "question": "Write about tea"}),
    )
    .await;
    let done = wait_for(&host, &id, &["Completed", "Failed"]).await;
    assert_eq!(done["runtimeStatus"], "Completed", "{done}");
    assert_eq!(
        done["output"],
        json!(format!(
            "{}\n---\n{}",
            echo_of("Write about tea"),
            echo_of("Make it shorter.")
        )),
        "{done}"
    );
    // One conversation on the remote: the second turn saw the first.
    let requests = model2.requests();
    assert_eq!(requests.len(), 2);
    let transcript = requests[1].transcript().join("\n");
    assert!(transcript.contains("Write about tea"), "{transcript}");
    assert!(
        model1.requests().is_empty(),
        "the calling host asked no model"
    );
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
        recipe.iter().any(|l| l
            .trim_start_matches("$(GUEST_LINT) ")
            .starts_with("$(CARGO) build --target $(WASM_TARGET) --release")
            && l.contains("-p doc-poet")),
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
