//! The `rust` block of docs/components.md that defines the `poet` agent is
//! this crate (see ../doc_example.rs).

include!("../doc_example.rs");

fn main() {
    copy_example("docs/components.md", "Agent::new(\"poet\")");
}
