//! What a component may reach beyond its own memory, read from the sidecar
//! file `NAME.toml` next to `NAME.wasm`.
//!
//! Nothing is granted by default: no network, no environment, no files. A
//! grant can only narrow the host's own limits, never widen them, so the
//! operator's flags stay the ceiling whatever a component's author asks for.
//! Every grant is checked when the component loads; a bad one fails the load
//! with an error naming the component and the grant.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::destinations::NetworkPolicy;
use super::host::logging::{LogBudget, LINES_PER_SECOND};
use super::{Limits, LoadError};

/// Host settings that are credentials or control the host itself. They are
/// never passed to a guest, whatever its grants say.
const HOST_SECRETS: &[&str] = &[
    "OPENAI_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "REDIS_CONNECTION_STRING",
    "DURABLE_TASK_SCHEDULER_CONNECTION_STRING",
];

/// The most log lines a second a component may be granted.
const MAX_LOG_LINES_PER_SECOND: u32 = 100_000;

/// The largest `cpu_weight`: a component may be given at most this many
/// times another's share of the cores when they contend.
const MAX_CPU_WEIGHT: u32 = 16;

/// The sidecar file as written by the component's deployer.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct GrantsFile {
    /// Hosts the component's activities may call over `wasi:http`:
    /// `api.example.com`, `api.example.com:8443`, or `*.example.com`. A
    /// grant without a port allows 80 and 443 only.
    #[serde(default)]
    allowed_hosts: Vec<String>,
    /// Names of host environment variables passed to the guest.
    #[serde(default)]
    env: Vec<String>,
    /// Memory limit of one instance, in MiB.
    memory_mb: Option<u64>,
    /// CPU time one call may use, e.g. `500ms` or `2s`.
    cpu_time: Option<String>,
    /// Most instances of this component alive at once.
    max_instances: Option<u32>,
    /// Log lines the component may write a second, across its instances.
    log_lines_per_second: Option<u32>,
    /// Its weight when components contend for guest CPU.
    cpu_weight: Option<u32>,
}

/// The checked grants of one component.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Grants {
    pub allowed_hosts: Vec<String>,
    /// Variables passed to the guest, with the values read at load time.
    #[serde(serialize_with = "names_only")]
    pub env: Vec<(String, String)>,
    #[serde(skip)]
    pub limits: Limits,
    pub memory_mb: u64,
    pub cpu_time_ms: u64,
    pub max_instances: Option<u32>,
    /// The host's outbound rules, which every request is also checked against.
    #[serde(skip)]
    pub network: Arc<NetworkPolicy>,
    /// Log lines a second (`log_lines_per_second`).
    pub log_lines_per_second: u32,
    /// What is left of that share now, shared by the component's instances.
    #[serde(skip)]
    pub log_budget: Arc<LogBudget>,
    /// Its weight when components' guest code contends for the cores
    /// (`cpu_weight`, 1 by default; see `cpu_share`).
    pub cpu_weight: u32,
}

/// A grant that allows an outgoing request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    /// The grant names this very address (an IP literal) or `localhost`:
    /// the destination may be inside the host's own network.
    pub names_inside: bool,
}

/// Values of granted variables are the deployer's business, not the API's.
fn names_only<S: serde::Serializer>(env: &[(String, String)], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(env.iter().map(|(name, _)| name))
}

/// The host's own limits, which grants may only lower.
#[derive(Debug, Clone)]
pub struct Ceilings {
    pub limits: Limits,
    pub max_instances: u32,
    pub network: Arc<NetworkPolicy>,
}

impl Grants {
    /// No grants: the host's limits and nothing else.
    pub fn none(ceilings: &Ceilings) -> Self {
        Self::from_file(GrantsFile::default(), ceilings, "", &|_| None)
            .unwrap_or_else(|_| Self::default())
    }

    /// Parses and checks `source` (the sidecar's text) for `component`.
    /// `var` reads the host environment; tests pass their own.
    pub fn parse(
        component: &str,
        source: &str,
        ceilings: &Ceilings,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, LoadError> {
        let file: GrantsFile = toml::from_str(source).map_err(|e| LoadError::Grant {
            component: component.to_string(),
            grant: format!("{component}.toml"),
            reason: e.message().to_string(),
        })?;
        Self::from_file(file, ceilings, component, var)
    }

    fn from_file(
        file: GrantsFile,
        ceilings: &Ceilings,
        component: &str,
        var: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, LoadError> {
        let refuse = |grant: &str, reason: String| LoadError::Grant {
            component: component.to_string(),
            grant: grant.to_string(),
            reason,
        };
        for host in &file.allowed_hosts {
            check_host_pattern(host).map_err(|reason| refuse("allowed_hosts", reason))?;
        }
        let mut env = Vec::new();
        for name in &file.env {
            let upper = name.to_ascii_uppercase();
            if HOST_SECRETS.contains(&upper.as_str()) || upper.starts_with("AGENTHOST_") {
                return Err(refuse(
                    "env",
                    format!("'{name}' is a setting of the host and is never passed to guests"),
                ));
            }
            let value = var(name).ok_or_else(|| {
                refuse(
                    "env",
                    format!("'{name}' is not set in the host's environment"),
                )
            })?;
            env.push((name.clone(), value));
        }
        let ceiling_mb = (ceilings.limits.memory_bytes >> 20) as u64;
        let memory_mb = file.memory_mb.unwrap_or(ceiling_mb);
        if memory_mb == 0 || memory_mb > ceiling_mb {
            return Err(refuse(
                "memory_mb",
                format!(
                    "{memory_mb} MiB is outside 1..={ceiling_mb} (the host's --guest-memory-mb)"
                ),
            ));
        }
        let cpu_time = match &file.cpu_time {
            None => ceilings.limits.cpu_time,
            Some(text) => humantime::parse_duration(text)
                .map_err(|e| refuse("cpu_time", format!("'{text}' is not a duration: {e}")))?,
        };
        if cpu_time.is_zero() || cpu_time > ceilings.limits.cpu_time {
            return Err(refuse(
                "cpu_time",
                format!(
                    "{} is outside (0, {}] (the host's --guest-cpu-time)",
                    humantime::format_duration(cpu_time),
                    humantime::format_duration(ceilings.limits.cpu_time)
                ),
            ));
        }
        if let Some(n) = file.max_instances {
            if n == 0 || n > ceilings.max_instances {
                return Err(refuse(
                    "max_instances",
                    format!(
                        "{n} is outside 1..={} (the host's --max-instances)",
                        ceilings.max_instances
                    ),
                ));
            }
        }
        let log_lines_per_second = file.log_lines_per_second.unwrap_or(LINES_PER_SECOND);
        if !(1..=MAX_LOG_LINES_PER_SECOND).contains(&log_lines_per_second) {
            return Err(refuse(
                "log_lines_per_second",
                format!("{log_lines_per_second} is outside 1..={MAX_LOG_LINES_PER_SECOND}"),
            ));
        }
        let cpu_weight = file.cpu_weight.unwrap_or(1);
        if !(1..=MAX_CPU_WEIGHT).contains(&cpu_weight) {
            return Err(refuse(
                "cpu_weight",
                format!("{cpu_weight} is outside 1..={MAX_CPU_WEIGHT}"),
            ));
        }
        Ok(Self {
            allowed_hosts: file.allowed_hosts,
            env,
            limits: Limits {
                memory_bytes: usize::try_from(memory_mb << 20).unwrap_or(usize::MAX),
                cpu_time,
            },
            memory_mb,
            cpu_time_ms: u64::try_from(cpu_time.as_millis()).unwrap_or(u64::MAX),
            max_instances: file.max_instances,
            network: ceilings.network.clone(),
            log_lines_per_second,
            log_budget: Arc::new(LogBudget::new(log_lines_per_second)),
            cpu_weight,
        })
    }

    /// The grant that allows an outgoing request to `host` on `port`, if
    /// any. A grant without a port allows the web's ports (80, 443) only: a
    /// name granted for its API must not open the database or SSH port of
    /// the machine it names.
    pub fn allows(&self, host: &str, port: u16) -> Option<Allowed> {
        let host = host.to_ascii_lowercase();
        self.allowed_hosts.iter().find_map(|pattern| {
            let pattern = pattern.to_ascii_lowercase();
            let (pattern_host, pattern_port) = split_port(&pattern);
            let port_ok = match pattern_port {
                Some(granted) => granted == port,
                None => port == 80 || port == 443,
            };
            let host_ok = match pattern_host.strip_prefix("*.") {
                Some(domain) => host.ends_with(&format!(".{domain}")),
                None => host == pattern_host,
            };
            (port_ok && host_ok).then(|| Allowed {
                names_inside: names_an_address(pattern_host),
            })
        })
    }
}

/// A grant naming an IP address (`127.0.0.1`, `[::1]`) or `localhost` means
/// that address, inside the host's network or not.
fn names_an_address(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || bare.parse::<std::net::IpAddr>().is_ok()
}

/// `host` or `host:port` with no scheme, path or credentials.
fn check_host_pattern(pattern: &str) -> Result<(), String> {
    let example =
        "write a host such as 'api.example.com', 'api.example.com:8443' or '*.example.com'";
    if pattern.is_empty()
        || pattern.contains("://")
        || pattern.contains('/')
        || pattern.contains('@')
    {
        return Err(format!("'{pattern}' is not a host: {example}"));
    }
    let (host, _) = split_port(pattern);
    let bare = host.strip_prefix("*.").unwrap_or(host);
    if bare.is_empty() || bare.contains('*') {
        return Err(format!("'{pattern}' is not a host: {example}"));
    }
    if let Some((_, port)) = pattern.rsplit_once(':') {
        port.parse::<u16>()
            .map_err(|_| format!("'{pattern}' has an invalid port: {example}"))?;
    }
    Ok(())
}

fn split_port(pattern: &str) -> (&str, Option<u16>) {
    match pattern.rsplit_once(':') {
        Some((host, port)) => match port.parse() {
            Ok(port) => (host, Some(port)),
            Err(_) => (pattern, None),
        },
        None => (pattern, None),
    }
}

impl Default for Ceilings {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            max_instances: 256,
            network: Arc::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn parse(source: &str) -> Result<Grants, LoadError> {
        let var = |name: &str| (name == "UNITS").then(|| "metric".to_string());
        Grants::parse("weather", source, &Ceilings::default(), &var)
    }

    fn refused(source: &str) -> String {
        match parse(source) {
            Ok(g) => panic!("accepted {source:?}: {g:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn nothing_is_granted_by_default() -> Result<(), LoadError> {
        let grants = parse("")?;
        assert!(grants.allowed_hosts.is_empty() && grants.env.is_empty());
        assert_eq!(grants.memory_mb, 128);
        assert!(grants.allows("example.com", 443).is_none());
        Ok(())
    }

    #[test]
    fn grants_narrow_limits_and_open_named_hosts() -> Result<(), LoadError> {
        let grants = parse(
            r#"allowed_hosts = ["api.example.com", "127.0.0.1:8080", "*.svc.local"]
               env = ["UNITS"]
               memory_mb = 32
               cpu_time = "500ms"
               max_instances = 2
               cpu_weight = 4"#,
        )?;
        assert_eq!(grants.cpu_weight, 4);
        assert_eq!(parse("")?.cpu_weight, 1);
        assert_eq!(grants.env, vec![("UNITS".into(), "metric".into())]);
        assert_eq!(grants.limits.memory_bytes, 32 << 20);
        assert_eq!(grants.limits.cpu_time, Duration::from_millis(500));
        let outside = Some(Allowed {
            names_inside: false,
        });
        assert_eq!(grants.allows("API.example.com", 443), outside);
        assert_eq!(
            grants.allows("127.0.0.1", 8080),
            Some(Allowed { names_inside: true })
        );
        assert!(grants.allows("127.0.0.1", 8081).is_none());
        assert_eq!(grants.allows("a.svc.local", 80), outside);
        assert!(grants.allows("svc.local.evil.com", 443).is_none());
        assert!(grants.allows("example.com", 443).is_none());
        Ok(())
    }

    #[test]
    fn a_grant_without_a_port_opens_the_web_ports_only() -> Result<(), LoadError> {
        let grants = parse(r#"allowed_hosts = ["api.example.com", "localhost", "[::1]:9000"]"#)?;
        assert!(grants.allows("api.example.com", 80).is_some());
        assert!(grants.allows("api.example.com", 443).is_some());
        for port in [22, 5432, 6379, 7071] {
            assert!(grants.allows("api.example.com", port).is_none(), "{port}");
            assert!(grants.allows("localhost", port).is_none(), "{port}");
        }
        assert_eq!(
            grants.allows("localhost", 80),
            Some(Allowed { names_inside: true })
        );
        assert_eq!(
            grants.allows("[::1]", 9000),
            Some(Allowed { names_inside: true })
        );
        Ok(())
    }

    #[test]
    fn bad_grants_name_the_component_and_the_grant() {
        let cases = [
            ("memory_mb = 4096", "grant 'memory_mb'"),
            ("cpu_time = \"1h\"", "grant 'cpu_time'"),
            ("cpu_time = \"soon\"", "grant 'cpu_time'"),
            ("max_instances = 0", "grant 'max_instances'"),
            ("cpu_weight = 0", "grant 'cpu_weight'"),
            ("cpu_weight = 17", "grant 'cpu_weight'"),
            ("env = [\"OPENAI_API_KEY\"]", "never passed to guests"),
            (
                "env = [\"NOT_SET_ANYWHERE\"]",
                "not set in the host's environment",
            ),
            (
                "allowed_hosts = [\"https://x.com/path\"]",
                "grant 'allowed_hosts'",
            ),
            ("filesystem = true", "unknown field `filesystem`"),
        ];
        for (source, expected) in cases {
            let error = refused(source);
            assert!(error.contains("component 'weather'"), "{error}");
            assert!(error.contains(expected), "{source}: {error}");
        }
    }
}
