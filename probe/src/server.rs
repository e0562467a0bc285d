//! `probe serve`: accepts probes on a listener, one at a time, after the token, the limits, the node's
//! business and the pacing allow it.
//!
//! Bounds, so that a client without the token costs the host little:
//! - at most [`ServerConfig::max_connections`] connections at once, through the project's one connection cap
//!   ([`commwatch_httpd::ConnectionCap`]); one accepted beyond it is closed at once and counted
//!   ([`ServerMetrics::connections`]);
//! - the whole `hello` must arrive within [`ServerConfig::handshake_timeout`] of the connection (counted in
//!   [`ServerMetrics::handshake_timeouts`]), so a silent or half-sent message frees its slot in seconds;
//! - wrong tokens are throttled per address ([`crate::auth`]) and counted ([`ServerMetrics::auth_failures`]);
//! - an accepted session serves phases for at most its own duration in all, and ends at its duration plus
//!   [`SESSION_SLACK`] whatever the client does;
//! - what a client can repeat at will (refusals, failures, timeouts) is logged at most once per
//!   [`LOG_EVERY`] per kind, with the number held back.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use commwatch_httpd::{ConnectionCap, ConnectionMetrics};
use commwatch_model::throttle::LogThrottle;
use prometheus::IntCounter;
use tokio::net::{TcpListener, TcpStream};

use crate::auth::AuthThrottle;
use crate::busy::BusyCheck;
use crate::conn::{Conn, GRACE};
use crate::error::ProbeError;
use crate::params::{check, Limits, Params};
use crate::transport::{Tcp, Transport};
use crate::wire::{Message, QpInfo, Refusal, TransportKind, PROTOCOL_VERSION};

/// Default of [`ServerConfig::max_connections`]: a probe server serves one probe at a time, so a few
/// connections more are only refusals being said.
pub const DEFAULT_MAX_CONNECTIONS: usize = 32;
/// Default of [`ServerConfig::handshake_timeout`].
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// An accepted session ends at its duration plus this (a relayed one plus twice this: it connects onwards).
pub const SESSION_SLACK: Duration = GRACE;
/// What a client can repeat at will is logged at most once per this, per kind.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// A probe server's settings.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The token clients must present; `None` accepts any (only sensible on a private network).
    pub token: Option<String>,
    pub limits: Limits,
    /// RDMA device to answer RDMA probes on (`None`: the first one found).
    pub rdma_device: Option<String>,
    /// Whether this server probes another one when a client asks it to (`Hello.relay_to`), with its own
    /// token, from `bind`.
    pub relay: bool,
    /// Local address relayed probes leave from (the fabric interface's); `None` lets routing choose.
    pub bind: Option<std::net::IpAddr>,
    /// Most connections held at once; one accepted beyond it is closed at once and counted.
    pub max_connections: usize,
    /// Time a client has, from its connection, to send its whole `hello`.
    pub handshake_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            token: None,
            limits: Limits::default(),
            rdma_device: None,
            relay: false,
            bind: None,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            handshake_timeout: HANDSHAKE_TIMEOUT,
        }
    }
}

/// Counters of a server, for its owner's `/metrics`.
#[derive(Debug, Default)]
pub struct ServerStats {
    pub accepted: AtomicU64,
    pub completed: AtomicU64,
    pub failed: AtomicU64,
    /// Indexed by [`refusal_index`].
    pub refused: [AtomicU64; 6],
}

/// A server's Prometheus metrics (its owner registers them; `probe serve` keeps them unregistered).
#[derive(Debug, Clone)]
pub struct ServerMetrics {
    /// Connections open now, and those closed at accept by the cap.
    pub connections: ConnectionMetrics,
    /// Connections closed because their `hello` did not arrive within the handshake timeout.
    pub handshake_timeouts: IntCounter,
    /// `hello`s refused for their token: wrong, missing, or from an address past its tries.
    pub auth_failures: IntCounter,
}

impl ServerMetrics {
    /// Metrics registered nowhere, named after `prefix` (`commwatch_agent_probe`).
    pub fn unregistered(prefix: &str) -> ServerMetrics {
        let counter = |name: &str, help: &str| {
            IntCounter::new(format!("{prefix}_{name}"), help)
                .unwrap_or_else(|_| IntCounter::new(name, help).expect("a valid metric name"))
        };
        ServerMetrics {
            connections: ConnectionMetrics::unregistered(prefix),
            handshake_timeouts: counter(
                "handshake_timeouts_total",
                "Probe connections closed because their hello did not arrive within the handshake timeout.",
            ),
            auth_failures: counter(
                "auth_failures_total",
                "Probe hellos refused for their token (wrong, missing, or from an address past its tries).",
            ),
        }
    }
}

/// Every refusal, in the order of [`ServerStats::refused`].
pub const REFUSALS: [Refusal; 6] = [
    Refusal::Token,
    Refusal::Limits,
    Refusal::Busy,
    Refusal::Rate,
    Refusal::Transport,
    Refusal::Version,
];

pub fn refusal_index(r: Refusal) -> usize {
    REFUSALS.iter().position(|x| *x == r).unwrap_or(0)
}

#[derive(Debug, Default)]
struct Gate {
    running: bool,
    last_start: Option<Instant>,
}

/// The probe server. Share it in an `Arc`; `serve` runs until `shutdown` resolves.
pub struct Server {
    config: ServerConfig,
    busy: Arc<dyn BusyCheck>,
    gate: Mutex<Gate>,
    auth: AuthThrottle,
    log: LogThrottle,
    pub stats: ServerStats,
    pub metrics: ServerMetrics,
}

/// Releases the one-at-a-time gate when a session ends, however it ends.
struct Running<'a>(&'a Server);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Ok(mut g) = self.0.gate.lock() {
            g.running = false;
        }
    }
}

/// The parts of a `hello` the session needs once admitted.
struct Asked {
    params: Params,
    qp: Option<QpInfo>,
    relay_to: Option<String>,
}

impl Server {
    /// A server whose metrics are registered nowhere.
    pub fn new(config: ServerConfig, busy: Arc<dyn BusyCheck>) -> Arc<Server> {
        Server::with_metrics(config, busy, ServerMetrics::unregistered("commwatch_probe"))
    }

    /// A server counting in `metrics` (registered by the caller).
    pub fn with_metrics(
        config: ServerConfig,
        busy: Arc<dyn BusyCheck>,
        metrics: ServerMetrics,
    ) -> Arc<Server> {
        Arc::new(Server {
            config,
            busy,
            gate: Mutex::new(Gate::default()),
            auth: AuthThrottle::default(),
            log: LogThrottle::new(LOG_EVERY),
            stats: ServerStats::default(),
            metrics,
        })
    }

    /// Accepts connections until `shutdown`, each session on its own task, at most
    /// [`ServerConfig::max_connections`] at once.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let cap = ConnectionCap::new(
            self.config.max_connections,
            self.metrics.connections.clone(),
        );
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                r = listener.accept() => match r {
                    Ok((stream, peer)) => {
                        let Some(slot) = cap.admit() else {
                            self.say("cap", peer, "probe connection refused: connection limit reached");
                            continue;
                        };
                        let me = Arc::clone(&self);
                        tokio::spawn(async move {
                            me.handle(stream, peer).await;
                            drop(slot);
                        });
                    }
                    Err(e) => {
                        if let Some(held) = self.log.allow("accept", Instant::now()) {
                            tracing::warn!(error = %e, held, "probe accept failed");
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
    }

    /// Logs what a client can repeat at will, at most once per [`LOG_EVERY`] per `kind`, with the number
    /// held back since.
    fn say(&self, kind: &'static str, peer: SocketAddr, what: &str) {
        if let Some(held) = self.log.allow(kind, Instant::now()) {
            tracing::warn!(%peer, held, "{what}");
        }
    }

    async fn handle(&self, stream: TcpStream, peer: SocketAddr) {
        let mut conn = Conn::new(stream);
        let within = self.config.handshake_timeout;
        let hello = match tokio::time::timeout(within, conn.recv_message(within)).await {
            Ok(Ok(m)) => m,
            Ok(Err(e)) if !matches!(e, ProbeError::Timeout(_)) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                return self.say("hello", peer, &format!("probe hello unreadable: {e}"));
            }
            // The deadline, whichever of the two waits saw it first.
            Ok(Err(_)) | Err(_) => {
                self.metrics.handshake_timeouts.inc();
                let what = format!("probe connection closed: no whole hello within {within:?}");
                return self.say("handshake", peer, &what);
            }
        };
        match self.session(&mut conn, peer, hello).await {
            Ok(None) => {}
            Ok(Some(kind)) => {
                self.stats.completed.fetch_add(1, Ordering::Relaxed);
                tracing::info!(%peer, transport = kind.as_str(), "probe served");
            }
            Err(e) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                self.say("failed", peer, &format!("probe session failed: {e}"));
            }
        }
    }

    /// One session after its `hello`: `None` when refused, the transport when served. Ends at the probe's
    /// duration plus [`SESSION_SLACK`] (twice that for a relay).
    async fn session(
        &self,
        conn: &mut Conn,
        peer: SocketAddr,
        hello: Message,
    ) -> Result<Option<TransportKind>, ProbeError> {
        let Message::Hello {
            version,
            token,
            transport,
            size_bytes,
            duration_ms,
            qp,
            relay_to,
        } = hello
        else {
            return Err(ProbeError::Protocol(
                "the first message is not `hello`".into(),
            ));
        };
        let params = Params {
            transport,
            size: size_bytes,
            duration: Duration::from_millis(duration_ms),
        };
        let _running = match self.admit(peer.ip(), version, &token, &params) {
            Ok(r) => r,
            Err((reason, detail)) => {
                self.refused(peer, reason, &detail);
                conn.send_message(&Message::Refuse { reason, detail })
                    .await?;
                return Ok(None);
            }
        };
        self.stats.accepted.fetch_add(1, Ordering::Relaxed);
        let slack = if relay_to.is_some() {
            SESSION_SLACK * 2
        } else {
            SESSION_SLACK
        };
        let limit = params.duration + slack;
        let asked = Asked {
            params,
            qp,
            relay_to,
        };
        match tokio::time::timeout(limit, self.serve_asked(conn, asked)).await {
            Ok(r) => r,
            Err(_) => Err(ProbeError::Timeout(limit)),
        }
    }

    /// Counts and logs (throttled) a refusal.
    fn refused(&self, peer: SocketAddr, reason: Refusal, detail: &str) {
        self.stats.refused[refusal_index(reason)].fetch_add(1, Ordering::Relaxed);
        if reason == Refusal::Token {
            self.metrics.auth_failures.inc();
            return self.say("token", peer, &format!("probe token refused: {detail}"));
        }
        if let Some(held) = self.log.allow(reason.as_str(), Instant::now()) {
            tracing::info!(%peer, reason = reason.as_str(), detail, held, "probe declined");
        }
    }

    /// Serves an admitted probe: relays it, or answers it over the transport asked for.
    async fn serve_asked(
        &self,
        conn: &mut Conn,
        asked: Asked,
    ) -> Result<Option<TransportKind>, ProbeError> {
        let Asked {
            params,
            qp,
            relay_to,
        } = asked;
        let transport = params.transport;
        if let Some(to) = relay_to {
            self.relay(conn, to, params).await?;
            return Ok(Some(transport));
        }
        let size = usize::try_from(params.size).unwrap_or(usize::MAX);
        match transport {
            TransportKind::Tcp => self.serve_with(conn, Tcp, None, size, &params).await?,
            TransportKind::Rdma => {
                let t = match crate::rdma::open(self.config.rdma_device.as_deref(), size) {
                    Ok(t) => t,
                    Err(e) => {
                        let detail = e.to_string();
                        conn.send_message(&Message::Refuse {
                            reason: Refusal::Transport,
                            detail,
                        })
                        .await?;
                        return Ok(None);
                    }
                };
                self.serve_with(conn, t, qp, size, &params).await?
            }
        }
        Ok(Some(transport))
    }

    /// Probes `to` for the client and answers with the result (or refuses when relaying is off).
    async fn relay(&self, conn: &mut Conn, to: String, params: Params) -> Result<(), ProbeError> {
        if !self.config.relay {
            let detail = "this server does not relay probes".to_string();
            let reason = Refusal::Transport;
            return conn.send_message(&Message::Refuse { reason, detail }).await;
        }
        let opts = crate::client::ClientOptions {
            target: to,
            bind: self.config.bind,
            token: self.config.token.clone(),
            params,
            device: self.config.rdma_device.clone(),
        };
        let answer = match crate::client::run(&opts).await {
            Ok(r) => Message::Relayed {
                result: serde_json::to_value(&r).ok(),
                error: None,
            },
            Err(e) => Message::Relayed {
                result: None,
                error: Some(e.to_string()),
            },
        };
        conn.send_message(&answer).await
    }

    async fn serve_with<T: Transport>(
        &self,
        conn: &mut Conn,
        mut t: T,
        peer_qp: Option<crate::wire::QpInfo>,
        size: usize,
        params: &Params,
    ) -> Result<(), ProbeError> {
        t.connect(peer_qp.as_ref())?;
        conn.send_message(&Message::Accept { qp: t.local_qp() })
            .await?;
        crate::session::server(conn, &mut t, size, params.duration).await
    }

    /// The checks in order: version, the address's tries, token, limits, the node's business, one at a time
    /// and pacing. A wrong token uses one of `peer`'s tries ([`crate::auth`]).
    fn admit(
        &self,
        peer: IpAddr,
        version: u32,
        token: &str,
        params: &Params,
    ) -> Result<Running<'_>, (Refusal, String)> {
        if version != PROTOCOL_VERSION {
            return Err((
                Refusal::Version,
                format!("protocol version {version}, this server speaks {PROTOCOL_VERSION}"),
            ));
        }
        let now = Instant::now();
        if self.config.token.is_some() {
            if let Err(wait) = self.auth.may_try(peer, now) {
                let detail = format!(
                    "too many wrong tokens from {peer}; the next is compared in {:.1} s",
                    wait.as_secs_f64()
                );
                return Err((Refusal::Token, detail));
            }
        }
        let expected = self.config.token.as_deref();
        if let Err((reason, detail)) = check(expected, token, params, &self.config.limits) {
            if reason == Refusal::Token {
                self.auth.failed(peer, now);
            }
            return Err((reason, detail));
        }
        if let Some(why) = self.busy.busy() {
            return Err((Refusal::Busy, format!("the node's fabric is busy: {why}")));
        }
        let mut g = self
            .gate
            .lock()
            .map_err(|_| (Refusal::Rate, "server state poisoned".to_string()))?;
        if g.running {
            return Err((Refusal::Rate, "another probe is running".into()));
        }
        let min = self.config.limits.min_interval;
        if let Some(last) = g.last_start.filter(|l| l.elapsed() < min) {
            return Err((
                Refusal::Rate,
                format!(
                    "the last probe started {:.1} s ago; at most one every {:.1} s",
                    last.elapsed().as_secs_f64(),
                    min.as_secs_f64()
                ),
            ));
        }
        g.running = true;
        g.last_start = Some(Instant::now());
        Ok(Running(self))
    }
}
