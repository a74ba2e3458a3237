//! Task hubs: independent namespaces of durable work inside one database.
//! Two hubs never see each other's instances, sessions, runs or component
//! versions. On PostgreSQL a hub is a schema (`taskhub_<name>`); on SQLite,
//! where a database is a file, a hub other than `default` is a file beside
//! the one named (`agenthost.db` → `agenthost.<name>.db`).

use std::path::{Path, PathBuf};

/// A validated task hub name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskHub(String);

/// The hub used when none is named.
pub const DEFAULT_HUB: &str = "default";

#[derive(Debug, thiserror::Error)]
#[error("invalid task hub name '{0}': use 1 to 48 letters, digits, '-' or '_'")]
pub struct InvalidHubName(String);

impl TaskHub {
    pub fn new(name: &str) -> Result<Self, InvalidHubName> {
        let valid = (1..=48).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if valid {
            Ok(Self(name.to_string()))
        } else {
            Err(InvalidHubName(name.to_string()))
        }
    }

    /// The PostgreSQL schema holding the hub, quoted (names keep their case).
    pub(super) fn postgres_schema(&self) -> String {
        format!("\"taskhub_{}\"", self.0)
    }

    /// The SQLite file holding the hub, given the file the store URL names.
    pub(super) fn sqlite_file(&self, named: &Path) -> PathBuf {
        if self.0 == DEFAULT_HUB {
            return named.to_path_buf();
        }
        let stem = named
            .file_stem()
            .map_or_else(|| "agenthost".into(), |s| s.to_string_lossy().into_owned());
        let file = match named.extension() {
            Some(ext) => format!("{stem}.{}.{}", self.0, ext.to_string_lossy()),
            None => format!("{stem}.{}", self.0),
        };
        named.with_file_name(file)
    }
}

impl Default for TaskHub {
    fn default() -> Self {
        Self(DEFAULT_HUB.to_string())
    }
}

impl std::fmt::Display for TaskHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_map_to_a_schema_or_a_file() {
        assert!(TaskHub::new("").is_err());
        assert!(TaskHub::new("a\"; DROP").is_err());
        assert!(TaskHub::new(&"x".repeat(49)).is_err());
        let hub = TaskHub::new("Blue-1").unwrap_or_default();
        assert_eq!(hub.postgres_schema(), "\"taskhub_Blue-1\"");
        assert_eq!(
            hub.sqlite_file(Path::new("/d/agenthost.db")),
            Path::new("/d/agenthost.Blue-1.db")
        );
        assert_eq!(
            TaskHub::default().sqlite_file(Path::new("x.db")),
            Path::new("x.db")
        );
    }
}
