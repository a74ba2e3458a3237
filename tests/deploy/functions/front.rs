//! The Azure Functions host as a front, as far as routing goes: which
//! function (if any) a request reaches, read from the app folder's files
//! as the Functions host reads them (`host.json`'s
//! `extensions.http.routePrefix`, each `function.json`'s `httpTrigger`).
//!
//! The rules kept (azure-functions-host, `ScriptHost.ValidateHttpFunction`
//! and its route table): a route defaults to the function's name; one that
//! starts with `admin` or `runtime` (case-insensitive) is refused, those
//! spaces being the Functions host's own, and a request under them never
//! reaches a function; the prefix (default `api`) comes first; a literal
//! segment matches case-insensitively, `{x}` (or `{x:constraint}`) one
//! segment, `{*x}` the rest, none included; no methods means every method.

use std::path::Path;

use serde_json::Value;

use super::super::read_json;

/// One HTTP function: its name, route and methods (lowercase; empty: all).
#[derive(Debug)]
pub struct HttpFunction {
    pub name: String,
    pub route: String,
    pub methods: Vec<String>,
}

/// The routes of an app folder.
#[derive(Debug)]
pub struct Front {
    prefix: String,
    pub functions: Vec<HttpFunction>,
}

impl Front {
    /// Reads `dir`'s `host.json` and every `*/function.json` with an
    /// `httpTrigger`; panics on a route the Functions host would refuse.
    pub fn read(dir: &Path) -> Self {
        let host = read_json(dir.join("host.json"));
        let prefix = host["extensions"]["http"]["routePrefix"]
            .as_str()
            .unwrap_or("api")
            .trim_matches('/')
            .to_string();
        let mut functions = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let folder = entry.unwrap().path();
            let file = folder.join("function.json");
            if !file.is_file() {
                continue;
            }
            let name = folder.file_name().unwrap().to_string_lossy().to_string();
            let declared = read_json(file);
            let bindings = declared["bindings"].as_array().cloned().unwrap_or_default();
            for trigger in bindings.iter().filter(|b| b["type"] == "httpTrigger") {
                let route = trigger["route"].as_str().unwrap_or(&name).to_string();
                let lowered = route.trim_matches('/').to_ascii_lowercase();
                assert!(
                    !lowered.starts_with("admin") && !lowered.starts_with("runtime"),
                    "{name}: the Functions host refuses the route {route} (built-in routes)"
                );
                let methods = match &trigger["methods"] {
                    Value::Array(methods) => methods
                        .iter()
                        .filter_map(|m| m.as_str().map(str::to_ascii_lowercase))
                        .collect(),
                    _ => Vec::new(),
                };
                functions.push(HttpFunction {
                    name: name.clone(),
                    route,
                    methods,
                });
            }
        }
        Self { prefix, functions }
    }

    /// The function `method path` reaches, if any.
    pub fn reaches(&self, method: &str, path: &str) -> Option<&HttpFunction> {
        let path = path.split('?').next().unwrap_or_default();
        let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        let first = segments.first().map(|s| s.to_ascii_lowercase());
        if first.is_some_and(|s| s == "admin" || s == "runtime") {
            return None; // the Functions host's own
        }
        let rest = if self.prefix.is_empty() {
            &segments[..]
        } else {
            let prefix: Vec<&str> = self.prefix.split('/').collect();
            let starts = segments.len() >= prefix.len()
                && prefix
                    .iter()
                    .zip(&segments)
                    .all(|(p, s)| p.eq_ignore_ascii_case(s));
            if !starts {
                return None;
            }
            &segments[prefix.len()..]
        };
        let method = method.to_ascii_lowercase();
        self.functions.iter().find(|f| {
            (f.methods.is_empty() || f.methods.contains(&method)) && matches(&f.route, rest)
        })
    }

    /// Asserts that `method path` reaches a function; its name.
    pub fn assert_reaches(&self, method: &str, path: &str) -> String {
        match self.reaches(method, path) {
            Some(function) => function.name.clone(),
            None => panic!(
                "{method} {path} reaches no function of the app: {:?}",
                self.functions
            ),
        }
    }
}

/// Whether the route template `route` matches the path's `segments`.
fn matches(route: &str, segments: &[&str]) -> bool {
    let template: Vec<&str> = route.split('/').filter(|s| !s.is_empty()).collect();
    let mut at = 0;
    for (i, part) in template.iter().enumerate() {
        if part.starts_with("{*") && part.ends_with('}') {
            return i == template.len() - 1;
        }
        let Some(segment) = segments.get(at) else {
            return false;
        };
        let parameter = part.starts_with('{') && part.ends_with('}');
        if !parameter && !part.eq_ignore_ascii_case(segment) {
            return false;
        }
        at += 1;
    }
    at == segments.len()
}

#[test]
fn the_matcher_matches_as_the_functions_host_routes() {
    assert!(matches("{*path}", &[]));
    assert!(matches("{*path}", &["api", "writer", "run"]));
    assert!(matches(
        "api/approval/{instanceId}",
        &["API", "approval", "x1"]
    ));
    assert!(!matches("api/approval/{instanceId}", &["api", "approval"]));
    assert!(!matches(
        "api/approval/{instanceId}",
        &["api", "approval", "a", "b"]
    ));
    assert!(matches("a2a/{*rest}", &["a2a"]));
    assert!(!matches("a2a/{*rest}", &["api"]));
    let front = Front {
        prefix: "api".into(),
        functions: vec![HttpFunction {
            name: "f".into(),
            route: "{*path}".into(),
            methods: vec!["post".into()],
        }],
    };
    assert!(front.reaches("POST", "/api/writer/run").is_some());
    assert!(front.reaches("GET", "/api/writer/run").is_none());
    assert!(front.reaches("POST", "/writer/run").is_none());
    assert!(front.reaches("POST", "/runtime/webhooks/x").is_none());
}
