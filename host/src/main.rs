//! The `agenthost` binary: the library's command line, nothing else.

fn main() -> std::process::ExitCode {
    agenthost::run_command_line()
}
