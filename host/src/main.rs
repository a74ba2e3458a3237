use std::process::ExitCode;

use clap::Parser;

use agenthost::cli::{Cli, Command};

fn main() -> ExitCode {
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
    let _telemetry = agenthost::telemetry::init(cli.log_format);
    let result = match cli.command {
        Command::Serve(args) => agenthost::server::serve(*args).await,
        Command::Worker(args) => agenthost::server::work(*args).await,
        Command::Inspect { file } => agenthost::server::inspect(&file).await,
        Command::Client(args) => agenthost::client_cli::run(args).await,
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
