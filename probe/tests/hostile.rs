//! A probe server against clients without the token or with bad intent, on loopback: the connection cap, the
//! handshake deadline, wrong tokens throttled per address, and a session held to its own duration. Each test
//! asserts the outcome (closed, refused, counted), not a time bound.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use commwatch_probe::conn::Conn;
use commwatch_probe::wire::{
    encode_header, FrameKind, Message, PhaseKind, Refusal, TransportKind, PROTOCOL_VERSION,
};
use commwatch_probe::{Limits, NeverBusy, Server, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Generous bound for what should happen "at once" on a loaded machine.
const PROMPT: Duration = Duration::from_secs(10);

async fn start(config: ServerConfig) -> (std::net::SocketAddr, Arc<Server>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = Server::new(config, Arc::new(NeverBusy));
    tokio::spawn(Arc::clone(&server).serve(listener, std::future::pending()));
    (addr, server)
}

fn hello(token: &str, duration_ms: u64) -> Message {
    Message::Hello {
        version: PROTOCOL_VERSION,
        token: token.into(),
        transport: TransportKind::Tcp,
        size_bytes: 64 * 1024,
        duration_ms,
        qp: None,
        relay_to: None,
    }
}

/// True when the server closed `s` (end of stream or a reset) within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let until = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(until, s.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
            Err(_) => return false,
        }
    }
}

#[tokio::test]
async fn a_silent_or_half_sent_hello_is_closed_at_the_handshake_deadline() {
    let config = ServerConfig {
        token: Some("s3cret".into()),
        handshake_timeout: Duration::from_millis(500),
        ..ServerConfig::default()
    };
    let (addr, server) = start(config).await;
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut half = TcpStream::connect(addr).await.unwrap();
    // A control header announcing 100 bytes, and 10 of them.
    half.write_all(&encode_header(FrameKind::Control, 100))
        .await
        .unwrap();
    half.write_all(b"{\"hello\":{").await.unwrap();
    assert!(closed_within(&mut silent, PROMPT).await, "silent kept");
    assert!(closed_within(&mut half, PROMPT).await, "half-sent kept");
    assert_eq!(server.metrics.handshake_timeouts.get(), 2);
    // Their slots are free.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(server.metrics.connections.open.get(), 0);
}

#[tokio::test]
async fn connections_over_the_cap_are_closed_at_once_and_counted() {
    let config = ServerConfig {
        token: Some("s3cret".into()),
        max_connections: 4,
        handshake_timeout: Duration::from_secs(60),
        ..ServerConfig::default()
    };
    let (addr, server) = start(config).await;
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(TcpStream::connect(addr).await.unwrap());
    }
    let mut fifth = TcpStream::connect(addr).await.unwrap();
    assert!(closed_within(&mut fifth, PROMPT).await, "fifth kept");
    assert!(server.metrics.connections.refused.get() >= 1);
    assert_eq!(server.metrics.connections.open.get(), 4);
    assert!(!closed_within(&mut idle[0], Duration::from_millis(200)).await);
    drop(idle);
    // Slots come back as the idle ones close: a client with the token is answered.
    let until = tokio::time::Instant::now() + PROMPT;
    loop {
        let s = TcpStream::connect(addr).await.unwrap();
        let mut conn = Conn::new(s);
        if conn.send_message(&hello("nope", 100)).await.is_ok() {
            if let Ok(Message::Refuse { reason, .. }) = conn.recv_message(PROMPT).await {
                assert_eq!(reason, Refusal::Token);
                break;
            }
        }
        assert!(tokio::time::Instant::now() < until, "never answered again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends one hello with `token` on a new connection; the refusal's detail, or `None` when accepted.
async fn try_token(addr: std::net::SocketAddr, token: &str) -> Option<String> {
    let mut conn = Conn::new(TcpStream::connect(addr).await.unwrap());
    conn.send_message(&hello(token, 200)).await.unwrap();
    match conn.recv_message(PROMPT).await.unwrap() {
        Message::Refuse { reason, detail } => {
            assert_eq!(reason, Refusal::Token, "{detail}");
            Some(detail)
        }
        Message::Accept { .. } => None,
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn wrong_tokens_are_throttled_per_address_and_counted() {
    let (addr, server) = start(ServerConfig {
        token: Some("s3cret".into()),
        ..ServerConfig::default()
    })
    .await;
    let mut throttled = 0;
    for i in 0..20 {
        let detail = try_token(addr, &format!("guess-{i}")).await.unwrap();
        if detail.contains("too many wrong tokens") {
            throttled += 1;
        }
    }
    // Five compared at once, then about one a second: most of twenty quick guesses never reach the token.
    assert!(throttled >= 10, "only {throttled} of 20 throttled");
    assert_eq!(server.metrics.auth_failures.get(), 20);
    let refused = &server.stats.refused[commwatch_probe::server::refusal_index(Refusal::Token)];
    assert_eq!(refused.load(Relaxed), 20);
    // After a quiet second the right token is compared and accepted.
    tokio::time::sleep(commwatch_probe::auth::AUTH_REFILL + Duration::from_millis(100)).await;
    assert_eq!(try_token(addr, "s3cret").await, None);
}

#[tokio::test]
async fn a_session_serves_no_more_than_its_duration() {
    let config = ServerConfig {
        limits: Limits {
            max_duration: Duration::from_secs(30),
            ..Limits::default()
        },
        ..ServerConfig::default()
    };
    let (addr, server) = start(config).await;
    let mut conn = Conn::new(TcpStream::connect(addr).await.unwrap());
    // Asks for 300 ms in all, then for download phases of 30 s, one after another.
    conn.send_message(&hello("", 300)).await.unwrap();
    assert!(matches!(
        conn.recv_message(PROMPT).await.unwrap(),
        Message::Accept { .. }
    ));
    let mut phases_served = 0;
    for _ in 0..8 {
        let ask = Message::Phase {
            phase: PhaseKind::Download,
            span_ms: 30_000,
        };
        if conn.send_message(&ask).await.is_err() {
            break;
        }
        // The server's DATA until its END, then its `measured`; the connection closed instead ends the probe.
        let Ok(end) = drain_bulk(&mut conn).await else {
            break;
        };
        assert!(end, "no END");
        if conn.recv_message(PROMPT).await.is_err() {
            break;
        }
        phases_served += 1;
    }
    assert_eq!(phases_served, 1, "served beyond the duration");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(server.stats.failed.load(Relaxed), 1);
}

/// Reads DATA frames until END (`Ok(true)`); an error when the server closes the connection.
async fn drain_bulk(conn: &mut Conn) -> Result<bool, commwatch_probe::ProbeError> {
    loop {
        let h = conn.recv_header(PROMPT).await?;
        match h.kind {
            FrameKind::Data => {
                conn.recv_payload(h.len).await?;
            }
            FrameKind::End => return Ok(true),
            _ => return Ok(false),
        }
    }
}
