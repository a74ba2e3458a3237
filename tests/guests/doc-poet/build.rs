//! Copies the `rust` code block of docs/components.md that defines the `poet` agent
//! into `OUT_DIR/example.rs`, which `src/lib.rs` includes: the crate is the
//! doc's example, so a doc whose code stops compiling fails the build
//! (tests/doc_blocks.rs then runs the component).

const DOC: &str = "docs/components.md";
const MARKER: &str = "Agent::new(\"poet\")";

fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let doc = root.join(DOC);
    println!("cargo:rerun-if-changed={}", doc.display());
    let text = std::fs::read_to_string(&doc).unwrap_or_else(|e| panic!("{DOC}: {e}"));
    let block = rust_blocks(&text)
        .into_iter()
        .find(|b| b.contains(MARKER))
        .unwrap_or_else(|| panic!("{DOC} has no ```rust block containing {MARKER}"));
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    std::fs::write(out.join("example.rs"), block).expect("write example.rs");
}

/// The text of every block fenced with ```rust (fences of three backticks,
/// as the docs write them).
fn rust_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    // Inside a block: whether it is Rust, and its text so far.
    let mut open: Option<(bool, String)> = None;
    for line in markdown.lines() {
        let fence = line.trim_start().starts_with("```");
        match (&mut open, fence) {
            (None, true) => {
                let info = line.trim_start().trim_start_matches('`').trim();
                open = Some((
                    info.split_whitespace().next() == Some("rust"),
                    String::new(),
                ));
            }
            (None, false) => {}
            (Some(_), true) => {
                if let Some((true, text)) = open.take() {
                    blocks.push(text);
                }
            }
            (Some((_, text)), false) => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    blocks
}
