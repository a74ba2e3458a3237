//! A doc's terminal session (`$ command` lines, each followed by what it
//! prints) run against a test host, command by command, with `sh -c`.
//!
//! Substitutions: `localhost:7071` is the test host's address, `agenthost`
//! the built binary, and an id the doc shows as a placeholder is the real
//! one an earlier command printed: a 32-hex header value (the session id of
//! `x-ms-session-id: …`) or a JSON `"id"` written with `…` (`"6c1e…"`).
//!
//! What is printed is checked loosely but meaningfully: `HTTP/1.1 200 OK`
//! is that status; `name: value` lines of a `curl -i` are headers that must
//! be there (with that value, unless it is an id); JSON lines name keys that
//! must be in the answer, with the values shown (`"…"` is any string, text
//! around `…` a prefix and suffix); a text line must be printed (a prefix
//! when it ends with `...` or `…`; any text when it is `…something…`), on
//! stderr when its comment says `(stderr)`. Every command must exit 0. A
//! command that only reads (`curl` without a body, `client orchestration
//! status`/`list`) is run again until its answer matches, for a bounded time:
//! the doc shows the state it reaches.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::command::{clean_env, strip_comment};
use super::Block;
use crate::support::host::Host;

/// One `$` command and the lines the doc shows under it.
#[derive(Debug)]
struct Step {
    command: String,
    /// Line in the doc.
    line: usize,
    expected: Vec<String>,
}

fn steps(block: &Block) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut continued = false;
    for (i, line) in block.text.lines().enumerate() {
        if continued {
            let step = steps.last_mut().unwrap();
            step.command.push(' ');
            step.command
                .push_str(line.trim().trim_end_matches('\\').trim_end());
            continued = line.trim_end().ends_with('\\');
        } else if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: command
                    .trim_end()
                    .trim_end_matches('\\')
                    .trim_end()
                    .to_string(),
                line: block.line + 1 + i,
                expected: Vec::new(),
            });
            continued = line.trim_end().ends_with('\\');
        } else {
            let step = steps
                .last_mut()
                .unwrap_or_else(|| panic!("{}: output before any `$` line", block.at()));
            step.expected.push(line.to_string());
        }
    }
    steps
}

/// What a JSON line of the doc says of a key's value.
#[derive(Debug, Clone)]
enum Want {
    /// The key is there (an object, an array, or `…`).
    Any,
    /// A string: exact, or with `…` standing for any text.
    Str(String),
    /// `null`, a number, `true`, `false`.
    Literal(Value),
}

/// The `"key": value` pairs written in `text` (JSON with `…` elisions).
fn pairs(text: &str) -> Vec<(String, Want)> {
    let chars: Vec<char> = text.chars().collect();
    let string_at = |start: usize| -> (String, usize) {
        let mut end = start + 1;
        while end < chars.len() && chars[end] != '"' {
            if chars[end] == '\\' {
                end += 1;
            }
            end += 1;
        }
        let raw: String = chars[start..=end.min(chars.len() - 1)].iter().collect();
        let value = serde_json::from_str::<String>(&raw)
            .unwrap_or_else(|_| raw.trim_matches('"').to_string());
        (value, end + 1)
    };
    let skip_blank = |mut at: usize| {
        while at < chars.len() && chars[at].is_whitespace() {
            at += 1;
        }
        at
    };
    let mut found = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        if chars[at] != '"' {
            at += 1;
            continue;
        }
        let (key, next) = string_at(at);
        let colon = skip_blank(next);
        if colon >= chars.len() || chars[colon] != ':' {
            at = next;
            continue;
        }
        let value = skip_blank(colon + 1);
        match chars.get(value) {
            Some('"') => {
                let (text, next) = string_at(value);
                found.push((key, Want::Str(text)));
                at = next;
            }
            Some('{') | Some('[') => {
                found.push((key, Want::Any));
                at = value + 1;
            }
            _ => {
                let mut end = value;
                while end < chars.len()
                    && !",}]".contains(chars[end])
                    && !chars[end].is_whitespace()
                {
                    end += 1;
                }
                let literal: String = chars[value..end].iter().collect();
                let want = serde_json::from_str(&literal).map_or(Want::Any, Want::Literal);
                found.push((key, want));
                at = end;
            }
        }
    }
    found
}

/// Every key and value of every object in `value`.
fn flatten(value: &Value, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                out.push((key.clone(), inner.clone()));
                flatten(inner, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| flatten(v, out)),
        _ => {}
    }
}

/// `text` matches `pattern`, where each `…` stands for any text.
fn elided_match(pattern: &str, text: &str) -> bool {
    let pieces: Vec<&str> = pattern.split('…').collect();
    if pieces.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if !text.starts_with(first) || !text[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    true
}

fn wanted(want: &Want, actual: &Value) -> bool {
    match want {
        Want::Any => true,
        Want::Str(pattern) => actual.as_str().is_some_and(|a| elided_match(pattern, a)),
        Want::Literal(value) => actual == value,
    }
}

/// An id shown in full as an example: 32 hexadecimal characters.
fn is_example_id(value: &str) -> bool {
    value.len() == 32 && value.chars().all(|c| c.is_ascii_hexdigit())
}

/// What a command printed, split as the doc shows it.
struct Printed {
    status: Option<u16>,
    headers: Vec<(String, String)>,
    body: String,
    stderr: String,
}

fn printed(output: &Output, with_headers: bool) -> Printed {
    let stdout = String::from_utf8_lossy(&output.stdout).replace('\r', "");
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    if !with_headers {
        return Printed {
            status: None,
            headers: Vec::new(),
            body: stdout,
            stderr,
        };
    }
    let (head, body) = stdout.split_once("\n\n").unwrap_or((&stdout, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok());
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Printed {
        status,
        headers,
        body: body.to_string(),
        stderr,
    }
}

/// Placeholder → the real value, learnt from earlier answers.
type Bindings = Vec<(String, String)>;

fn bind(text: &str, bindings: &Bindings, address: &str) -> String {
    let mut text = text.replace("localhost:7071", address);
    for (placeholder, real) in bindings {
        text = text.replace(placeholder, real);
    }
    text
}

/// Checks `printed` against the doc's `expected` lines; the placeholders it
/// learnt, or what does not match.
fn check(
    expected: &[String],
    printed: &Printed,
    with_headers: bool,
    bindings: &Bindings,
    address: &str,
) -> Result<Bindings, String> {
    let mut learnt: Bindings = Vec::new();
    let mut in_headers = with_headers;
    let mut json = String::new();
    let mut in_json = false;
    for raw in expected {
        let stderr = raw.contains("# (stderr)");
        let line = bind(strip_comment(raw), bindings, address);
        let line = line.trim_end();
        if line.trim().is_empty() {
            in_headers = false;
            in_json = false;
            continue;
        }
        if line.starts_with("HTTP/") {
            let code: Option<u16> = line.split_whitespace().nth(1).and_then(|c| c.parse().ok());
            if printed.status != code {
                return Err(format!("status {:?}, the doc shows {line}", printed.status));
            }
            continue;
        }
        let trimmed = line.trim_start();
        let opens_json = trimmed.starts_with('{')
            || trimmed
                .strip_prefix('[')
                .is_some_and(|rest| rest.trim_start().starts_with(['{', '"', ']']));
        if opens_json || (in_json && line.starts_with(char::is_whitespace)) {
            in_json = true;
            json.push_str(trimmed);
            json.push('\n');
            continue;
        }
        in_json = false;
        if in_headers {
            let (name, value) = line
                .split_once(": ")
                .ok_or_else(|| format!("not a header line: {line}"))?;
            let actual = printed
                .headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone())
                .ok_or_else(|| format!("no {name} header"))?;
            if is_example_id(value) {
                learnt.push((value.to_string(), actual));
            } else if !actual.eq_ignore_ascii_case(value) {
                return Err(format!("{name}: {actual}, the doc shows {value}"));
            }
            continue;
        }
        let target = if stderr {
            &printed.stderr
        } else {
            &printed.body
        };
        let text = line.trim();
        let found = if text.len() > 2 * '…'.len_utf8()
            && text.starts_with('…')
            && text.ends_with('…')
        {
            target.lines().any(|l| !l.trim().is_empty())
        } else if let Some(prefix) = text.strip_suffix("...").or_else(|| text.strip_suffix('…')) {
            target
                .lines()
                .any(|l| l.trim().starts_with(prefix.trim_end()))
        } else {
            target.lines().any(|l| l.trim() == text)
        };
        if !found {
            return Err(format!("`{text}` is not printed"));
        }
    }
    if !json.is_empty() {
        let actual: Value = serde_json::from_str(printed.body.trim())
            .map_err(|e| format!("the answer is not JSON ({e})"))?;
        let mut wants = pairs(&json);
        // `"id":"6c1e…"`: the id of this answer, used by the next commands.
        for (key, want) in &wants {
            if let (Want::Str(placeholder), Some(real)) = (want, actual[key.as_str()].as_str()) {
                if key == "id" && placeholder.contains('…') {
                    learnt.push((placeholder.clone(), real.to_string()));
                }
            }
        }
        for (_, want) in wants.iter_mut() {
            if let Want::Str(pattern) = want {
                *pattern = bind(pattern, &learnt, address);
            }
        }
        let mut all = Vec::new();
        flatten(&actual, &mut all);
        for (key, want) in &wants {
            if !all.iter().any(|(k, v)| k == key && wanted(want, v)) {
                return Err(format!("no \"{key}\" matching {want:?}"));
            }
        }
    }
    Ok(learnt)
}

/// A command that changes nothing, so that it can be run again until the
/// host reaches the state the doc shows.
fn only_reads(command: &str) -> bool {
    let words: Vec<&str> = command.split_whitespace().collect();
    match words.first() {
        Some(&"curl") => !words
            .iter()
            .any(|w| ["-d", "-X", "--data", "--json"].contains(w)),
        _ => command.contains(" orchestration status ") || command.ends_with(" orchestration list"),
    }
}

/// Runs the transcript `block` against `host`, with `env` set for each command.
pub async fn run(block: &Block, host: &Host, env: &[(&str, &str)]) {
    let address = host.base.trim_start_matches("http://").to_string();
    let binary = env!("CARGO_BIN_EXE_agenthost");
    let cwd = tempfile::tempdir().unwrap();
    let mut bindings: Bindings = Vec::new();
    let steps = steps(block);
    assert!(!steps.is_empty(), "{}: no `$` line", block.at());
    for step in &steps {
        let mut command = bind(&step.command, &bindings, &address);
        if let Some(rest) = command.strip_prefix("agenthost ") {
            command = format!("'{binary}' {rest}");
        }
        let with_headers = command.split_whitespace().any(|w| w == "-i");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut sh = Command::new("sh");
            sh.arg("-c").arg(&command).current_dir(cwd.path());
            clean_env(&mut sh);
            for (key, value) in env {
                sh.env(key, value);
            }
            let output = tokio::task::spawn_blocking(move || sh.output())
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("sh: {e}"));
            let shown = printed(&output, with_headers);
            let verdict = if output.status.success() {
                check(&step.expected, &shown, with_headers, &bindings, &address)
            } else {
                Err(format!("exit status {:?}", output.status.code()))
            };
            match verdict {
                Ok(learnt) => {
                    bindings.extend(learnt);
                    break;
                }
                Err(_) if only_reads(&step.command) && Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(why) => panic!(
                    "{}:{}: `{}`: {why}\nstdout:\n{}\nstderr:\n{}\nhost:\n{}",
                    block.file,
                    step.line,
                    step.command,
                    String::from_utf8_lossy(&output.stdout),
                    shown.stderr,
                    host.output()
                ),
            }
        }
    }
}

#[test]
fn elisions_match_any_text_and_nothing_else() {
    assert!(elided_match("…", "anything"));
    assert!(elided_match(
        "{\"state\":\"x\",…}",
        "{\"state\":\"x\",\"draft\":1}"
    ));
    assert!(!elided_match(
        "{\"state\":\"x\",…}",
        "{\"draft\":1,\"state\":\"x\"}"
    ));
    assert!(elided_match("abc", "abc"));
    assert!(!elided_match("a…c", "ab"));
    let found = pairs(r#"{ "a": "x\"y", "b": null, "c": [1], "d": "6c1e…", … }"#);
    let keys: Vec<&str> = found.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["a", "b", "c", "d"]);
    assert!(matches!(&found[0].1, Want::Str(s) if s == "x\"y"));
    assert!(matches!(&found[1].1, Want::Literal(Value::Null)));
}

#[test]
fn the_checker_refuses_what_the_doc_does_not_show() {
    let shown = |status, body: &str| Printed {
        status,
        headers: vec![("x-ms-session-id".into(), "ab".repeat(16))],
        body: body.into(),
        stderr: String::new(),
    };
    let lines = |text: &str| text.lines().map(str::to_string).collect::<Vec<_>>();
    let answer = shown(Some(200), "[offline model] turn 2. You said: hi\n");
    let expected = lines("HTTP/1.1 200 OK\nx-ms-session-id: 5f0c1e0e4f8a4a7a9d1f3c2b6a8e7d10\n\n[offline model] turn 2. ...");
    let learnt = check(&expected, &answer, true, &Vec::new(), "h:1").unwrap();
    assert_eq!(
        learnt,
        [(
            "5f0c1e0e4f8a4a7a9d1f3c2b6a8e7d10".to_string(),
            "ab".repeat(16)
        )]
    );
    // Another status, a missing header, another text: each is refused.
    assert!(check(
        &expected,
        &shown(Some(404), &answer.body),
        true,
        &Vec::new(),
        "h:1"
    )
    .is_err());
    let other = lines("HTTP/1.1 200 OK\nx-other: 1\n\n[offline model] turn 2. ...");
    assert!(check(&other, &answer, true, &Vec::new(), "h:1").is_err());
    let turn = lines("HTTP/1.1 200 OK\n\n[offline model] turn 3. ...");
    assert!(check(&turn, &answer, true, &Vec::new(), "h:1").is_err());
    // JSON: the id is learnt, the URL built from it must match.
    let started = shown(
        None,
        r#"{"id":"abc","statusQueryGetUri":"http://h:1/i/abc"}"#,
    );
    let json = lines(r#"{"id":"6c1e…","statusQueryGetUri":"http://localhost:7071/i/6c1e…",…}"#);
    let learnt = check(&json, &started, false, &Vec::new(), "h:1").unwrap();
    assert_eq!(learnt, [("6c1e…".to_string(), "abc".to_string())]);
    let wrong = shown(
        None,
        r#"{"id":"abc","statusQueryGetUri":"http://h:1/i/xyz"}"#,
    );
    assert!(check(&json, &wrong, false, &Vec::new(), "h:1").is_err());
    let status = lines(r#"{"name":"chaining","runtimeStatus":"Completed","output":"…",…}"#);
    let running = shown(
        None,
        r#"{"name":"chaining","runtimeStatus":"Running","output":null}"#,
    );
    assert!(check(&status, &running, false, &Vec::new(), "h:1").is_err());
}
