//! The run request's session contract, as callers of Microsoft Agent
//! Framework hosting send it (see `../shared/compat.md`): the session as
//! `sessionId` (canonical), `threadId`, `session_id` or `thread_id`, in the
//! JSON body or the query string, all of which must agree; the wait flag as
//! `waitForResponse` (canonical), `wait_for_response` or `waitForCompletion`,
//! from the `x-ms-wait-for-response` header, the query string or the body,
//! in that order of precedence, each source refusing aliases that disagree.
//! The old names still work and are reported, so that the answer can carry
//! the deprecation headers.

use serde::Deserialize;
use serde_json::Value;

use super::ApiError;

/// One source of names: the query string or the JSON body.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Names {
    #[serde(rename = "sessionId")]
    session_id_camel: Option<String>,
    #[serde(rename = "threadId")]
    thread_id_camel: Option<String>,
    session_id: Option<String>,
    thread_id: Option<String>,
    #[serde(rename = "waitForResponse")]
    wait_camel: Option<Flag>,
    wait_for_response: Option<Flag>,
    #[serde(rename = "waitForCompletion")]
    wait_for_completion: Option<Flag>,
}

/// A flag as JSON sends it (`false`) or as a query string does (`"false"`).
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum Flag {
    Bool(bool),
    Text(String),
}

impl Flag {
    fn value(&self, name: &str, source: &str) -> Result<bool, ApiError> {
        match self {
            Flag::Bool(b) => Ok(*b),
            Flag::Text(t) => match t.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => Ok(true),
                "false" | "0" | "no" => Ok(false),
                _ => Err(ApiError::bad_request(
                    "invalid_wait_flag",
                    format!("{name} ({source}) must be true or false, not '{t}'"),
                )),
            },
        }
    }
}

/// The names that still work but are deprecated.
const LEGACY: [&str; 4] = ["threadId", "session_id", "thread_id", "wait_for_response"];

/// The session and wait flag a request asked for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Contract {
    pub session_id: Option<String>,
    pub wait: Option<bool>,
    /// Deprecated names the request used, for the migration headers.
    pub legacy: Vec<&'static str>,
}

impl Names {
    fn sessions(&self, source: &'static str) -> Vec<(&'static str, &'static str, &str)> {
        [
            ("sessionId", &self.session_id_camel),
            ("threadId", &self.thread_id_camel),
            ("session_id", &self.session_id),
            ("thread_id", &self.thread_id),
        ]
        .into_iter()
        .filter_map(|(name, value)| value.as_deref().map(|v| (name, source, v)))
        .collect()
    }

    /// The wait flag of this source; aliases that disagree are refused.
    fn wait(&self, source: &'static str) -> Result<Option<bool>, ApiError> {
        let mut found: Option<(&str, bool)> = None;
        for (name, flag) in [
            ("waitForResponse", &self.wait_camel),
            ("wait_for_response", &self.wait_for_response),
            ("waitForCompletion", &self.wait_for_completion),
        ] {
            let Some(flag) = flag else { continue };
            let value = flag.value(name, source)?;
            match found {
                Some((first, earlier)) if earlier != value => {
                    return Err(ApiError::bad_request(
                        "conflicting_wait_flag",
                        format!(
                            "{first} and {name} in the {source} disagree ({earlier} and {value})"
                        ),
                    ))
                }
                Some(_) => {}
                None => found = Some((name, value)),
            }
        }
        Ok(found.map(|(_, value)| value))
    }

    fn used(&self) -> Vec<&'static str> {
        let present = [
            self.thread_id_camel.is_some(),
            self.session_id.is_some(),
            self.thread_id.is_some(),
            self.wait_for_response.is_some(),
        ];
        LEGACY
            .iter()
            .zip(present)
            .filter_map(|(name, present)| present.then_some(*name))
            .collect()
    }
}

/// Resolves the contract from the header, the query string and the body.
pub fn resolve(
    header_wait: Option<&str>,
    query: &Names,
    body: &Names,
) -> Result<Contract, ApiError> {
    let mut sessions = query.sessions("query string");
    sessions.extend(body.sessions("body"));
    let session_id = match sessions.split_first() {
        None => None,
        Some(((name, source, value), rest)) => {
            if let Some((other, other_source, other_value)) =
                rest.iter().find(|(_, _, v)| v != value)
            {
                return Err(ApiError::bad_request(
                    "conflicting_session_id",
                    format!(
                        "{name} ({source}) is '{value}' but {other} ({other_source}) is '{other_value}': send one session id"
                    ),
                ));
            }
            Some(value.to_string())
        }
    };
    let header = header_wait
        .map(|h| Flag::Text(h.to_string()).value("x-ms-wait-for-response", "header"))
        .transpose()?;
    let wait = match header {
        Some(value) => Some(value),
        None => match query.wait("query string")? {
            Some(value) => Some(value),
            None => body.wait("body")?,
        },
    };
    let mut legacy = query.used();
    legacy.extend(body.used());
    legacy.sort_unstable();
    legacy.dedup();
    Ok(Contract {
        session_id,
        wait,
        legacy,
    })
}

/// The JSON body of a run request.
#[derive(Debug, Default, Deserialize, utoipa::ToSchema)]
pub struct JsonBody {
    /// What the user says.
    pub message: Option<String>,
    /// A JSON Schema the answer must match (structured output).
    #[serde(alias = "responseFormat")]
    #[schema(value_type = Option<Object>)]
    pub response_format: Option<Value>,
    #[serde(flatten)]
    pub names: Names,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(value: Value) -> Names {
        serde_json::from_value::<JsonBody>(value)
            .unwrap_or_default()
            .names
    }

    fn query(text: &str) -> Names {
        serde_urlencoded::from_str(text).unwrap_or_default()
    }

    fn code(result: Result<Contract, ApiError>) -> String {
        match result {
            Ok(c) => format!("ok {c:?}"),
            Err(e) => e.code().to_string(),
        }
    }

    #[test]
    fn every_session_name_from_either_source_is_the_session() {
        for name in ["sessionId", "threadId", "session_id", "thread_id"] {
            let from_body = resolve(None, &Names::default(), &body(json!({ name: "s1" })));
            let from_query = resolve(None, &query(&format!("{name}=s1")), &Names::default());
            for contract in [from_body, from_query] {
                let contract = contract.unwrap_or_default();
                assert_eq!(contract.session_id.as_deref(), Some("s1"), "{name}");
                let deprecated = name != "sessionId";
                assert_eq!(!contract.legacy.is_empty(), deprecated, "{name}");
            }
        }
    }

    #[test]
    fn agreeing_names_are_one_session_and_disagreeing_ones_are_refused() {
        let both = body(json!({"sessionId": "a", "thread_id": "a"}));
        let agreed = resolve(None, &query("session_id=a"), &both).unwrap_or_default();
        assert_eq!(agreed.session_id.as_deref(), Some("a"));
        assert_eq!(agreed.legacy, ["session_id", "thread_id"]);
        let conflicts = [
            (query(""), body(json!({"sessionId": "a", "threadId": "b"}))),
            (query("sessionId=a"), body(json!({"sessionId": "b"}))),
            (query("thread_id=a&session_id=b"), Names::default()),
        ];
        for (q, b) in conflicts {
            assert_eq!(code(resolve(None, &q, &b)), "conflicting_session_id");
        }
    }

    #[test]
    fn the_wait_flag_follows_header_then_query_then_body() {
        let b = body(json!({"waitForResponse": true}));
        let q = query("waitForResponse=false");
        assert_eq!(
            resolve(Some("true"), &q, &b).map(|c| c.wait).ok(),
            Some(Some(true))
        );
        assert_eq!(
            resolve(None, &q, &b).map(|c| c.wait).ok(),
            Some(Some(false))
        );
        assert_eq!(
            resolve(None, &Names::default(), &b).map(|c| c.wait).ok(),
            Some(Some(true))
        );
        assert_eq!(
            resolve(None, &Names::default(), &Names::default())
                .map(|c| c.wait)
                .ok(),
            Some(None)
        );
        let legacy = resolve(
            None,
            &Names::default(),
            &body(json!({"wait_for_response": false})),
        )
        .unwrap_or_default();
        assert_eq!(
            (legacy.wait, legacy.legacy),
            (Some(false), vec!["wait_for_response"])
        );
        let samples = body(json!({"waitForCompletion": true}));
        let contract = resolve(None, &Names::default(), &samples).unwrap_or_default();
        assert_eq!((contract.wait, contract.legacy.len()), (Some(true), 0));
    }

    #[test]
    fn wait_aliases_disagreeing_within_one_source_are_refused_across_sources_not() {
        let within = body(json!({"waitForResponse": true, "wait_for_response": false}));
        assert_eq!(
            code(resolve(None, &Names::default(), &within)),
            "conflicting_wait_flag"
        );
        let within_query = query("waitForResponse=true&wait_for_response=false");
        assert_eq!(
            code(resolve(None, &within_query, &Names::default())),
            "conflicting_wait_flag"
        );
        let agree = body(json!({"waitForResponse": false, "wait_for_response": false}));
        assert_eq!(
            resolve(None, &Names::default(), &agree)
                .map(|c| c.wait)
                .ok(),
            Some(Some(false))
        );
        let across = resolve(
            None,
            &query("wait_for_response=true"),
            &body(json!({"waitForResponse": false})),
        );
        assert_eq!(
            across.map(|c| c.wait).ok(),
            Some(Some(true)),
            "the query wins"
        );
        assert_eq!(
            code(resolve(Some("maybe"), &Names::default(), &Names::default())),
            "invalid_wait_flag"
        );
    }
}
