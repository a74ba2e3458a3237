//! The code block of the doc, as a user would paste it into `src/lib.rs`:
//! `build.rs` copies it out of the markdown into `OUT_DIR/example.rs`.

include!(concat!(env!("OUT_DIR"), "/example.rs"));
