//! Which model endpoint to use, read from the environment variables users of
//! Azure OpenAI and OpenAI already have set.

use std::collections::HashMap;

/// The default Azure OpenAI data-plane API version; `AZURE_OPENAI_API_VERSION` overrides it.
pub const DEFAULT_AZURE_API_VERSION: &str = "2024-10-21";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSettings {
    /// No endpoint configured: the built-in deterministic model answers.
    Offline,
    /// `{base_url}/chat/completions`, `Authorization: Bearer {api_key}`.
    OpenAi {
        base_url: String,
        api_key: Option<String>,
        model: String,
    },
    /// `{endpoint}/openai/deployments/{deployment}/chat/completions?api-version=…`,
    /// header `api-key`.
    Azure {
        endpoint: String,
        deployment: String,
        api_key: Option<String>,
        api_version: String,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SettingsError {
    #[error("AZURE_OPENAI_ENDPOINT is set but neither AZURE_OPENAI_DEPLOYMENT_NAME nor AZURE_OPENAI_CHAT_DEPLOYMENT_NAME is: set the deployment to call")]
    MissingAzureDeployment,
    #[error(
        "OPENAI_BASE_URL is set but OPENAI_MODEL is not: set the model to call (e.g. gpt-4o-mini)"
    )]
    MissingOpenAiModel,
}

impl ModelSettings {
    /// Reads the settings from the process environment.
    pub fn from_env() -> Result<Self, SettingsError> {
        Self::from_vars(&std::env::vars().collect())
    }

    /// Azure wins when both are configured, as it is the more specific setup.
    pub fn from_vars(vars: &HashMap<String, String>) -> Result<Self, SettingsError> {
        let get = |k: &str| {
            vars.get(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if let Some(endpoint) = get("AZURE_OPENAI_ENDPOINT") {
            let deployment = get("AZURE_OPENAI_DEPLOYMENT_NAME")
                .or_else(|| get("AZURE_OPENAI_CHAT_DEPLOYMENT_NAME"))
                .ok_or(SettingsError::MissingAzureDeployment)?;
            return Ok(Self::Azure {
                endpoint: endpoint.trim_end_matches('/').to_string(),
                deployment,
                api_key: get("AZURE_OPENAI_API_KEY"),
                api_version: get("AZURE_OPENAI_API_VERSION")
                    .unwrap_or_else(|| DEFAULT_AZURE_API_VERSION.to_string()),
            });
        }
        let api_key = get("OPENAI_API_KEY");
        let base_url = get("OPENAI_BASE_URL");
        if base_url.is_none() && api_key.is_none() {
            return Ok(Self::Offline);
        }
        Ok(Self::OpenAi {
            base_url: base_url
                .unwrap_or_else(|| "https://api.openai.com/v1".to_string())
                .trim_end_matches('/')
                .to_string(),
            api_key,
            model: get("OPENAI_MODEL").ok_or(SettingsError::MissingOpenAiModel)?,
        })
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

    #[test]
    fn nothing_set_means_offline() {
        assert_eq!(
            ModelSettings::from_vars(&vars(&[])),
            Ok(ModelSettings::Offline)
        );
    }

    #[test]
    fn azure_accepts_the_chat_deployment_name_alias() {
        let s = ModelSettings::from_vars(&vars(&[
            ("AZURE_OPENAI_ENDPOINT", "https://x.openai.azure.com/"),
            ("AZURE_OPENAI_CHAT_DEPLOYMENT_NAME", "gpt"),
        ]))
        .unwrap();
        assert_eq!(
            s,
            ModelSettings::Azure {
                endpoint: "https://x.openai.azure.com".into(),
                deployment: "gpt".into(),
                api_key: None,
                api_version: DEFAULT_AZURE_API_VERSION.into(),
            }
        );
    }

    #[test]
    fn azure_without_deployment_is_an_error() {
        let err = ModelSettings::from_vars(&vars(&[("AZURE_OPENAI_ENDPOINT", "https://x")]));
        assert_eq!(err, Err(SettingsError::MissingAzureDeployment));
    }

    #[test]
    fn openai_needs_a_model() {
        let err = ModelSettings::from_vars(&vars(&[("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")]));
        assert_eq!(err, Err(SettingsError::MissingOpenAiModel));
    }
}
