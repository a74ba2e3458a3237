// The build script both doc-example guests include (doc-poet, doc-review):
// their crate is a doc's example, copied out of the markdown at build time,
// so a doc whose code stops compiling fails the build (tests/doc_blocks.rs
// then runs the component).

/// Copies the ```rust block of `doc` (from the workspace root) that contains
/// `marker` into `OUT_DIR/example.rs`.
fn copy_example(doc: &str, marker: &str) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let path = root.join(doc);
    println!("cargo:rerun-if-changed={}", path.display());
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{doc}: {e}"));
    let block = rust_blocks(&text)
        .into_iter()
        .find(|b| b.contains(marker))
        .unwrap_or_else(|| panic!("{doc} has no ```rust block containing {marker}"));
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
