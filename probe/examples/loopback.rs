//! Loopback figures of the TCP probe (a benchmark that reports, never asserts):
//! `cargo run --release -p commwatch-probe --example loopback [SIZE_BYTES] [DURATION_MS]`.

use std::sync::Arc;
use std::time::Duration;

use commwatch_probe::{run, ClientOptions, NeverBusy, Params, Server, ServerConfig, TransportKind};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let size: u64 = args.next().map_or(Ok(1 << 20), |s| s.parse())?;
    let millis: u64 = args.next().map_or(Ok(5000), |s| s.parse())?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let target = listener.local_addr()?.to_string();
    let server = Server::new(ServerConfig::default(), Arc::new(NeverBusy));
    tokio::spawn(server.serve(listener, std::future::pending()));
    let r = run(&ClientOptions {
        target,
        params: Params {
            transport: TransportKind::Tcp,
            size,
            duration: Duration::from_millis(millis),
        },
        ..ClientOptions::default()
    })
    .await?;
    print!("{}", r.to_text());
    Ok(())
}
