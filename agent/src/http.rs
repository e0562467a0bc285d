//! The agent's own HTTP endpoint: `/metrics` (its health) and `/healthz`. Binds localhost unless configured.
//!
//! Bounded like the collector's (`commwatch_collector::export::listener`, of which this is the minimal form):
//! at most [`MAX_HTTP_CONNECTIONS`] connections at once — one accepted beyond that is closed at once and
//! counted in `commwatch_agent_http_connections_refused_total` — and a client must send a request's headers
//! within [`HEADER_READ_TIMEOUT`] or be closed. Responses have no time limit. HTTP/1.1 only.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::telemetry::AgentMetrics;

/// Most HTTP connections the agent serves at once: its endpoint is scraped by one Prometheus (and read by an
/// operator now and then), so 32 leaves ample room while bounding what a local flood costs the node.
pub const MAX_HTTP_CONNECTIONS: usize = 32;

/// Time a client has to send a request's headers, from the moment the agent waits for them (a new
/// connection, or a kept-alive one after its previous response).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

async fn metrics_handler(State(m): State<Arc<AgentMetrics>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        m.render(),
    )
}

/// Binds `addr` and serves until `shutdown` flips to true (or its sender is gone): then it accepts nothing
/// more, and open connections end after their current response. Returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<AgentMetrics>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let refused = metrics.http_connections_refused.clone();
    let app = Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(metrics);
    let task = tokio::spawn(accept_loop(listener, app, refused, shutdown));
    Ok((bound, task))
}

async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|v| *v).await;
}

async fn accept_loop(
    listener: TcpListener,
    app: Router,
    refused: prometheus::IntCounter,
    mut shutdown: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_HTTP_CONNECTIONS));
    loop {
        let (stream, peer) = tokio::select! {
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionAborted => continue,
                Err(e) => {
                    // E.g. no file descriptor left: pause rather than spin.
                    tracing::warn!(error = %e, "agent HTTP accept failed; pausing 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            },
            _ = stopped(&mut shutdown) => return,
        };
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            refused.inc();
            tracing::debug!(%peer, "agent HTTP connection refused: connection limit reached");
            drop(stream);
            continue;
        };
        let app = app.clone();
        let mut shutdown = shutdown.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                tower_service::Service::call(&mut app.clone(), req)
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            tokio::pin!(conn);
            let r = tokio::select! {
                r = conn.as_mut() => r,
                _ = stopped(&mut shutdown) => {
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = r {
                tracing::debug!(%peer, error = %e, "agent HTTP connection ended with an error");
            }
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::time::Instant;

    const PROMPT: Duration = Duration::from_secs(5);

    async fn healthz(addr: SocketAddr) -> Option<String> {
        let mut s = TcpStream::connect(addr).await.ok()?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut out = Vec::new();
        tokio::time::timeout(PROMPT, s.read_to_end(&mut out))
            .await
            .ok()?
            .ok()?;
        Some(String::from_utf8_lossy(&out).into_owned())
    }

    #[tokio::test]
    async fn connections_over_the_cap_are_closed_at_once_and_counted() {
        let metrics = Arc::new(AgentMetrics::new());
        let (stop, rx) = watch::channel(false);
        let (addr, task) = serve("127.0.0.1:0".parse().unwrap(), metrics.clone(), rx)
            .await
            .unwrap();
        let mut idle = Vec::new();
        for _ in 0..MAX_HTTP_CONNECTIONS {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        // Accepted in order: when the agent takes this one, the idle ones hold every slot.
        let mut over = TcpStream::connect(addr).await.unwrap();
        let mut buf = [0u8; 16];
        let r = tokio::time::timeout(PROMPT, over.read(&mut buf)).await;
        assert!(matches!(r, Ok(Ok(0)) | Ok(Err(_))), "left open: {r:?}");
        assert_eq!(metrics.http_connections_refused.get(), 1);
        assert!(metrics
            .render()
            .contains("commwatch_agent_http_connections_refused_total 1"));
        drop(idle);
        let until = Instant::now() + PROMPT;
        loop {
            match healthz(addr).await {
                Some(r) if r.starts_with("HTTP/1.1 200") => break,
                r => assert!(
                    Instant::now() < until,
                    "no 200 after the idle ones closed: {r:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stop.send_replace(true);
        tokio::time::timeout(PROMPT, task).await.unwrap().unwrap();
    }
}
