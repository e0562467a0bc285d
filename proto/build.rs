//! Compiles `proto/commwatch/v1/commwatch.proto` with protox (pure Rust), so no `protoc` is needed. The
//! services use [`crate::codec::SliceCodec`] (prost, decoding from one slice, a fast path for sample batches).
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let file = "proto/commwatch/v1/commwatch.proto";
    println!("cargo:rerun-if-changed={file}");
    let fds = protox::compile([file], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .codec_path("crate::codec::SliceCodec")
        .compile_fds(fds)?;
    Ok(())
}
