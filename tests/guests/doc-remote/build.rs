//! The `rust` block of docs/a2a-and-mcp.md that defines the `ask_remote`
//! orchestration is this crate (see ../doc_example.rs).

include!("../doc_example.rs");

fn main() {
    copy_example("docs/a2a-and-mcp.md", "Orchestration::new(\"ask_remote\"");
}
