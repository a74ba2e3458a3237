//! The `rust` block of docs/orchestrations.md that defines the `review`
//! orchestration is this crate (see ../doc_example.rs).

include!("../doc_example.rs");

fn main() {
    copy_example("docs/orchestrations.md", "Orchestration::new(\"review\"");
}
