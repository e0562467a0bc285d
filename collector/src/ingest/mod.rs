//! gRPC ingest: the `commwatch.v1.Ingest/Stream` server.
//!
//! Per stream: the first message must be a `Hello` (else `INVALID_ARGUMENT`); the collector answers at once with
//! an `Ack` carrying the highest sequence number already held durably for that `(node, instance_id)` (0 if none)
//! and a `Config` when periods are configured. Batches are validated at the edge ([`domain`]), deduplicated by
//! sequence number (a resend is acked, not applied again; a gap is accepted and counted), applied to the store
//! under one node lock, then made durable (committed to SQLite when persistence is on, else at once). Acks are
//! coalesced: at most one per [`ACK_INTERVAL`] per stream, sent within that interval of the batch becoming
//! durable. A malformed message fails that stream only; a newer stream claiming the same node closes the older.
//!
//! Before tonic sees a connection it is admitted by [`connections`]: connection limits per listener and per
//! address, and a deadline on the TLS handshake ([`tls`]) and the HTTP/2 preface.
//!
//! Files: [`server`] here, the service tonic routes to in `service.rs` (the collector's codec: batches keep their
//! bytes as received, for persistence); connection admission in [`connections`], TLS in [`tls`]; one task per
//! stream in `stream.rs` (a `select!` dispatching one method per message kind), its replies and acks in
//! `replies.rs`; agent authentication
//! in [`auth`]; wire → store validation in [`domain`]; the per-stream sample rate limit in [`rate`]; the same
//! validation and store calls without a stream, at a receive time the caller gives, in [`direct`].

pub mod auth;
pub mod connections;
pub mod direct;
pub mod domain;
pub mod rate;
mod replies;
mod service;
mod stream;
pub mod tls;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use commwatch_proto::codec::Received;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Streaming};
use tracing::{debug, error, warn};

use crate::config::CollectorConfig;
use crate::persist::PersistHandle;
use crate::store::Store;
use crate::telemetry::Health;
use auth::{AgentAuth, TokenCheck};
use connections::{ConnTable, Refusal};
use replies::{Replies, Reply};
use stream::{End, StreamTask};

/// Shortest interval between two acks on one stream.
pub const ACK_INTERVAL: Duration = Duration::from_millis(20);

/// State shared by all streams.
pub(crate) struct Shared {
    pub store: Arc<Store>,
    pub health: Health,
    pub persist: Option<PersistHandle>,
    pub config: CollectorConfig,
    pub next_conn: AtomicU64,
    /// The listener's open connections (and the node names each reported as).
    pub conns: Arc<ConnTable>,
    /// Flips to `true` when the collector shuts down: streams end with `UNAVAILABLE`.
    pub shutdown: watch::Receiver<bool>,
    /// The agents' advertised probe addresses (`ProbeAdvert`), read by the prober.
    pub probe_adverts: Arc<crate::probes::ProbeAdverts>,
}

impl Shared {
    pub fn new(
        store: Arc<Store>,
        health: Health,
        persist: Option<PersistHandle>,
        config: CollectorConfig,
        shutdown: watch::Receiver<bool>,
    ) -> Shared {
        Shared {
            conns: ConnTable::new(&config.limits, health.guard.clone()),
            store,
            health,
            persist,
            config,
            next_conn: AtomicU64::new(1),
            shutdown,
            probe_adverts: Arc::new(crate::probes::ProbeAdverts::new(crate::probes::MAX_ADVERTS)),
        }
    }
}

/// The gRPC ingest server on `listener`, as a future that ends once `shared.shutdown` flips (no new
/// connections; open streams end with `UNAVAILABLE`) or when the server fails (logged). Connections are
/// admitted by [`connections`] (limits, handshake deadline, TLS when configured); agents are authenticated by
/// `auth`: TLS, and the bearer token by the [`TokenCheck`] interceptor. `remote_plaintext`: the listener is not
/// loopback and TLS is off (allowed by the configuration; warned).
pub(crate) fn server(
    shared: Shared,
    auth: AgentAuth,
    remote_plaintext: bool,
    listener: TcpListener,
) -> impl Future<Output = ()> {
    let stop = shared.shutdown.clone();
    let limits = shared.config.limits.clone();
    let grpc_listen = shared.config.grpc_listen;
    let table = shared.conns.clone();
    let check = TokenCheck::new(auth.token, shared.health.clone());
    let service = InterceptedService::new(
        service::IngestServer::new(IngestService::new(Arc::new(shared)), limits.max_batch_bytes),
        check,
    );
    if let Some(w) = connections::descriptor_warning(&limits) {
        warn!("{w}");
    }
    let router = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .add_service(service);
    let timeout = limits.grpc_handshake_timeout;
    let signal = {
        let mut stop = stop.clone();
        async move {
            let _ = stop.wait_for(|s| *s).await;
        }
    };
    let serve: Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>> =
        match auth.tls {
            Some(tls) => {
                let handshake = move |tcp| {
                    let tls = tls.clone();
                    async move { tls.accept(tcp).await.map_err(Refusal::Tls) }
                };
                let incoming = connections::incoming(listener, table, timeout, handshake, stop);
                Box::pin(router.serve_with_incoming_shutdown(incoming, signal))
            }
            None => {
                if remote_plaintext {
                    warn!(%grpc_listen, "gRPC ingest in plain text on a non-loopback address, allowed by allow_plaintext: agents' data and tokens cross the network readable; configure [tls] (and client_ca_file for mutual TLS)");
                }
                let handshake = |tcp| async move { Ok::<_, Refusal>(tcp) };
                let incoming = connections::incoming(listener, table, timeout, handshake, stop);
                Box::pin(router.serve_with_incoming_shutdown(incoming, signal))
            }
        };
    async move {
        if let Err(e) = serve.await {
            error!(error = %e, "gRPC server failed");
        }
    }
}

/// The `Ingest` service's one method, served by [`service::IngestServer`].
pub struct IngestService {
    shared: Arc<Shared>,
}

impl IngestService {
    pub(crate) fn new(shared: Arc<Shared>) -> IngestService {
        IngestService { shared }
    }

    /// Whether batches are received with their bytes (persisted as they came): when persistence is on.
    fn keeps_batch_bytes(&self) -> bool {
        self.shared.persist.is_some()
    }

    /// `Ingest/Stream`: starts the stream's task and answers with its reply stream.
    fn stream(&self, request: Request<Streaming<Received>>) -> Response<Replies> {
        let peer = request.remote_addr();
        let identities = auth::identities(&request);
        let inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(16);
        let shared = self.shared.clone();
        tokio::spawn(async move {
            shared.health.streams.inc();
            let conn_id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
            let mut s = StreamTask {
                shared: &shared,
                tx: &tx,
                conn_id,
                node: None,
                node_name: String::new(),
                identities,
                peer,
            };
            let end = s.run(inbound).await;
            if let Some(node) = &s.node {
                shared.store.release(node, conn_id);
            }
            match end {
                End::Closed => debug!(node = %s.node_name, ?peer, "agent stream closed"),
                End::Rejected(e) => {
                    shared
                        .health
                        .rejected_streams
                        .with_label_values(&[e.reason()])
                        .inc();
                    warn!(node = %s.node_name, ?peer, reason = e.reason(), error = %e, "agent stream rejected");
                    let _ = tx.send(Reply::Send(Err(e.to_status()))).await;
                }
                End::Status(status) => {
                    let _ = tx.send(Reply::Send(Err(status))).await;
                }
            }
            shared.health.streams.dec();
        });
        Response::new(replies::replies(rx))
    }
}
