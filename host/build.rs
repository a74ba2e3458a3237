//! Generates the Durable Task sidecar protocol's messages and service
//! (`proto/orchestrator_service.proto`, the public durabletask-protobuf
//! contract) with a compiler written in Rust, so a build needs no `protoc`.

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
    Ok(())
}
