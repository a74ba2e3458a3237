//! Command-line interface. Every flag has an `AGENTHOST_*` environment twin.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::settings::{Secret, ServeArgs};
use crate::taskhub::ConnectionString;

mod build;
mod check_replay;
mod client;
mod compile;
mod dev;
mod functions;
mod scaffold;

#[derive(Debug, Parser)]
#[command(
    name = "agenthost",
    version,
    about = "Hosts AI agents as sandboxed WebAssembly components"
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// How log lines are written on stderr: `text`, or `json` (one object a
    /// line, for log shippers). Which lines: AGENTHOST_LOG, a filter such
    /// as `info,agenthost::durable=debug,sqlx=warn`.
    #[arg(
        long,
        global = true,
        env = "AGENTHOST_LOG_FORMAT",
        default_value = "text"
    )]
    pub log_format: crate::telemetry::LogFormat,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Serve the agents of a components directory over HTTP (and run the
    /// work, unless --no-worker).
    Serve(Box<ServeArgs>),
    /// Run agents, activities, orchestrations and timers of a task hub, with
    /// no HTTP: the console host beside `serve --no-worker` fronts. The HTTP
    /// settings of `serve` are accepted and ignored.
    Worker(Box<ServeArgs>),
    /// Talk to a running host: run agents, start and follow orchestrations.
    Client(ClientArgs),
    /// Load one component (validate, compile, describe) and print what it
    /// offers as JSON; exits non-zero with the reason when it does not load.
    Inspect {
        /// The `.wasm` component file.
        file: PathBuf,
    },
    /// Make a ready project for a component: an agent with a tool, or an
    /// orchestration with an approval wait (Rust, Python or JavaScript, the
    /// language's guest SDK vendored).
    New {
        #[command(subcommand)]
        what: NewCommand,
    },
    /// Build the component project in DIR (default: here): Rust with cargo
    /// for wasm32-wasip2, Python with componentize-py, JavaScript with
    /// rolldown and componentize-js; check that it loads, and say where it
    /// went.
    Build {
        /// The project folder (its Cargo.toml, app.py or app.js).
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// A components directory to put NAME.wasm into, its compiled code
        /// beside it in .compiled/ (a serving host loads it at once, without
        /// compiling).
        #[arg(long)]
        into: Option<PathBuf>,
    },
    /// Compile every component of a components folder ahead of time, into
    /// DIR/.compiled/: a host serving DIR on an empty cache (an image's
    /// first start) then loads them without compiling. Run it where the
    /// host will run (same binary and CPU kind): code made elsewhere is
    /// checked at load and compiled anew when it does not fit.
    Compile {
        /// The components folder.
        dir: PathBuf,
    },
    /// Build the component project in DIR, serve it on a local port (the
    /// offline model unless one is configured), and build it again on each
    /// save: the host loads every good build at once.
    Dev {
        /// The project folder (its Cargo.toml, app.py or app.js).
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// The port to serve on (0: any free one, printed).
        #[arg(long, default_value_t = 7071)]
        port: u16,
    },
    /// A component's tools, run without a host.
    Tool {
        #[command(subcommand)]
        command: ToolCommand,
    },
    /// Azure Functions: `init DIR` writes a function app folder that runs
    /// this binary as a custom handler (docs/deploy.md).
    Functions {
        #[command(subcommand)]
        command: FunctionsCommand,
    },
    /// What a host of the task hub would have to do now (or within
    /// `--within`), read from the store by a process that serves nothing:
    /// for a platform that scaled to zero and must know when to start a
    /// host. Prints JSON; `--sql` prints the query a scaler runs itself.
    Due(DueArgs),
    /// Replay a new version of an orchestration component against the
    /// journals of the unfinished instances of its older versions in a
    /// store (read-only: nothing runs, nothing is written), as a host does
    /// when it loads that version. Prints the report as JSON; exits 1 when
    /// any instance diverges or could not be checked: a CI step before a
    /// deploy.
    CheckReplay(check_replay::CheckReplayArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum FunctionsCommand {
    /// Write the function app folder DIR.
    Init(functions::InitArgs),
}

#[derive(Debug, Clone, Args)]
pub(crate) struct DueArgs {
    /// The store (as `serve --store`).
    #[arg(long, env = "AGENTHOST_STORE", default_value = "sqlite://agenthost.db")]
    pub store: String,
    /// The task hub.
    #[arg(long, env = "TASKHUB_NAME", default_value = "default")]
    pub taskhub: String,
    /// Count what falls due within this lead time too (a host takes a
    /// moment to start).
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub within: std::time::Duration,
    /// Print the SQL that answers the same number (PostgreSQL: for KEDA's
    /// `postgresql` scaler) instead of running it.
    #[arg(long)]
    pub sql: bool,
}

#[derive(Debug, Subcommand)]
pub(crate) enum NewCommand {
    /// An agent with one tool.
    Agent(NewArgs),
    /// An orchestration: two agent steps, then an approval racing a timer.
    Orchestration(NewArgs),
}

#[derive(Debug, Clone, Args)]
pub(crate) struct NewArgs {
    /// The component's name (also its crate's and file's).
    pub name: String,
    /// The folder to write (default: ./NAME).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The project's language.
    #[arg(long, value_enum, default_value = "rust")]
    pub lang: scaffold::Lang,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ToolCommand {
    /// Runs one tool (or activity) of a component file, with the grants of
    /// its `NAME.toml` beside it, and prints what it returned; exits
    /// non-zero with the reason when it fails.
    Call {
        /// The `.wasm` component file.
        file: PathBuf,
        /// The tool's name.
        tool: String,
        /// Its arguments, a JSON object.
        #[arg(default_value = "{}")]
        arguments: String,
    },
}

#[derive(Debug, Clone, Args)]
pub(crate) struct ClientArgs {
    /// The host's URL. Default: the connection string's Endpoint when it is
    /// an http(s) URL, else http://127.0.0.1:7071.
    #[arg(long, env = "AGENTHOST_ENDPOINT")]
    pub endpoint: Option<String>,

    /// `Endpoint=<host URL>;TaskHub=<name>;Authentication=None`.
    #[arg(long, env = "DURABLE_TASK_SCHEDULER_CONNECTION_STRING")]
    pub connection_string: Option<ConnectionString>,

    /// The host's endpoint key (the key alone, no scope), when it requires one.
    #[arg(long, env = "AGENTHOST_API_KEY", hide_env_values = true)]
    pub api_key: Option<Secret>,

    #[command(subcommand)]
    pub command: ClientCommand,
}

impl ClientArgs {
    pub(crate) fn endpoint(&self) -> String {
        self.endpoint
            .clone()
            .or_else(|| {
                self.connection_string
                    .as_ref()
                    .and_then(|c| c.endpoint.clone())
                    .filter(|e| e.starts_with("http://") || e.starts_with("https://"))
            })
            .unwrap_or_else(|| "http://127.0.0.1:7071".into())
    }
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum ClientCommand {
    /// Agents.
    #[command(subcommand)]
    Agent(AgentCommand),
    /// Durable orchestrations.
    #[command(subcommand)]
    Orchestration(OrchestrationCommand),
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum AgentCommand {
    /// Run agent NAME on MESSAGE and print its answer (the session id goes
    /// to stderr); the same --session continues one conversation.
    Run {
        name: String,
        message: String,
        #[arg(long)]
        session: Option<String>,
    },
    /// Ask run ID of agent NAME to stop; prints the run as JSON.
    Cancel { name: String, id: String },
    /// List agent NAME's runs, newest first, as JSON (`next` pages on).
    Runs {
        name: String,
        #[arg(long)]
        session: Option<String>,
        /// pending, awaiting_approval, completed, failed or canceled.
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        limit: Option<usize>,
        /// The `next` of the previous page.
        #[arg(long)]
        after: Option<String>,
    },
}

#[derive(Debug, Clone, Subcommand)]
pub(crate) enum OrchestrationCommand {
    /// Start orchestration NAME; prints the instance id.
    Start {
        name: String,
        /// The input, as JSON.
        #[arg(long)]
        input: Option<String>,
        /// The instance id (default: a new one).
        #[arg(long)]
        id: Option<String>,
    },
    /// Print the instance's status as JSON (runtime_status, serialized_input,
    /// serialized_output, serialized_custom_status, …).
    Status { id: String },
    /// Raise event EVENT at the instance.
    Raise {
        id: String,
        event: String,
        /// The event's payload, as JSON.
        #[arg(long)]
        data: Option<String>,
    },
    /// Terminate the instance.
    Terminate {
        id: String,
        #[arg(long, default_value = "terminated by agenthost client")]
        reason: String,
    },
    /// Wait for the instance to finish; prints its status. Exits non-zero
    /// when it is still running after --timeout.
    Wait {
        id: String,
        #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
        timeout: Duration,
    },
    /// List the hub's instances as JSON.
    List,
}

/// The `agenthost` command: see [`crate::run_command_line`].
pub(crate) fn main() -> ExitCode {
    quiet_error_backtraces();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run())
}

/// An orchestration that awaits unfinished work is stopped through a host
/// error (wasmtime's `anyhow::Error`), once per episode. With
/// `RUST_BACKTRACE=1` in the environment each of those would capture a host
/// backtrace, a tenth of a step's time. Panics still print theirs; set
/// `RUST_LIB_BACKTRACE=1` to have errors capture them too.
fn quiet_error_backtraces() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        // Sound: no other thread exists yet.
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
}

async fn run() -> ExitCode {
    let cli = Cli::parse();
    // Kept to the end: dropping it sends the spans still queued.
    let _telemetry = crate::telemetry::init(cli.log_format);
    let result = match cli.command {
        Command::Serve(args) => crate::server::serve((*args).into()).await,
        Command::Worker(args) => crate::server::work((*args).into()).await,
        Command::Inspect { file } => crate::server::inspect(&file).await,
        Command::New { what } => new_project(what),
        Command::Build { dir, into } => build::build(&dir, into.as_deref()).await,
        Command::Compile { dir } => compile::compile(&dir).await,
        Command::Dev { dir, port } => dev::dev(&dir, port).await,
        Command::Tool {
            command:
                ToolCommand::Call {
                    file,
                    tool,
                    arguments,
                },
        } => crate::server::call_tool(&file, &tool, &arguments).await,
        Command::Client(args) => client::run(args).await,
        Command::Functions {
            command: FunctionsCommand::Init(args),
        } => functions::init(&args).await,
        Command::Due(args) => due(&args).await,
        Command::CheckReplay(args) => match check_replay::check_replay(&args).await {
            Ok(true) => Ok(()),
            // The report said why on stdout.
            Ok(false) => return ExitCode::FAILURE,
            Err(e) => Err(e),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `agenthost due`: the due work as JSON, or the scaler's query.
async fn due(args: &DueArgs) -> anyhow::Result<()> {
    let hub = crate::store::TaskHub::new(&args.taskhub)?;
    let within = i64::try_from(args.within.as_millis()).unwrap_or(i64::MAX);
    if args.sql {
        let postgres = args.store.starts_with("postgres");
        let (kind, schema, at) = match postgres {
            true => (
                crate::store::Kind::Postgres,
                format!("\"taskhub_{hub}\""),
                crate::store::postgres_now_plus(within),
            ),
            false => (
                crate::store::Kind::Sqlite,
                String::new(),
                format!("(CAST(strftime('%s', 'now') AS INTEGER) * 1000 + {within})"),
            ),
        };
        println!("{}", crate::store::due_sql(kind, &schema, &at));
        return Ok(());
    }
    let due = crate::store::due_work(&args.store, &hub, within).await?;
    let next = due
        .next_at
        .and_then(chrono::DateTime::from_timestamp_millis);
    println!(
        "{}",
        serde_json::json!({
            "taskhub": hub.to_string(),
            "due": due.total(),
            "instances": due.instances,
            "tasks": due.tasks,
            "runs": due.runs,
            "nextDueAt": next.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        })
    );
    Ok(())
}

/// `agenthost new agent|orchestration NAME`.
fn new_project(what: NewCommand) -> anyhow::Result<()> {
    let (kind, args) = match what {
        NewCommand::Agent(args) => (scaffold::Kind::Agent, args),
        NewCommand::Orchestration(args) => (scaffold::Kind::Orchestration, args),
    };
    let dir = args.dir.unwrap_or_else(|| PathBuf::from(&args.name));
    scaffold::create(kind, args.lang, &args.name, &dir)?;
    println!("created {}", dir.display());
    println!(
        "  build it: agenthost build {} --into COMPONENTS_DIR",
        dir.display()
    );
    Ok(())
}
