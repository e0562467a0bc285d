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
//! Files: [`server`] and the tonic service here; one task per stream in `stream.rs` (a `select!` dispatching
//! one method per message kind); agent authentication in [`auth`]; wire → store validation in [`domain`]; the
//! per-stream sample rate limit in [`rate`].

pub mod auth;
pub mod domain;
pub mod rate;
mod stream;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use commwatch_proto::v1 as pb;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::service::interceptor::InterceptedService;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, error, warn};

use crate::config::CollectorConfig;
use crate::persist::PersistHandle;
use crate::store::Store;
use crate::telemetry::Health;
use auth::{AgentAuth, AuthError, TokenCheck};
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
    /// Flips to `true` when the collector shuts down: streams end with `UNAVAILABLE`.
    pub shutdown: watch::Receiver<bool>,
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
            store,
            health,
            persist,
            config,
            next_conn: AtomicU64::new(1),
            shutdown,
        }
    }
}

/// The gRPC ingest server on `listener`, as a future that ends once `shared.shutdown` flips (no new
/// connections; open streams end with `UNAVAILABLE`) or when the server fails (logged). Agents are
/// authenticated by `auth`: TLS when configured, and the bearer token by the [`TokenCheck`] interceptor.
/// `remote_plaintext`: the listener is not loopback and TLS is off (allowed by the configuration; warned).
pub(crate) fn server(
    shared: Shared,
    auth: AgentAuth,
    remote_plaintext: bool,
    listener: TcpListener,
) -> Result<impl Future<Output = ()>, AuthError> {
    let mut stop = shared.shutdown.clone();
    let max_message = shared.config.limits.max_batch_bytes;
    let grpc_listen = shared.config.grpc_listen;
    let check = TokenCheck::new(auth.token, shared.health.clone());
    let service = InterceptedService::new(
        pb::ingest_server::IngestServer::new(IngestService::new(Arc::new(shared)))
            .max_decoding_message_size(max_message),
        check,
    );
    let mut builder = tonic::transport::Server::builder();
    match auth.tls {
        Some(tls) => {
            builder = builder
                .tls_config(tls)
                .map_err(|e| AuthError::Tls(e.to_string()))?;
        }
        None if remote_plaintext => {
            warn!(%grpc_listen, "gRPC ingest in plain text on a non-loopback address, allowed by allow_plaintext: agents' data and tokens cross the network readable; configure [tls] (and client_ca_file for mutual TLS)");
        }
        None => {}
    }
    Ok(async move {
        let result = builder
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .add_service(service)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = result {
            error!(error = %e, "gRPC server failed");
        }
    })
}

/// The tonic service.
pub struct IngestService {
    shared: Arc<Shared>,
}

impl IngestService {
    pub(crate) fn new(shared: Arc<Shared>) -> IngestService {
        IngestService { shared }
    }
}

#[tonic::async_trait]
impl pb::ingest_server::Ingest for IngestService {
    type StreamStream = ReceiverStream<Result<pb::CollectorMessage, Status>>;

    async fn stream(
        &self,
        request: Request<Streaming<pb::AgentMessage>>,
    ) -> Result<Response<Self::StreamStream>, Status> {
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
                    let _ = tx.send(Err(e.to_status())).await;
                }
                End::Status(status) => {
                    let _ = tx.send(Err(status)).await;
                }
            }
            shared.health.streams.dec();
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
