//! Why a host did not start: one variant per step of the start, each saying
//! what to change. The causes are kept as sources, so `{:#}` (anyhow) or a
//! walk of `source()` prints the whole chain.

type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A host could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A setting (or its environment variable) is malformed.
    #[error("invalid setting")]
    Setting(#[source] Cause),
    #[error("invalid endpoint keys")]
    Keys(#[source] Cause),
    #[error(
        "--require-keys is set but no endpoint key is configured: give --api-key \
         SCOPE:KEY (SCOPE invoke or admin), AGENTHOST_API_KEYS or --api-key-file"
    )]
    KeysRequired,
    #[error("invalid model configuration")]
    Model(#[source] Cause),
    #[error("the model's credential cannot obtain a token")]
    Credential(#[source] Cause),
    #[error(
        "the task hub's store cannot be reached. Start the database, or point --store \
         (AGENTHOST_STORE) or the connection string's Endpoint at a reachable one; a SQLite \
         path must be in a writable directory"
    )]
    StoreUnreachable(#[source] Cause),
    #[error("could not open task hub '{hub}'")]
    Store {
        hub: String,
        #[source]
        source: Cause,
    },
    #[error(
        "--no-worker needs a task hub that `agenthost worker` processes share: \
         use a PostgreSQL store (--store postgres://…), or drop --no-worker"
    )]
    FrontNeedsSharedHub,
    #[error("could not start the wasm runtime")]
    Runtime(#[source] Cause),
    #[error("could not read the components directory {dir}")]
    Components {
        dir: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "could not watch the components directory {dir} (start with --watch=false to load it once)"
    )]
    Watch {
        dir: std::path::PathBuf,
        #[source]
        source: Cause,
    },
    #[error("invalid agent settings")]
    AgentSettings(#[source] Cause),
    #[error("could not open the response streams")]
    Streams(#[source] Cause),
}

impl StartError {
    pub(crate) fn setting(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Self::Setting(Box::new(e))
    }
}
