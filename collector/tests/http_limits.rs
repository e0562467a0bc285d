//! The collector's HTTP listener is bounded: at most `limits.max_http_connections` connections at once (one
//! more is closed at once and counted), and a client that never sends its request headers is closed after
//! `commwatch_httpd::HEADER_READ_TIMEOUT`. Real sockets on 127.0.0.1.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::*;
use commwatch_httpd::HEADER_READ_TIMEOUT;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Generous bound for anything that should happen "at once" on a loaded machine.
const PROMPT: Duration = Duration::from_secs(5);

fn value(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name).then(|| v.parse().ok())?
    })
}

/// `true` when the server closes `s` (end of stream or reset) within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 64];
    matches!(
        tokio::time::timeout(within, s.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

/// `GET url` until it answers (connections refused at the cap meanwhile are retried); status and body.
async fn get_eventually(url: String) -> (u16, String) {
    let until = Instant::now() + PROMPT;
    loop {
        match reqwest::get(&url).await {
            Ok(r) => return (r.status().as_u16(), r.text().await.expect("body")),
            Err(e) => assert!(Instant::now() < until, "GET {url} kept failing: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn idle_connections(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut v = Vec::new();
    for _ in 0..n {
        v.push(TcpStream::connect(addr).await.expect("connect"));
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_max_http_connections_are_closed_at_once_and_counted() {
    let mut cfg = config();
    cfg.limits.max_http_connections = 4;
    let h = collector(cfg).await;
    let idle = idle_connections(h.http_addr, 4).await;
    // The listener accepts in order: when it takes the fifth, the four idle ones hold every slot.
    let mut fifth = TcpStream::connect(h.http_addr).await.expect("connect");
    let started = Instant::now();
    assert!(
        closed_within(&mut fifth, PROMPT).await,
        "the fifth connection was left open"
    );
    assert!(started.elapsed() < PROMPT);
    let m = h.render_metrics();
    assert_eq!(
        value(&m, "commwatch_collector_http_connections_refused_total"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        value(&m, "commwatch_collector_http_connections"),
        Some(4.0),
        "{m}"
    );
    // Closing the idle ones frees their slots: requests succeed again, the API included (the access guard
    // still sees the client's address).
    drop(idle);
    let (code, body) = get_eventually(format!("http://{}/healthz", h.http_addr)).await;
    assert_eq!(code, 200, "{body}");
    let (code, body) = get_eventually(format!("http://{}/api/v1/nodes", h.http_addr)).await;
    assert_eq!(code, 200, "{body}");
    let (code, m) = get_eventually(format!("http://{}/metrics", h.http_addr)).await;
    assert_eq!(code, 200);
    assert!(
        value(&m, "commwatch_collector_http_connections_refused_total").is_some_and(|v| v >= 1.0),
        "{m}"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_sends_headers_is_closed_after_the_header_timeout() {
    let mut cfg = config();
    cfg.limits.max_http_connections = 1;
    let h = collector(cfg).await;
    let started = Instant::now();
    let mut silent = TcpStream::connect(h.http_addr).await.expect("connect");
    assert!(
        closed_within(&mut silent, HEADER_READ_TIMEOUT + PROMPT).await,
        "a silent client kept its connection"
    );
    assert!(started.elapsed() + Duration::from_millis(100) >= HEADER_READ_TIMEOUT);
    // Its slot (the only one) is free again.
    let (code, _) = get_eventually(format!("http://{}/healthz", h.http_addr)).await;
    assert_eq!(code, 200);
    h.shutdown().await;
}
