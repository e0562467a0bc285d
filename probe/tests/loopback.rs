//! The TCP probe end to end on loopback: figures, and each way a server declines.

use std::sync::Arc;
use std::time::Duration;

use commwatch_probe::{
    run, BusyCheck, ClientOptions, Limits, NeverBusy, Params, ProbeError, Refusal, Server,
    ServerConfig, TransportKind,
};
use tokio::net::TcpListener;

struct Busy;
impl BusyCheck for Busy {
    fn busy(&self) -> Option<String> {
        Some("mlx5_0 port 1 carries 20.000 GB/s".into())
    }
}

async fn start(config: ServerConfig, busy: Arc<dyn BusyCheck>) -> (String, Arc<Server>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = Server::new(config, busy);
    tokio::spawn(Arc::clone(&server).serve(listener, std::future::pending()));
    (addr, server)
}

fn options(target: &str, token: Option<&str>) -> ClientOptions {
    ClientOptions {
        target: target.to_string(),
        bind: Some("127.0.0.1".parse().unwrap()),
        token: token.map(str::to_string),
        params: Params {
            transport: TransportKind::Tcp,
            size: 256 * 1024,
            duration: Duration::from_millis(600),
        },
        device: None,
    }
}

fn with_token(t: &str) -> ServerConfig {
    ServerConfig {
        token: Some(t.into()),
        ..ServerConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_gives_bandwidth_both_ways_and_latency() {
    let (addr, server) = start(with_token("s3cret"), Arc::new(NeverBusy)).await;
    let r = run(&options(&addr, Some("s3cret"))).await.unwrap();
    println!("{}", r.to_text());
    assert_eq!(r.transport, TransportKind::Tcp);
    assert!(
        r.tx_bytes >= 256 * 1024 && r.rx_bytes >= 256 * 1024,
        "{r:?}"
    );
    assert_eq!(r.tx_bytes % (256 * 1024), 0, "whole messages: {r:?}");
    assert!(
        r.tx_bytes_per_second > 0.0 && r.rx_bytes_per_second > 0.0,
        "{r:?}"
    );
    assert!(r.latency_samples > 10, "{r:?}");
    assert!(r.latency_p50_seconds > 0.0, "{r:?}");
    assert!(r.latency_p50_seconds <= r.latency_p99_seconds, "{r:?}");
    assert!(r.latency_p99_seconds <= r.latency_max_seconds, "{r:?}");
    // The server counted a completed session once the client is done.
    tokio::time::sleep(Duration::from_millis(200)).await;
    use std::sync::atomic::Ordering::Relaxed;
    assert_eq!(server.stats.accepted.load(Relaxed), 1);
    assert_eq!(server.stats.completed.load(Relaxed), 1);
}

#[tokio::test]
async fn a_closed_port_is_a_clear_connection_error() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    drop(l);
    let e = run(&options(&addr, None)).await.unwrap_err();
    assert!(matches!(e, ProbeError::Connect { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("cannot connect to {addr}: ")),
        "{text}"
    );
    assert!(text.to_lowercase().contains("refused"), "{text}");
}

#[tokio::test]
async fn a_wrong_token_is_declined() {
    let (addr, server) = start(with_token("s3cret"), Arc::new(NeverBusy)).await;
    for token in [Some("wrong"), None] {
        let e = run(&options(&addr, token)).await.unwrap_err();
        assert_eq!(e.refusal(), Some(Refusal::Token), "{e}");
        assert!(e.to_string().contains("declined the probe (token)"), "{e}");
    }
    let refused = &server.stats.refused[commwatch_probe::server::refusal_index(Refusal::Token)];
    assert_eq!(refused.load(std::sync::atomic::Ordering::Relaxed), 2);
}

#[tokio::test]
async fn a_busy_node_declines() {
    let (addr, _) = start(with_token("t"), Arc::new(Busy)).await;
    let e = run(&options(&addr, Some("t"))).await.unwrap_err();
    assert_eq!(e.refusal(), Some(Refusal::Busy), "{e}");
    assert!(
        e.to_string().contains("mlx5_0 port 1 carries 20.000 GB/s"),
        "{e}"
    );
}

#[tokio::test]
async fn over_the_limits_and_too_soon_are_declined() {
    let config = ServerConfig {
        limits: Limits {
            max_size: 64 * 1024,
            max_duration: Duration::from_secs(2),
            min_interval: Duration::from_secs(3600),
        },
        ..ServerConfig::default()
    };
    let (addr, _) = start(config, Arc::new(NeverBusy)).await;
    let e = run(&options(&addr, None)).await.unwrap_err();
    assert_eq!(e.refusal(), Some(Refusal::Limits), "{e}");
    assert!(e.to_string().contains("size 262144 bytes"), "{e}");
    let mut ok = options(&addr, None);
    ok.params.size = 64 * 1024;
    ok.params.duration = Duration::from_millis(300);
    run(&ok).await.unwrap();
    let e = run(&ok).await.unwrap_err();
    assert_eq!(e.refusal(), Some(Refusal::Rate), "{e}");
}

#[tokio::test]
async fn rdma_without_a_device_or_the_feature_says_so() {
    let (addr, _) = start(ServerConfig::default(), Arc::new(NeverBusy)).await;
    let mut o = options(&addr, None);
    o.params.transport = TransportKind::Rdma;
    o.device = Some("mlx5_9".into());
    let e = run(&o).await.unwrap_err();
    let text = e.to_string();
    assert!(
        matches!(e, ProbeError::RdmaNotBuilt | ProbeError::NoRdmaDevice(_)),
        "{text}"
    );
    assert!(text.contains("RDMA"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_relays_a_probe_to_another_when_allowed() {
    let relay = ServerConfig {
        token: Some("t".into()),
        relay: true,
        bind: Some("127.0.0.1".parse().unwrap()),
        ..ServerConfig::default()
    };
    let (a, _) = start(relay, Arc::new(NeverBusy)).await;
    let (b, b_server) = start(with_token("t"), Arc::new(NeverBusy)).await;
    let params = Params {
        transport: TransportKind::Tcp,
        size: 64 * 1024,
        duration: Duration::from_millis(400),
    };
    let r = commwatch_probe::relay(&a, &b, Some("t"), &params)
        .await
        .unwrap();
    assert_eq!(r.target, b);
    assert!(
        r.tx_bytes_per_second > 0.0 && r.latency_samples > 0,
        "{r:?}"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        b_server
            .stats
            .completed
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    // A server without relaying declines; a relay to a dead target names it.
    let e = commwatch_probe::relay(&b, &a, Some("t"), &params)
        .await
        .unwrap_err();
    assert_eq!(e.refusal(), Some(Refusal::Transport), "{e}");
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap().to_string()
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let e = commwatch_probe::relay(&a, &dead, Some("t"), &params)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("could not probe {dead}: cannot connect")),
        "{e}"
    );
}
