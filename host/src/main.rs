use std::io::IsTerminal;

use clap::Parser;
use tracing_subscriber::EnvFilter;

use agenthost::cli::{Cli, Command};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let filter = EnvFilter::try_from_env("AGENTHOST_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,wasmtime=warn,cranelift_codegen=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => agenthost::server::serve(*args).await,
        Command::Inspect { file } => agenthost::server::inspect(&file).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
