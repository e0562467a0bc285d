//! The HTTP/1.1 server of the collector's (`/metrics`, `/api/v1/*`, `/healthz`) and the agent's (`/metrics`,
//! `/healthz`) endpoints, bounded against connection floods and slow clients:
//! - at most [`HttpBounds::max_connections`] connections are served at once (`limits.max_http_connections`),
//!   through the project's one connection cap ([`cap::ConnectionCap`], the probe servers' too).
//!   A connection accepted beyond that is closed at once — it is taken off the kernel's backlog, not left
//!   there — and counted in `commwatch_collector_http_connections_refused_total`; the connections open now are
//!   `commwatch_collector_http_connections`.
//! - a client must send a request's headers within [`HttpBounds::header_read_timeout`] of the server waiting
//!   for them (a new connection, or a kept-alive one after its previous response), or the connection is
//!   closed; so an idle or trickling client cannot hold a connection slot.
//! - a response whose writes make no progress for [`HttpBounds::write_stall_timeout`] (the client stopped
//!   reading and the socket buffers are full) ends the connection. Nothing limits the total time to send a
//!   response: a slow but reading scraper still gets a large `/metrics` in full.
//!
//! So a client holds a slot only while it sends a request or reads a response; a cap's worth of clients that
//! connect and stall frees every slot within the larger of the two timeouts.
//!
//! `/metrics` is gzip-compressed when the scraper asks ([`accepts_gzip`], [`gzip_fast`], [`metrics_response`]).
//!
//! Connections speak HTTP/1.1 (what Prometheus and the API clients use). The handlers see the client's address
//! as `ConnectInfo<SocketAddr>` (as with axum's `into_make_service_with_connect_info`).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tracing::{debug, error, warn};

pub mod cap;
pub mod csrf;
mod gzip;
pub use cap::{ConnectionCap, ConnectionMetrics, Slot, MAX_CONNECTIONS_BOUND};
pub use gzip::{accepts_gzip, gzip_fast, metrics_response, GzipFast, TEXT_FORMAT};

/// Time a client has to send a request's headers (production value of [`HttpBounds::header_read_timeout`]).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Time a response's writes may make no progress before the connection is ended (production value of
/// [`HttpBounds::write_stall_timeout`]). A reading client can still leave the writer blocked for a while: a
/// receiver reopens its TCP window only once a good part of its buffer is drained (a client reading 16 KiB
/// every 50 ms blocked the writer for over a second in the tests), so this is generous.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// After shutdown is asked, how long [`serve`] waits for open connections to finish their responses.
const DRAIN_GRACE: Duration = Duration::from_secs(3);

/// Pause after an accept error that is not the client's (e.g. out of file descriptors), before trying again.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// The bounds of one HTTP server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpBounds {
    /// Most connections served at once; clamped to `1..=`[`MAX_CONNECTIONS_BOUND`].
    pub max_connections: usize,
    /// Time a client has to send a request's headers, from the moment the server waits for them.
    pub header_read_timeout: Duration,
    /// Time a write to the client may stay blocked (no byte accepted by the socket) before the connection is
    /// ended.
    pub write_stall_timeout: Duration,
}

impl HttpBounds {
    /// The production bounds with at most `max_connections` connections.
    pub fn new(max_connections: usize) -> HttpBounds {
        HttpBounds {
            max_connections,
            header_read_timeout: HEADER_READ_TIMEOUT,
            write_stall_timeout: WRITE_STALL_TIMEOUT,
        }
    }
}

/// Serves `router` on `listener` within `bounds` until `shutdown` holds `true` (or its sender is dropped).
/// Then it accepts nothing more, asks open connections to finish their current response and close, and
/// returns once they have — or after a 3 s grace (within the collector's 5 s shutdown grace), leaving the rest
/// to end on their own.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    bounds: HttpBounds,
    metrics: ConnectionMetrics,
    mut shutdown: watch::Receiver<bool>,
) {
    let cap = ConnectionCap::new(bounds.max_connections, metrics);
    let max = cap.max();
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stopped(&mut shutdown) => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                error!(error = %e, "HTTP accept failed; pausing before the next accept");
                tokio::select! {
                    _ = tokio::time::sleep(ACCEPT_ERROR_PAUSE) => continue,
                    _ = stopped(&mut shutdown) => break,
                }
            }
        };
        let Some(slot) = cap.admit() else {
            debug!(%peer, max, "HTTP connection refused: connection limit reached");
            drop(stream);
            continue;
        };
        tokio::spawn(serve_connection(
            stream,
            peer,
            router.clone(),
            bounds,
            shutdown.clone(),
            slot,
        ));
    }
    drop(listener);
    // Every slot returned: every connection has ended.
    if let Err(open) = cap.drained(DRAIN_GRACE).await {
        warn!(
            open,
            "HTTP connections still open after the shutdown grace period"
        );
    }
}

/// Serves one connection until it closes, fails, times out reading headers, or shutdown is asked (then it
/// ends after its current response).
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    router: Router,
    bounds: HttpBounds,
    mut shutdown: watch::Receiver<bool>,
    slot: Slot,
) {
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        req.extensions_mut().insert(ConnectInfo(peer));
        tower_service::Service::call(&mut router.clone(), req)
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.header_read_timeout);
    let stream = StallGuard::new(stream, bounds.write_stall_timeout);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = stopped(&mut shutdown) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        debug!(%peer, error = %e, "HTTP connection ended with an error");
    }
    drop(slot);
}

/// A stream whose writes fail with [`io::ErrorKind::TimedOut`] once they have been blocked, with no byte
/// accepted, for `timeout`: a client that stopped reading cannot keep a connection (and its slot) forever.
/// Any progress restarts the clock; reads are passed through untouched.
struct StallGuard<S> {
    inner: S,
    timeout: Duration,
    /// Armed when a write first returns `Pending`; cleared by any completed write or flush.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> StallGuard<S> {
    fn new(inner: S, timeout: Duration) -> StallGuard<S> {
        StallGuard {
            inner,
            timeout,
            stalled: None,
        }
    }

    /// Maps the inner poll: progress disarms the clock, `Pending` arms it (and registers its wake-up), and
    /// the clock running out turns `Pending` into an error.
    fn guard<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => {
                let timeout = self.timeout;
                let clock = self
                    .stalled
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
                match clock.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("the client read nothing for {timeout:?}"),
                    ))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallGuard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallGuard<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.guard(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.guard(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.guard(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// Resolves once `shutdown` holds `true` or its sender is gone.
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Errors of one client's connection attempt (the listener itself is fine).
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use std::time::Instant;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Generous bound for anything that should happen "at once" on a loaded machine.
    const PROMPT: Duration = Duration::from_secs(5);

    struct Server {
        addr: SocketAddr,
        metrics: ConnectionMetrics,
        stop: watch::Sender<bool>,
        task: tokio::task::JoinHandle<()>,
    }

    async fn start(max_connections: usize, header_read_timeout: Duration) -> Server {
        start_with(HttpBounds {
            max_connections,
            header_read_timeout,
            write_stall_timeout: WRITE_STALL_TIMEOUT,
        })
        .await
    }

    async fn start_with(bounds: HttpBounds) -> Server {
        let router = Router::new()
            .route("/healthz", get(|| async { "ok\n" }))
            .route("/big", get(|| async { vec![b'x'; BIG] }))
            .route(
                "/peer",
                get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
            );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let metrics = ConnectionMetrics::unregistered("t");
        let (stop, rx) = watch::channel(false);
        let task = tokio::spawn(serve(listener, router, bounds, metrics.clone(), rx));
        Server {
            addr,
            metrics,
            stop,
            task,
        }
    }

    const BIG: usize = 32 << 20;

    /// One `GET path` on a new connection; the whole response, or `None` when the server closed it first.
    async fn get_once(addr: SocketAddr, path: &str) -> Option<String> {
        let mut s = TcpStream::connect(addr).await.ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let mut out = Vec::new();
        tokio::time::timeout(PROMPT, s.read_to_end(&mut out))
            .await
            .ok()?
            .ok()?;
        (!out.is_empty()).then(|| String::from_utf8_lossy(&out).into_owned())
    }

    /// Waits until `GET path` answers 200 (connections refused meanwhile are retried).
    async fn get_ok(addr: SocketAddr, path: &str) -> String {
        let until = Instant::now() + PROMPT;
        loop {
            if let Some(r) = get_once(addr, path).await {
                if r.starts_with("HTTP/1.1 200") {
                    return r;
                }
            }
            assert!(Instant::now() < until, "GET {path} never answered 200");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Reads until the server closes the connection (`Ok(0)` or a reset); `false` if it stays open `within`.
    async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
        let mut buf = [0u8; 64];
        matches!(
            tokio::time::timeout(within, s.read(&mut buf)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }

    #[tokio::test]
    async fn connections_over_the_cap_are_closed_at_once_and_counted() {
        let srv = start(4, Duration::from_secs(60)).await;
        let mut idle = Vec::new();
        for _ in 0..4 {
            idle.push(TcpStream::connect(srv.addr).await.unwrap());
        }
        // Accepted in order: by the time the fifth is accepted the four hold every slot.
        let mut fifth = TcpStream::connect(srv.addr).await.unwrap();
        assert!(
            closed_within(&mut fifth, PROMPT).await,
            "fifth connection left open"
        );
        assert!(srv.metrics.refused.get() >= 1);
        assert_eq!(srv.metrics.open.get(), 4);
        // The idle ones still hold their slots (nothing closed them).
        assert!(!closed_within(&mut idle[0], Duration::from_millis(200)).await);
        drop(idle);
        let r = get_ok(srv.addr, "/healthz").await;
        assert!(r.ends_with("ok\n"), "{r}");
        let peer = get_ok(srv.addr, "/peer").await;
        assert!(peer.contains("127.0.0.1:"), "{peer}");
        srv.stop.send_replace(true);
        tokio::time::timeout(PROMPT, srv.task)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(srv.metrics.open.get(), 0);
    }

    #[tokio::test]
    async fn a_client_that_never_sends_headers_is_closed_after_the_timeout() {
        let timeout = Duration::from_secs(1);
        let srv = start(1, timeout).await;
        let started = Instant::now();
        let mut silent = TcpStream::connect(srv.addr).await.unwrap();
        assert!(closed_within(&mut silent, timeout + PROMPT).await);
        assert!(started.elapsed() >= timeout - Duration::from_millis(100));
        // A client that starts its headers and never finishes them too.
        let mut partial = TcpStream::connect(srv.addr).await.unwrap();
        partial
            .write_all(b"GET /healthz HTTP/1.1\r\nho")
            .await
            .unwrap();
        assert!(closed_within(&mut partial, timeout + PROMPT).await);
        // Its slot is free again.
        get_ok(srv.addr, "/healthz").await;
        assert_eq!(srv.metrics.open.get(), 0);
    }

    #[tokio::test]
    async fn a_slow_reader_gets_a_large_response_in_full() {
        let timeout = Duration::from_secs(1);
        let srv = start(2, timeout).await;
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        s.write_all(b"GET /big HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        // Read slowly for well over the header timeout while the server is still writing.
        let mut out = Vec::new();
        let mut buf = vec![0u8; 16 << 10];
        let slow_until = Instant::now() + timeout * 3;
        while Instant::now() < slow_until {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed during a slow download");
            out.extend_from_slice(&buf[..n]);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(out.len() < BIG, "the whole body fitted in socket buffers");
        tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut out))
            .await
            .unwrap()
            .unwrap();
        let head_end = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert_eq!(out.len() - head_end, BIG);
    }

    #[tokio::test]
    async fn a_client_that_stops_reading_is_closed_after_the_stall_timeout() {
        let stall = Duration::from_secs(1);
        let srv = start_with(HttpBounds {
            max_connections: 1,
            header_read_timeout: Duration::from_secs(60),
            write_stall_timeout: stall,
        })
        .await;
        let mut s = TcpStream::connect(srv.addr).await.unwrap();
        s.write_all(b"GET /big HTTP/1.1\r\nhost: t\r\n\r\n")
            .await
            .unwrap();
        // Read a little (the response started), then nothing: the socket buffers fill and writes block.
        let mut buf = vec![0u8; 4096];
        assert!(s.read(&mut buf).await.unwrap() > 0);
        let started = Instant::now();
        let until = started + stall + PROMPT + PROMPT;
        while srv.metrics.open.get() > 0 {
            assert!(
                Instant::now() < until,
                "a stalled reader kept its connection"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(started.elapsed() >= stall - Duration::from_millis(100));
        // The one slot is free: another client is served.
        get_ok(srv.addr, "/healthz").await;
        // The stalled client never got the whole body.
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(PROMPT, s.read_to_end(&mut rest)).await;
        assert!(rest.len() + buf.len() < BIG);
    }

    #[test]
    fn any_progress_restarts_the_stall_clock() {
        // A writer that is blocked twice, each time for less than the timeout, never times out.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async {
            let (a, mut b) = tokio::io::duplex(8);
            let mut g = StallGuard::new(a, Duration::from_secs(10));
            use tokio::io::AsyncWriteExt as _;
            g.write_all(&[1u8; 8]).await.unwrap();
            let reader = tokio::spawn(async move {
                let mut buf = [0u8; 8];
                for _ in 0..3 {
                    tokio::time::sleep(Duration::from_secs(6)).await;
                    b.read_exact(&mut buf).await.unwrap();
                }
                b
            });
            // Blocked ~6 s each time (buffer full), progress in between: no error.
            g.write_all(&[2u8; 8]).await.unwrap();
            g.write_all(&[3u8; 8]).await.unwrap();
            let _b = reader.await.unwrap();
            // Nobody reads any more: the next blocked write fails after 10 s.
            g.write_all(&[4u8; 8]).await.unwrap();
            let started = tokio::time::Instant::now();
            let err = g.write_all(&[5u8; 8]).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::TimedOut);
            assert_eq!(started.elapsed(), Duration::from_secs(10));
        });
    }

    #[tokio::test]
    async fn shutdown_closes_idle_connections() {
        let srv = start(4, Duration::from_secs(60)).await;
        let mut idle = TcpStream::connect(srv.addr).await.unwrap();
        get_ok(srv.addr, "/healthz").await;
        srv.stop.send_replace(true);
        tokio::time::timeout(PROMPT, srv.task)
            .await
            .unwrap()
            .unwrap();
        assert!(closed_within(&mut idle, PROMPT).await);
        assert_eq!(srv.metrics.open.get(), 0);
    }
}
