//! Which store and which task hub a process works on: the flags, or the
//! connection string callers of Durable Task Scheduler set
//! (`DURABLE_TASK_SCHEDULER_CONNECTION_STRING=Endpoint=<url>;TaskHub=<name>;Authentication=None`).
//! Flags win over the connection string, which wins over the defaults.

/// The parts of a connection string agenthost uses.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectionString {
    /// A store URL (a worker) or a host's HTTP URL (a remote client).
    pub endpoint: Option<String>,
    pub taskhub: Option<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConnectionStringError {
    #[error("'{0}' is not KEY=VALUE (expected Endpoint=<url>;TaskHub=<name>;Authentication=None)")]
    NotAPair(String),
    #[error("Authentication={0} is not supported: put the store's credentials in the Endpoint URL and use Authentication=None")]
    Authentication(String),
}

impl std::str::FromStr for ConnectionString {
    type Err = ConnectionStringError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut parsed = Self::default();
        for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| ConnectionStringError::NotAPair(part.to_string()))?;
            let value = value.trim().to_string();
            match key.trim().to_ascii_lowercase().as_str() {
                "endpoint" => parsed.endpoint = Some(value),
                "taskhub" => parsed.taskhub = Some(value),
                "authentication" if value.eq_ignore_ascii_case("none") => {}
                "authentication" => return Err(ConnectionStringError::Authentication(value)),
                // Other keys (ClientID, …) mean nothing here.
                _ => {}
            }
        }
        Ok(parsed)
    }
}

/// A store URL fit for logs: a password in it is replaced by `***`.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    match rest.split_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}"),
            None => url.to_string(),
        },
        None => url.to_string(),
    }
}

/// The default store of a host started with nothing set.
pub const DEFAULT_STORE: &str = "sqlite://agenthost.db";

/// `(store URL, task hub name)` from the flags, then the connection string,
/// then the defaults.
pub fn resolve(
    store: Option<&str>,
    taskhub: Option<&str>,
    connection: Option<&ConnectionString>,
) -> (String, String) {
    let from = |pick: fn(&ConnectionString) -> Option<&String>| {
        connection.and_then(pick).map(String::as_str)
    };
    // An http(s) Endpoint names a scheduler (this host's gRPC endpoint, as
    // the Durable Task SDKs' samples set it), never a store.
    let store = store
        .or_else(|| from(|c| c.endpoint.as_ref()).filter(|e| scheduler_port(e).is_none()))
        .unwrap_or(DEFAULT_STORE);
    let hub = taskhub
        .or_else(|| from(|c| c.taskhub.as_ref()))
        .unwrap_or(crate::store::DEFAULT_HUB);
    (store.to_string(), hub.to_string())
}

/// The port of a Durable Task scheduler address (`http(s)://HOST[:PORT]`,
/// as the SDKs' `ENDPOINT` or a connection string's Endpoint): `None` when
/// it is no such address; `Some(None)` when it names no port.
pub fn scheduler_port(endpoint: &str) -> Option<Option<u16>> {
    let lower = endpoint.trim().to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    // `[::1]:8080`: the port follows the bracket.
    let port = match authority.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') && !port.contains(']') => {
            Some(port.parse().ok()?)
        }
        _ => None,
    };
    Some(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_endpoint_names_a_scheduler_and_its_port_never_a_store() {
        assert_eq!(scheduler_port("http://localhost:8080"), Some(Some(8080)));
        assert_eq!(scheduler_port("HTTPS://sched.example/x"), Some(None));
        assert_eq!(scheduler_port("http://[::1]:9000"), Some(Some(9000)));
        assert_eq!(scheduler_port("postgres://u@db:5432/x"), None);
        assert_eq!(scheduler_port("http://host:notaport"), None);
        let connection: ConnectionString =
            "Endpoint=http://localhost:8080;TaskHub=default;Authentication=None"
                .parse()
                .unwrap_or_default();
        assert_eq!(
            resolve(None, None, Some(&connection)),
            (DEFAULT_STORE.to_string(), "default".to_string())
        );
    }

    #[test]
    fn a_password_in_a_store_url_is_never_printed() {
        assert_eq!(
            redacted("postgres://app:s3cret@db:5432/test"),
            "postgres://app:***@db:5432/test"
        );
        assert_eq!(redacted("postgres://app@db/test"), "postgres://app@db/test");
        assert_eq!(redacted("sqlite://a.db"), "sqlite://a.db");
    }

    #[test]
    fn a_scheduler_connection_string_names_the_store_and_the_hub() {
        let parsed: ConnectionString =
            "Endpoint=postgres://u@db:5432/x;TaskHub=blue;Authentication=None"
                .parse()
                .unwrap_or_default();
        assert_eq!(parsed.endpoint.as_deref(), Some("postgres://u@db:5432/x"));
        assert_eq!(parsed.taskhub.as_deref(), Some("blue"));
        assert_eq!(
            resolve(None, None, Some(&parsed)),
            ("postgres://u@db:5432/x".into(), "blue".into())
        );
        assert_eq!(
            resolve(Some("sqlite://a.db"), Some("red"), Some(&parsed)),
            ("sqlite://a.db".into(), "red".into()),
            "flags win"
        );
        assert_eq!(
            resolve(None, None, None),
            (DEFAULT_STORE.into(), "default".into())
        );
    }

    #[test]
    fn unsupported_authentication_and_garbage_are_refused_with_the_reason() {
        assert_eq!(
            "Endpoint=x;Authentication=DefaultAzure".parse::<ConnectionString>(),
            Err(ConnectionStringError::Authentication("DefaultAzure".into()))
        );
        assert!(matches!(
            "Endpoint".parse::<ConnectionString>(),
            Err(ConnectionStringError::NotAPair(_))
        ));
    }
}
