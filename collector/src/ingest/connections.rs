//! Admission of gRPC connections, before tonic sees them. Every accepted TCP connection must
//! 1. fit the limits: at most `limits.max_grpc_connections` open, and `limits.max_grpc_connections_per_peer` from
//!    one IP address ([`ConnTable::admit`]);
//! 2. finish its handshake — TLS when configured ([`super::tls`]), then the 24-byte HTTP/2 client preface —
//!    within `limits.grpc_handshake_timeout`.
//!
//! A connection that does not is closed and counted in `commwatch_collector_grpc_connections_refused_total{reason}`
//! (failed TLS handshakes also by their own reason), and warned about at most once per [`WARN_EVERY`] per kind.
//! Without this, a client that connects and sends nothing holds a descriptor forever: enough of them starve the
//! process of descriptors and every listener with it.
//!
//! What passes is handed to tonic as an [`Admitted`] connection: the preface read here is replayed first, and
//! its slot in the [`ConnTable`] is released when tonic drops it. The table also remembers which node names
//! each connection reported as ([`ConnTable::claim_node`]), for `limits.max_nodes_per_connection`.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;
use tracing::{debug, warn};

use super::tls::HandshakeFailure;
use crate::config::Limits;
use crate::telemetry::throttle::LogThrottle;
use crate::telemetry::GuardMetrics;

/// What an HTTP/2 client sends first (RFC 9113 §3.4).
pub const HTTP2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// At most one warning per kind (refusal reason, accept failure) per this interval.
pub const WARN_EVERY: Duration = Duration::from_secs(10);
/// Pause after a failed `accept()` (descriptors exhausted): the pending connection stays in the backlog.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Why a connection was closed before any stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    ListenerLimit,
    PeerLimit,
    HandshakeTimeout,
    NotHttp2,
    Tls(HandshakeFailure),
}

impl Refusal {
    /// The `reason` label (one of [`crate::telemetry::GRPC_REFUSE_REASONS`]).
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::ListenerLimit => "listener_limit",
            Refusal::PeerLimit => "peer_limit",
            Refusal::HandshakeTimeout => "handshake_timeout",
            Refusal::NotHttp2 => "not_http2",
            Refusal::Tls(_) => "tls",
        }
    }
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
    /// Node names each open connection reported as (by its peer address, which names one TCP connection).
    nodes: HashMap<SocketAddr, Vec<String>>,
}

/// The gRPC listener's open connections.
#[derive(Debug)]
pub struct ConnTable {
    max_total: usize,
    max_per_peer: usize,
    max_nodes: usize,
    open: Mutex<Open>,
    metrics: GuardMetrics,
    warnings: LogThrottle,
}

/// An admitted connection's place in the [`ConnTable`], given back when dropped.
#[derive(Debug)]
pub struct Slot {
    table: Arc<ConnTable>,
    peer: SocketAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.release(self.peer);
    }
}

impl ConnTable {
    pub fn new(limits: &Limits, metrics: GuardMetrics) -> Arc<ConnTable> {
        Arc::new(ConnTable {
            max_total: limits.max_grpc_connections,
            max_per_peer: limits.max_grpc_connections_per_peer,
            max_nodes: limits.max_nodes_per_connection,
            open: Mutex::new(Open::default()),
            metrics,
            warnings: LogThrottle::new(WARN_EVERY),
        })
    }

    /// Admits a connection from `peer`, or says which limit refuses it (not counted here: see
    /// [`ConnTable::refused`]).
    pub fn admit(self: &Arc<Self>, peer: SocketAddr) -> Result<Slot, Refusal> {
        let mut open = self.open.lock();
        if open.total >= self.max_total {
            return Err(Refusal::ListenerLimit);
        }
        let from_peer = open.per_ip.entry(peer.ip().to_canonical()).or_insert(0);
        if *from_peer >= self.max_per_peer {
            return Err(Refusal::PeerLimit);
        }
        *from_peer += 1;
        open.total += 1;
        open.nodes.insert(peer, Vec::new());
        self.metrics.open.set(open.total as i64);
        Ok(Slot {
            table: self.clone(),
            peer,
        })
    }

    fn release(&self, peer: SocketAddr) {
        let mut open = self.open.lock();
        open.total = open.total.saturating_sub(1);
        let ip = peer.ip().to_canonical();
        if let Some(n) = open.per_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                open.per_ip.remove(&ip);
            }
        }
        open.nodes.remove(&peer);
        self.metrics.open.set(open.total as i64);
    }

    /// Records that the connection from `peer` reports as `node`. `Err(n)`: it already reported as `n` other
    /// names, `limits.max_nodes_per_connection`. A connection this table did not admit is not limited.
    pub fn claim_node(&self, peer: SocketAddr, node: &str) -> Result<(), usize> {
        let mut open = self.open.lock();
        let Some(names) = open.nodes.get_mut(&peer) else {
            return Ok(());
        };
        if names.iter().any(|n| n == node) {
            return Ok(());
        }
        if names.len() >= self.max_nodes {
            return Err(names.len());
        }
        names.push(node.to_string());
        Ok(())
    }

    /// Connections admitted and open now.
    pub fn open(&self) -> usize {
        self.open.lock().total
    }

    /// Counts a refusal and warns about it (throttled; handshake timeouts and non-HTTP/2 bytes — scanners,
    /// idle clients — at debug only).
    pub fn refused(&self, peer: SocketAddr, refusal: &Refusal) {
        let reason = refusal.reason();
        self.metrics.refused.with_label_values(&[reason]).inc();
        let (kind, detail) = match refusal {
            Refusal::Tls(f) => {
                self.metrics
                    .tls_failures
                    .with_label_values(&[f.reason])
                    .inc();
                (f.reason, f.detail.as_str())
            }
            Refusal::HandshakeTimeout | Refusal::NotHttp2 => {
                debug!(%peer, reason, "gRPC connection closed before its handshake completed");
                return;
            }
            Refusal::ListenerLimit | Refusal::PeerLimit => (reason, ""),
        };
        let Some(held) = self.warnings.allow(kind, Instant::now()) else {
            return;
        };
        match refusal {
            Refusal::Tls(f) => warn!(
                %peer, reason = f.reason, error = %detail, similar_since_last = held,
                "TLS handshake with an agent failed; connection closed"
            ),
            _ => warn!(
                %peer, reason, open = self.open(), similar_since_last = held,
                "gRPC connection refused: a connection limit is reached (limits.max_grpc_connections, \
                 limits.max_grpc_connections_per_peer)"
            ),
        }
    }
}

/// A connection that passed admission and its handshake. The HTTP/2 preface read during the handshake is
/// replayed before anything else is read; the connection's [`Slot`] is released when it is dropped.
#[derive(Debug)]
pub struct Admitted<IO> {
    io: IO,
    /// Bytes of [`HTTP2_PREFACE`] already replayed.
    replayed: usize,
    _slot: Slot,
}

impl<IO: AsyncRead + Unpin> AsyncRead for Admitted<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.replayed < HTTP2_PREFACE.len() {
            let rest = &HTTP2_PREFACE[self.replayed..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            self.replayed += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Admitted<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// The connection's own information (peer address, client certificates) is the inner stream's.
impl<IO: Connected> Connected for Admitted<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// Reads the HTTP/2 client preface, failing at the first byte that differs (or at the end of the stream).
pub async fn read_preface<IO: AsyncRead + Unpin>(io: &mut IO) -> Result<(), Refusal> {
    let mut buf = [0u8; HTTP2_PREFACE.len()];
    let mut got = 0;
    while got < buf.len() {
        let n = io
            .read(&mut buf[got..])
            .await
            .map_err(|_| Refusal::NotHttp2)?;
        if n == 0 || buf[got..got + n] != HTTP2_PREFACE[got..got + n] {
            return Err(Refusal::NotHttp2);
        }
        got += n;
    }
    Ok(())
}

/// The connections accepted on `listener` that pass admission and complete `handshake` and the HTTP/2 preface
/// within `timeout`, as a stream for tonic's `serve_with_incoming_shutdown`. Accepting stops when `stop` flips
/// (the listener is closed then); the stream ends once the handshakes in flight are done.
pub fn incoming<IO, F, Fut>(
    listener: TcpListener,
    table: Arc<ConnTable>,
    timeout: Duration,
    handshake: F,
    mut stop: watch::Receiver<bool>,
) -> ReceiverStream<io::Result<Admitted<IO>>>
where
    IO: AsyncRead + Unpin + Send + 'static,
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = Result<IO, Refusal>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                a = listener.accept() => a,
            };
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    accept_failed(&table, &e);
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            };
            let slot = match table.admit(peer) {
                Ok(slot) => slot,
                Err(refusal) => {
                    table.refused(peer, &refusal);
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            let shake = handshake(tcp);
            let (tx, table) = (tx.clone(), table.clone());
            tokio::spawn(async move {
                let done = tokio::time::timeout(timeout, async {
                    let mut io = shake.await?;
                    read_preface(&mut io).await?;
                    Ok(io)
                })
                .await
                .unwrap_or(Err(Refusal::HandshakeTimeout));
                match done {
                    Ok(io) => {
                        let conn = Admitted {
                            io,
                            replayed: 0,
                            _slot: slot,
                        };
                        let _ = tx.send(Ok(conn)).await;
                    }
                    Err(refusal) => table.refused(peer, &refusal),
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

fn accept_failed(table: &ConnTable, e: &io::Error) {
    if let Some(held) = table.warnings.allow("accept", Instant::now()) {
        warn!(error = %e, similar_since_last = held,
            "accepting a gRPC connection failed (file descriptors exhausted? see LimitNOFILE); retrying");
    }
}

/// A warning when the process's descriptor limit cannot hold the connections the limits allow (gRPC and HTTP)
/// plus the files the collector keeps open itself; `None` when it can, or the limit cannot be read.
pub fn descriptor_warning(limits: &Limits) -> Option<String> {
    // The soft RLIMIT_NOFILE (`getrlimit`; "unlimited" reads as the largest value).
    let soft = sysinfo::System::open_files_limit().ok()?;
    descriptor_warning_for(soft, limits)
}

/// [`descriptor_warning`] for a soft open-file limit of `soft` descriptors.
fn descriptor_warning_for(soft: usize, limits: &Limits) -> Option<String> {
    let needed = limits.max_grpc_connections + limits.max_http_connections + FDS_OF_OUR_OWN;
    (soft < needed).then(|| {
        format!(
            "the open-file limit is {soft}, below the {needed} descriptors limits.max_grpc_connections ({}) and \
             limits.max_http_connections ({}) may need with the collector's own {FDS_OF_OUR_OWN}: raise it \
             (LimitNOFILE in the systemd unit, the container runtime's nofile ulimit) or lower the limits",
            limits.max_grpc_connections, limits.max_http_connections
        )
    })
}

/// Descriptors the collector holds besides connections: listeners, SQLite (database, WAL, shared memory, for
/// two connections), the runtime's own, with room to spare.
const FDS_OF_OUR_OWN: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::Health;

    fn table(total: usize, per_peer: usize, nodes: usize) -> (Arc<ConnTable>, Health) {
        let health = Health::new().unwrap();
        let limits = Limits {
            max_grpc_connections: total,
            max_grpc_connections_per_peer: per_peer,
            max_nodes_per_connection: nodes,
            ..Limits::default()
        };
        (ConnTable::new(&limits, health.guard.clone()), health)
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn limits_per_listener_and_per_address_and_slots_give_back() {
        let (t, health) = table(3, 2, 1);
        let a1 = t.admit(addr("10.0.0.1:1000")).unwrap();
        let _a2 = t.admit(addr("10.0.0.1:1001")).unwrap();
        assert_eq!(
            t.admit(addr("10.0.0.1:1002")).unwrap_err(),
            Refusal::PeerLimit
        );
        // The same address written as IPv4-mapped IPv6 is the same peer.
        assert_eq!(
            t.admit(addr("[::ffff:10.0.0.1]:1003")).unwrap_err(),
            Refusal::PeerLimit
        );
        let _b = t.admit(addr("10.0.0.2:1000")).unwrap();
        assert_eq!(
            t.admit(addr("10.0.0.3:1000")).unwrap_err(),
            Refusal::ListenerLimit
        );
        assert_eq!(health.guard.open.get(), 3);
        drop(a1);
        assert_eq!(t.open(), 2);
        assert_eq!(health.guard.open.get(), 2);
        let _a3 = t.admit(addr("10.0.0.1:1004")).unwrap();
    }

    #[test]
    fn node_names_per_connection_are_bounded() {
        let (t, _) = table(10, 10, 2);
        let peer = addr("10.0.0.1:1000");
        let slot = t.admit(peer).unwrap();
        assert_eq!(t.claim_node(peer, "a"), Ok(()));
        assert_eq!(t.claim_node(peer, "a"), Ok(()));
        assert_eq!(t.claim_node(peer, "b"), Ok(()));
        assert_eq!(t.claim_node(peer, "c"), Err(2));
        // Another connection from the same address has its own count.
        let other = addr("10.0.0.1:1001");
        let _s = t.admit(other).unwrap();
        assert_eq!(t.claim_node(other, "c"), Ok(()));
        // A connection gone (and one never admitted) is not limited.
        drop(slot);
        assert_eq!(t.claim_node(peer, "d"), Ok(()));
    }

    #[test]
    fn refusals_are_counted_by_reason() {
        let (t, health) = table(1, 1, 1);
        let peer = addr("10.0.0.1:1000");
        t.refused(peer, &Refusal::HandshakeTimeout);
        t.refused(peer, &Refusal::PeerLimit);
        t.refused(
            peer,
            &Refusal::Tls(HandshakeFailure {
                reason: "unknown_ca",
                detail: "invalid peer certificate: UnknownIssuer".into(),
            }),
        );
        let refused = |r: &str| health.guard.refused.with_label_values(&[r]).get();
        assert_eq!(refused("handshake_timeout"), 1);
        assert_eq!(refused("peer_limit"), 1);
        assert_eq!(refused("tls"), 1);
        let tls = health.guard.tls_failures.with_label_values(&["unknown_ca"]);
        assert_eq!(tls.get(), 1);
    }

    #[tokio::test]
    async fn the_preface_is_checked_byte_by_byte() {
        let (mut client, mut server) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut client, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\nmore")
            .await
            .unwrap();
        assert_eq!(read_preface(&mut server).await, Ok(()));
        let mut rest = [0u8; 4];
        server.read_exact(&mut rest).await.unwrap();
        assert_eq!(&rest, b"more");
        // A wrong first byte fails at once, without waiting for 24 bytes.
        let (mut client, mut server) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut client, b"GET")
            .await
            .unwrap();
        assert_eq!(read_preface(&mut server).await, Err(Refusal::NotHttp2));
        // A peer that closes early.
        let (client, mut server) = tokio::io::duplex(64);
        drop(client);
        assert_eq!(read_preface(&mut server).await, Err(Refusal::NotHttp2));
    }

    #[test]
    fn a_descriptor_limit_below_the_connections_is_warned() {
        let limits = Limits {
            max_grpc_connections: 4096,
            max_http_connections: 64,
            ..Limits::default()
        };
        let w = descriptor_warning_for(1024, &limits).expect("a warning");
        assert!(
            w.starts_with("the open-file limit is 1024, below the 4416 descriptors"),
            "{w}"
        );
        assert_eq!(descriptor_warning_for(4416, &limits), None);
        assert_eq!(descriptor_warning_for(usize::MAX, &limits), None);
        // This process's own limit is readable (Linux), so the check runs.
        assert!(sysinfo::System::open_files_limit().is_ok_and(|n| n > 0));
    }
}
