//! Generates the canopy.v1 messages, client and server with a vendored protoc, so a build needs
//! nothing but the Rust toolchain.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let well_known = protoc_bin_vendored::include_path()?;
    // SAFETY: build scripts are single-threaded; prost-build reads PROTOC from the environment.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=canopy/v1/worker.proto");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&[PathBuf::from("canopy/v1/worker.proto")], &[PathBuf::from("."), well_known])?;
    Ok(())
}
