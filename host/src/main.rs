//! The `agenthost` binary: the library's command line, nothing else.

/// mimalloc: a run allocates and frees many small buffers (requests, rows,
/// JSON) across the runtime's threads, where glibc's arenas spent 9% of a
/// one-connection agent run's CPU in malloc and free.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    agenthost::run_command_line()
}
