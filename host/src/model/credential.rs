//! How the host authenticates to the model service: an API key, or a
//! Microsoft Entra ID bearer token from a managed identity (Azure IMDS, or
//! App Service's `IDENTITY_ENDPOINT` + `IDENTITY_HEADER`), a workload
//! identity (`AZURE_FEDERATED_TOKEN_FILE` + `AZURE_CLIENT_ID` +
//! `AZURE_TENANT_ID`), the Azure CLI, or a default chain of those, chosen by
//! `AGENTHOST_MODEL_CREDENTIAL=key|managed-identity|workload-identity|cli|default`.
//!
//! Tokens are cached and fetched again five minutes before they expire.
//! Keys and tokens never reach guests, logs or error bodies: errors name
//! the credential and what failed, never a secret.

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderName, HeaderValue, AUTHORIZATION};
use serde::Deserialize;
use tokio::sync::Mutex;

use super::ModelError;

/// The resource (and scope) of Azure OpenAI / Azure AI Foundry tokens.
const RESOURCE: &str = "https://cognitiveservices.azure.com";
/// A token is fetched again this long before it expires.
const REFRESH_BEFORE: Duration = Duration::from_secs(300);
const IMDS: &str = "http://169.254.169.254/metadata/identity/oauth2/token";
const AUTHORITY: &str = "https://login.microsoftonline.com";
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Where tokens come from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    ManagedIdentity,
    WorkloadIdentity,
    Cli,
}

impl Source {
    fn name(&self) -> &'static str {
        match self {
            Source::ManagedIdentity => "managed-identity",
            Source::WorkloadIdentity => "workload-identity",
            Source::Cli => "cli",
        }
    }
}

/// What authenticates model calls.
pub struct Credential {
    kind: Kind,
    vars: HashMap<String, String>,
    http: reqwest::Client,
    cached: Mutex<Option<Token>>,
}

enum Kind {
    /// No credential: the endpoint needs none (a local server).
    None,
    /// A key in this header.
    Key(HeaderName, HeaderValue),
    /// Entra ID tokens from the first source that gives one.
    Tokens(Vec<Source>),
}

#[derive(Clone)]
struct Token {
    value: HeaderValue,
    expires_at: SystemTime,
    from: &'static str,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CredentialError {
    #[error("AGENTHOST_MODEL_CREDENTIAL={0} is not one of key, managed-identity, workload-identity, cli, default")]
    Unknown(String),
    #[error(
        "AGENTHOST_MODEL_CREDENTIAL=key needs an API key (AZURE_OPENAI_API_KEY or OPENAI_API_KEY)"
    )]
    MissingKey,
    #[error("the API key contains characters that cannot be sent in a header")]
    BadKey,
}

impl Credential {
    /// The credential the variables ask for; `key` is the endpoint's API
    /// key setting and `key_header` the header it goes in.
    pub fn from_vars(
        vars: &HashMap<String, String>,
        key: Option<&str>,
        key_header: HeaderName,
        bearer_key: bool,
    ) -> Result<Self, CredentialError> {
        let get = |k: &str| vars.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let key_kind = || -> Result<Kind, CredentialError> {
            let key = key.ok_or(CredentialError::MissingKey)?;
            let text = if bearer_key {
                format!("Bearer {key}")
            } else {
                key.to_string()
            };
            let mut value = HeaderValue::from_str(&text).map_err(|_| CredentialError::BadKey)?;
            value.set_sensitive(true);
            Ok(Kind::Key(key_header.clone(), value))
        };
        let kind = match get("AGENTHOST_MODEL_CREDENTIAL").map(str::to_ascii_lowercase) {
            None if key.is_some() => key_kind()?,
            None => Kind::None,
            Some(name) => match name.as_str() {
                "key" => key_kind()?,
                "managed-identity" => Kind::Tokens(vec![Source::ManagedIdentity]),
                "workload-identity" => Kind::Tokens(vec![Source::WorkloadIdentity]),
                "cli" => Kind::Tokens(vec![Source::Cli]),
                // The documented order: a key if one is set, then what the
                // environment says this process is (a workload identity, a
                // managed identity), then a developer's CLI login.
                "default" if key.is_some() => key_kind()?,
                "default" => Kind::Tokens(vec![
                    Source::WorkloadIdentity,
                    Source::ManagedIdentity,
                    Source::Cli,
                ]),
                other => return Err(CredentialError::Unknown(other.to_string())),
            },
        };
        let http = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|_| CredentialError::BadKey)?;
        Ok(Self {
            kind,
            vars: vars.clone(),
            http,
            cached: Mutex::new(None),
        })
    }

    /// A one-line description for logs; never a secret.
    pub fn describe(&self) -> String {
        match &self.kind {
            Kind::None => "no credential".into(),
            Kind::Key(name, _) => format!("an API key ({name} header)"),
            Kind::Tokens(sources) => format!(
                "Microsoft Entra ID tokens ({})",
                sources
                    .iter()
                    .map(Source::name)
                    .collect::<Vec<_>>()
                    .join(", then ")
            ),
        }
    }

    /// Whether the credential fetches tokens (and so can be checked at start).
    pub fn uses_tokens(&self) -> bool {
        matches!(self.kind, Kind::Tokens(_))
    }

    /// The header to send, if any; a cached token while it is fresh.
    pub async fn header(&self) -> Result<Option<(HeaderName, HeaderValue)>, ModelError> {
        let sources = match &self.kind {
            Kind::None => return Ok(None),
            Kind::Key(name, value) => return Ok(Some((name.clone(), value.clone()))),
            Kind::Tokens(sources) => sources,
        };
        let mut cached = self.cached.lock().await;
        if let Some(token) = cached.as_ref() {
            if token.expires_at > SystemTime::now() + REFRESH_BEFORE {
                return Ok(Some((AUTHORIZATION, token.value.clone())));
            }
        }
        let mut failures = Vec::new();
        for source in sources {
            match self.fetch(source).await {
                Ok((token, expires_at)) => {
                    let mut value =
                        HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                            auth_failed(source.name(), "the token is not a valid header")
                        })?;
                    value.set_sensitive(true);
                    if cached.as_ref().is_none_or(|t| t.from != source.name()) {
                        tracing::info!(
                            credential = source.name(),
                            "model credential obtained a token"
                        );
                    }
                    *cached = Some(Token {
                        value: value.clone(),
                        expires_at,
                        from: source.name(),
                    });
                    return Ok(Some((AUTHORIZATION, value)));
                }
                Err(why) => failures.push(format!("{}: {why}", source.name())),
            }
        }
        Err(ModelError::Authentication {
            tried: sources
                .iter()
                .map(Source::name)
                .collect::<Vec<_>>()
                .join(", "),
            reason: failures.join("; "),
        })
    }

    fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }

    /// A token and when it expires, or why not (never the secret itself).
    async fn fetch(&self, source: &Source) -> Result<(String, SystemTime), String> {
        match source {
            Source::ManagedIdentity => self.managed_identity().await,
            Source::WorkloadIdentity => self.workload_identity().await,
            Source::Cli => cli().await,
        }
    }

    async fn managed_identity(&self) -> Result<(String, SystemTime), String> {
        let client_id = self.var("AZURE_CLIENT_ID");
        let request = match (self.var("IDENTITY_ENDPOINT"), self.var("IDENTITY_HEADER")) {
            // App Service and Functions.
            (Some(endpoint), Some(header)) => {
                let mut query = vec![("resource", RESOURCE), ("api-version", "2019-08-01")];
                if let Some(id) = client_id {
                    query.push(("client_id", id));
                }
                self.http
                    .get(endpoint)
                    .query(&query)
                    .header("X-IDENTITY-HEADER", header)
            }
            // Virtual machines, AKS nodes: the instance metadata service
            // (its address overridable for proxies and tests).
            _ => {
                let endpoint = self.var("AGENTHOST_IMDS_ENDPOINT").unwrap_or(IMDS);
                let mut query = vec![("resource", RESOURCE), ("api-version", "2018-02-01")];
                if let Some(id) = client_id {
                    query.push(("client_id", id));
                }
                self.http
                    .get(endpoint)
                    .query(&query)
                    .header("Metadata", "true")
            }
        };
        token_from(request).await
    }

    async fn workload_identity(&self) -> Result<(String, SystemTime), String> {
        let (Some(file), Some(client), Some(tenant)) = (
            self.var("AZURE_FEDERATED_TOKEN_FILE"),
            self.var("AZURE_CLIENT_ID"),
            self.var("AZURE_TENANT_ID"),
        ) else {
            return Err(
                "AZURE_FEDERATED_TOKEN_FILE, AZURE_CLIENT_ID and AZURE_TENANT_ID are not all set"
                    .into(),
            );
        };
        let assertion = tokio::fs::read_to_string(file)
            .await
            .map_err(|e| format!("cannot read the federated token file {file}: {e}"))?;
        let authority = self
            .var("AZURE_AUTHORITY_HOST")
            .unwrap_or(AUTHORITY)
            .trim_end_matches('/');
        let scope = format!("{RESOURCE}/.default");
        let form = [
            ("client_id", client),
            ("scope", scope.as_str()),
            ("grant_type", "client_credentials"),
            (
                "client_assertion_type",
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
            ),
            ("client_assertion", assertion.trim()),
        ];
        let request = self
            .http
            .post(format!("{authority}/{tenant}/oauth2/v2.0/token"))
            .form(&form);
        token_from(request).await
    }
}

/// What token endpoints answer (IMDS and App Service send numbers as strings).
#[derive(Deserialize)]
struct TokenAnswer {
    access_token: String,
    #[serde(default)]
    expires_in: Option<serde_json::Value>,
    #[serde(default)]
    expires_on: Option<serde_json::Value>,
}

fn number(value: &Option<serde_json::Value>) -> Option<u64> {
    match value.as_ref()? {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

async fn token_from(request: reqwest::RequestBuilder) -> Result<(String, SystemTime), String> {
    let response = request
        .send()
        .await
        .map_err(|e| format!("the token endpoint is unreachable: {e}"))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!(
            "the token endpoint answered HTTP {}",
            status.as_u16()
        ));
    }
    let answer: TokenAnswer = response
        .json()
        .await
        .map_err(|e| format!("the token endpoint's answer is not a token: {e}"))?;
    let now = SystemTime::now();
    let expires_at = match (number(&answer.expires_on), number(&answer.expires_in)) {
        (Some(on), _) => UNIX_EPOCH + Duration::from_secs(on),
        (None, Some(seconds)) => now + Duration::from_secs(seconds),
        (None, None) => now + Duration::from_secs(3600),
    };
    Ok((answer.access_token, expires_at))
}

/// `az account get-access-token`: the developer's own login.
async fn cli() -> Result<(String, SystemTime), String> {
    #[derive(Deserialize)]
    struct CliToken {
        #[serde(rename = "accessToken")]
        access_token: String,
        #[serde(default)]
        expires_on: Option<serde_json::Value>,
    }
    let run = tokio::process::Command::new("az")
        .args([
            "account",
            "get-access-token",
            "--resource",
            RESOURCE,
            "--output",
            "json",
        ])
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(FETCH_TIMEOUT, run)
        .await
        .map_err(|_| "az did not answer within 30 s".to_string())?
        .map_err(|e| format!("cannot run az (is the Azure CLI installed and on PATH?): {e}"))?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        let said: String = said.trim().chars().take(200).collect();
        return Err(format!("az failed (run `az login`): {said}"));
    }
    let token: CliToken =
        serde_json::from_slice(&output.stdout).map_err(|e| format!("az printed no token: {e}"))?;
    let expires_at = number(&token.expires_on)
        .map(|on| UNIX_EPOCH + Duration::from_secs(on))
        .unwrap_or_else(|| SystemTime::now() + Duration::from_secs(3600));
    Ok((token.access_token, expires_at))
}

fn auth_failed(tried: &str, reason: &str) -> ModelError {
    ModelError::Authentication {
        tried: tried.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn describe(pairs: &[(&str, &str)], key: Option<&str>) -> Result<String, CredentialError> {
        Credential::from_vars(&vars(pairs), key, AUTHORIZATION, true).map(|c| c.describe())
    }

    #[test]
    fn the_credential_is_chosen_by_its_variable_and_the_default_chain_has_an_order() {
        assert_eq!(describe(&[], None), Ok("no credential".into()));
        assert_eq!(
            describe(&[], Some("k")),
            Ok("an API key (authorization header)".into())
        );
        assert_eq!(
            describe(&[("AGENTHOST_MODEL_CREDENTIAL", "default")], None),
            Ok(
                "Microsoft Entra ID tokens (workload-identity, then managed-identity, then cli)"
                    .into()
            )
        );
        assert_eq!(
            describe(&[("AGENTHOST_MODEL_CREDENTIAL", "default")], Some("k")),
            Ok("an API key (authorization header)".into())
        );
        assert_eq!(
            describe(
                &[("AGENTHOST_MODEL_CREDENTIAL", "Managed-Identity")],
                Some("k")
            ),
            Ok("Microsoft Entra ID tokens (managed-identity)".into())
        );
        assert_eq!(
            describe(&[("AGENTHOST_MODEL_CREDENTIAL", "key")], None),
            Err(CredentialError::MissingKey)
        );
        assert!(matches!(
            describe(&[("AGENTHOST_MODEL_CREDENTIAL", "password")], None),
            Err(CredentialError::Unknown(_))
        ));
    }

    #[test]
    fn token_answers_give_the_expiry_as_numbers_or_strings() {
        assert_eq!(number(&Some(serde_json::json!(3599))), Some(3599));
        assert_eq!(number(&Some(serde_json::json!("3599"))), Some(3599));
        assert_eq!(number(&Some(serde_json::json!("soon"))), None);
    }
}
