//! Generates the Durable Task sidecar protocol's messages and service
//! (`proto/orchestrator_service.proto`, the public durabletask-protobuf
//! contract) with a compiler written in Rust, so a build needs no `protoc`;
//! and the list of each store's migrations (`migrations/`,
//! `migrations-postgres/`), embedded in the binary by `include_str!`
//! (src/store/migrations.rs) instead of by sqlx's proc-macro, which would
//! compile sqlx and a second SQLite again for itself.

use std::fmt::Write as _;
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/orchestrator_service.proto");
    let descriptors = protox::compile(["orchestrator_service.proto"], ["proto"])?;
    let mut config = tonic_prost_build::Config::new();
    // The contract has no `package`: name the generated file after it.
    config.default_package_filename("durabletask");
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .generate_default_stubs(true)
        .compile_fds_with_config(descriptors, config)?;

    let mut listing = String::new();
    for (name, dir) in [
        ("SQLITE", "migrations"),
        ("POSTGRES", "migrations-postgres"),
    ] {
        println!("cargo:rerun-if-changed={dir}");
        let dir = Path::new(&std::env::var("CARGO_MANIFEST_DIR")?).join(dir);
        let mut files = std::fs::read_dir(&dir)?
            .map(|entry| entry.map(|e| e.path()))
            .collect::<Result<Vec<_>, _>>()?;
        files.retain(|path| path.extension().is_some_and(|e| e == "sql"));
        files.sort();
        writeln!(listing, "pub(super) const {name}: &[(&str, &str)] = &[")?;
        for path in files {
            let file = path
                .file_name()
                .and_then(|f| f.to_str())
                .ok_or("a migration's name is not UTF-8")?;
            writeln!(
                listing,
                "    ({file:?}, include_str!({:?})),",
                path.display().to_string()
            )?;
        }
        writeln!(listing, "];")?;
    }
    std::fs::write(
        Path::new(&std::env::var("OUT_DIR")?).join("migrations.rs"),
        listing,
    )?;
    Ok(())
}
