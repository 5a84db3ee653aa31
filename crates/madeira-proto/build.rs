//! Generates the link's Rust code with protox (a pure-Rust protobuf compiler), so
//! building needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/sidecar.proto");
    let files = protox::compile(["proto/sidecar.proto"], ["proto"])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(files)?;
    Ok(())
}
