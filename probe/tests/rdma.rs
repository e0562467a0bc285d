//! The RDMA probe end to end on this host's first RDMA device (a soft-RoCE `rxe` device will do:
//! `rdma link add rxe0 type rxe netdev eth0`). Built only with the `rdma` feature. The end-to-end test needs a
//! device, so it is ignored by default and run where one exists: `scripts/rdma-vm.sh` runs it inside a guest
//! with Soft-RoCE (`cargo test -p commwatch-probe --features rdma -- --ignored`); without a device it fails.
#![cfg(feature = "rdma")]

use std::sync::Arc;
use std::time::Duration;

use commwatch_probe::{run, ClientOptions, NeverBusy, Params, Server, ServerConfig, TransportKind};
use tokio::net::TcpListener;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs an RDMA device (Soft-RoCE will do); scripts/rdma-vm.sh runs it in a guest that has one"]
async fn rdma_probe_on_loopback() {
    let devices = commwatch_probe::rdma::devices().unwrap_or_default();
    let device = devices
        .first()
        .cloned()
        .expect("no RDMA device on this host: run it where one exists (scripts/rdma-vm.sh)");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = listener.local_addr().unwrap().to_string();
    let config = ServerConfig {
        rdma_device: Some(device.clone()),
        ..ServerConfig::default()
    };
    let server = Server::new(config, Arc::new(NeverBusy));
    tokio::spawn(server.serve(listener, std::future::pending()));
    let r = run(&ClientOptions {
        target,
        params: Params {
            transport: TransportKind::Rdma,
            size: 64 * 1024,
            duration: Duration::from_secs(1),
        },
        device: Some(device),
        ..ClientOptions::default()
    })
    .await
    .unwrap();
    println!("{}", r.to_text());
    assert_eq!(r.transport, TransportKind::Rdma);
    assert!(r.tx_bytes > 0 && r.rx_bytes > 0, "{r:?}");
    assert_eq!(r.tx_bytes % (64 * 1024), 0, "{r:?}");
    assert!(
        r.latency_samples > 0 && r.latency_p50_seconds > 0.0,
        "{r:?}"
    );
}

#[tokio::test]
async fn an_unknown_device_is_named() {
    let e = commwatch_probe::rdma::open(Some("nosuchdev9"), 4096)
        .err()
        .unwrap();
    let text = e.to_string();
    assert!(text.starts_with("no RDMA device on this host"), "{text}");
}
