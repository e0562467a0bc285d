//! The gRPC listener under connections that never become agents: idle TCP connections are closed within the
//! handshake deadline while real agents still connect, and connections over the per-address and per-listener
//! caps are closed at once and counted. Real sockets on 127.0.0.1.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use commwatch_collector::CollectorHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous bound for anything that should happen "at once" on a loaded machine.
const PROMPT: Duration = Duration::from_secs(5);

/// `name{reason="…"}` in the collector's `/metrics` (0 when absent).
fn counted(h: &CollectorHandle, name: &str, reason: &str) -> f64 {
    let prefix = format!("{name}{{reason=\"{reason}\"}} ");
    h.render_metrics()
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or(0.0)
}

/// `counted(…)` once it reaches `want` (or after 30 s, whatever it is then: generous, for a loaded machine).
async fn counted_soon(h: &CollectorHandle, name: &str, reason: &str, want: f64) -> f64 {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let n = counted(h, name, reason);
        if n >= want || Instant::now() > until {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `true` when the server closes `s` (end of stream or reset) within `within`; what it sends first (an HTTP/2
/// server's SETTINGS) is read and dropped.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 256];
    let until = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(until, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

async fn idle_connections(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(TcpStream::connect(addr).await.expect("connect"));
    }
    v
}

/// An agent that connects, is acknowledged, and whose batch is acknowledged.
async fn agent_gets_in(h: &CollectorHandle, node: &str) -> Agent {
    let (mut a, _) = tokio::time::timeout(PROMPT, Agent::connect(h.grpc_addr, hello(node, 1)))
        .await
        .expect("the agent connects at once");
    a.send_batch(batch(1, &traffic(0, 2, 10, 10))).await;
    assert_eq!(a.ack_at_least(1).await, 1);
    a
}

/// Failure 2 of the hostile test: idle connections to the gRPC port were never closed (20,000 exhausted the
/// descriptors). With the default configuration (a 5 s handshake deadline) every one of 200 is closed within
/// the deadline and a margin, an agent connecting meanwhile is served, and the closures are counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_within_the_handshake_deadline_and_agents_still_connect() {
    let h = collector(config()).await;
    let deadline = Duration::from_secs(5);
    let t0 = Instant::now();
    let mut idle = idle_connections(h.grpc_addr, 200).await;
    // One sends half the HTTP/2 preface and stalls: still not a handshake.
    idle[0].write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let mut agent = agent_gets_in(&h, "n1").await;
    for (i, s) in idle.iter_mut().enumerate() {
        let left = (deadline + PROMPT).saturating_sub(t0.elapsed());
        assert!(
            closed_within(s, left).await,
            "idle connection {i} still open {:?} after it was opened",
            t0.elapsed()
        );
    }
    let took = t0.elapsed();
    eprintln!("200 idle connections closed {took:?} after they were opened");
    assert!(
        took >= deadline - Duration::from_millis(500),
        "closed before the deadline: {took:?}"
    );
    let name = "commwatch_collector_grpc_connections_refused_total";
    // Counted just after the close the client saw.
    assert_eq!(
        counted_soon(&h, name, "handshake_timeout", 200.0).await,
        200.0
    );
    // The agent's stream lived through it.
    agent.send_batch(batch(2, &traffic(2, 2, 10, 10))).await;
    assert_eq!(agent.ack_at_least(2).await, 2);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_per_address_cap_are_closed_at_once_and_counted() {
    let mut cfg = config();
    cfg.limits.max_grpc_connections_per_peer = 8;
    cfg.limits.grpc_handshake_timeout = Duration::from_secs(30);
    let h = collector(cfg).await;
    let held = idle_connections(h.grpc_addr, 8).await;
    // Let the listener take all eight before the ninth.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut over = idle_connections(h.grpc_addr, 5).await;
    for s in &mut over {
        assert!(closed_within(s, PROMPT).await, "over the cap, not closed");
    }
    let name = "commwatch_collector_grpc_connections_refused_total";
    assert_eq!(counted_soon(&h, name, "peer_limit", 5.0).await, 5.0);
    // Only the idle ones are held: the held count is exact.
    let open = h.render_metrics().lines().find_map(|l| {
        l.strip_prefix("commwatch_collector_grpc_connections ")?
            .parse::<f64>()
            .ok()
    });
    assert_eq!(open, Some(8.0));
    // The address's connections closing (the client going away) give their places back.
    drop(held);
    let until = Instant::now() + PROMPT;
    while counted(&h, name, "not_http2") < 8.0 {
        assert!(Instant::now() < until, "{}", h.render_metrics());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    agent_gets_in(&h, "n1").await;
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_listener_cap_are_closed_at_once_and_counted() {
    let mut cfg = config();
    cfg.limits.max_grpc_connections = 4;
    cfg.limits.max_grpc_connections_per_peer = 4;
    // Long enough that the four idle ones still hold every slot when the fifth comes, however late a loaded
    // machine runs this; the reason counted says which closed the fifth (the cap, not its own deadline).
    cfg.limits.grpc_handshake_timeout = Duration::from_secs(3);
    let h = collector(cfg).await;
    let _held = idle_connections(h.grpc_addr, 4).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut over = TcpStream::connect(h.grpc_addr).await.unwrap();
    assert!(closed_within(&mut over, PROMPT).await);
    let name = "commwatch_collector_grpc_connections_refused_total";
    // The listener's cap is checked first.
    assert_eq!(counted_soon(&h, name, "listener_limit", 1.0).await, 1.0);
    // Once the deadline closes the idle four, agents get in again.
    // Counted just after the close the client saw.
    assert_eq!(counted_soon(&h, name, "handshake_timeout", 4.0).await, 4.0);
    agent_gets_in(&h, "n1").await;
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_are_not_http2_are_closed_at_once() {
    let h = collector(config()).await;
    let mut s = TcpStream::connect(h.grpc_addr).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(closed_within(&mut s, PROMPT).await);
    let name = "commwatch_collector_grpc_connections_refused_total";
    assert_eq!(counted_soon(&h, name, "not_http2", 1.0).await, 1.0);
    agent_gets_in(&h, "n1").await;
    h.shutdown().await;
}
