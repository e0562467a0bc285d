//! `probe serve`: accepts probes on a listener, one at a time, after the token, the limits, the node's
//! business and the pacing allow it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};

use crate::busy::BusyCheck;
use crate::conn::{Conn, GRACE};
use crate::error::ProbeError;
use crate::params::{check, Limits, Params};
use crate::transport::{Tcp, Transport};
use crate::wire::{Message, Refusal, TransportKind, PROTOCOL_VERSION};

/// A probe server's settings.
#[derive(Debug, Clone, Default)]
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
    pub stats: ServerStats,
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

impl Server {
    pub fn new(config: ServerConfig, busy: Arc<dyn BusyCheck>) -> Arc<Server> {
        Arc::new(Server {
            config,
            busy,
            gate: Mutex::new(Gate::default()),
            stats: ServerStats::default(),
        })
    }

    /// Accepts connections until `shutdown`; each session on its own task.
    pub async fn serve(self: Arc<Self>, listener: TcpListener, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                r = listener.accept() => match r {
                    Ok((stream, _)) => {
                        let me = Arc::clone(&self);
                        tokio::spawn(async move { me.handle(stream).await });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "probe accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
            }
        }
    }

    async fn handle(&self, stream: TcpStream) {
        let mut conn = Conn::new(stream);
        let peer = conn.peer();
        let limit = self.config.limits.max_duration * 2 + GRACE * 3;
        let r = match tokio::time::timeout(limit, self.session(&mut conn)).await {
            Ok(r) => r,
            Err(_) => Err(ProbeError::Timeout(limit)),
        };
        match r {
            Ok(None) => {}
            Ok(Some(kind)) => {
                self.stats.completed.fetch_add(1, Ordering::Relaxed);
                tracing::info!(peer, transport = kind.as_str(), "probe served");
            }
            Err(e) => {
                self.stats.failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(peer, error = %e, "probe session failed");
            }
        }
    }

    /// One session: `None` when refused, the transport when served.
    async fn session(&self, conn: &mut Conn) -> Result<Option<TransportKind>, ProbeError> {
        let Message::Hello {
            version,
            token,
            transport,
            size_bytes,
            duration_ms,
            qp,
            relay_to,
        } = conn.recv_message(GRACE).await?
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
        let _running = match self.admit(version, &token, &params) {
            Ok(r) => r,
            Err((reason, detail)) => {
                self.stats.refused[refusal_index(reason)].fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    peer = conn.peer(),
                    reason = reason.as_str(),
                    detail,
                    "probe declined"
                );
                conn.send_message(&Message::Refuse { reason, detail })
                    .await?;
                return Ok(None);
            }
        };
        self.stats.accepted.fetch_add(1, Ordering::Relaxed);
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

    /// The checks in order: version, token, limits, the node's business, one at a time and pacing.
    fn admit(
        &self,
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
        check(
            self.config.token.as_deref(),
            token,
            params,
            &self.config.limits,
        )?;
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
