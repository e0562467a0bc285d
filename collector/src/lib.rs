//! commwatch collector: receives agents' streams, keeps per-series windows, derives link rates, and exports them.
//!
//! Module map:
//! - [`config`]: [`CollectorConfig`] (defaults, TOML, `validate()`).
//! - [`ingest`]: the gRPC `Ingest` service; [`ingest::domain`] validates wire messages into domain types.
//! - [`store`]: per node, per series bounded windows; counter rates with reset/saturation handling
//!   ([`store::rate`]); read by the exporters (and, later, steps and analysis) through [`Store`].
//! - [`export`]: `/metrics` ([`export::prometheus`], names in [`export::names`]), `/api/v1/nodes` and
//!   `/healthz` ([`export::api`]), the collector's own health ([`export::health`]).
//! - [`persist`]: SQLite persistence and replay at start.
//!
//! Lifecycle: [`start`] binds both listeners and spawns the servers; [`CollectorHandle::shutdown`] stops them
//! gracefully (streams end with `UNAVAILABLE`, pending batches are committed); it is safe to call with nothing
//! connected.

pub mod analysis;
pub mod config;
pub mod export;
pub mod ingest;
pub mod jobs;
pub mod pace;
pub mod persist;
pub mod steps;
pub mod store;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tracing::{error, info, warn};

/// The shared vocabulary the collector's types are written in (links, tiers, severities, finding kinds, jobs).
pub use commwatch_model as model;
pub use config::{CollectorConfig, ConfigError, Limits, TlsConfig};
pub use export::health::IngestStats;
pub use store::{LinkView, NodeView, Store, StoreMemory};

use commwatch_model::clock::unix_now_ns;
use commwatch_proto::v1 as pb;
use export::health::Health;
use ingest::{IngestService, Shared};
use persist::{PersistError, Replay};
use store::{Batch, Hello};

/// How long [`CollectorHandle::shutdown`] waits for streams and the final commit.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Errors starting the collector.
#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr} ({what}): {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Persist(#[from] PersistError),
    #[error("metrics registry: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error(transparent)]
    Analysis(#[from] analysis::history::HistoryError),
    #[error(transparent)]
    Auth(ingest::auth::AuthError),
}

/// A running collector. Dropping it leaves the servers running until the runtime ends; call
/// [`CollectorHandle::shutdown`] to stop them.
pub struct CollectorHandle {
    /// Where agents connect (the bound address: the real port when 0 was asked).
    pub grpc_addr: SocketAddr,
    /// Where `/metrics`, `/api/v1/nodes` and `/healthz` are served.
    pub http_addr: SocketAddr,
    store: Arc<Store>,
    health: Health,
    /// Renders `/metrics` (the store's families and the health registry's).
    exposition: Arc<export::prometheus::Exposition>,
    shutdown_tx: watch::Sender<bool>,
    grpc: JoinHandle<()>,
    http: JoinHandle<()>,
    expiry: JoinHandle<()>,
    analysis: analysis::AnalysisHandle,
    analysis_task: JoinHandle<()>,
    writer: Option<JoinHandle<()>>,
    steps: Arc<steps::StepStore>,
    /// The step engine (`None` when `steps_interval` is 0).
    step_engine: Option<JoinHandle<()>>,
}

/// Asks a running collector to stop (for signal handlers while [`CollectorHandle::wait`] runs elsewhere).
#[derive(Clone)]
pub struct ShutdownTrigger(watch::Sender<bool>);

impl ShutdownTrigger {
    pub fn shutdown(&self) {
        self.0.send_replace(true);
    }
}

impl CollectorHandle {
    /// The analysis engine: findings, their events, job figures, baselines.
    pub fn analysis(&self) -> &analysis::AnalysisHandle {
        &self.analysis
    }

    /// The store (read-only use: analysis, tests, demo).
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Every node's step history (see [`steps`] for the read API).
    pub fn steps(&self) -> &Arc<steps::StepStore> {
        &self.steps
    }

    /// Same data as `GET /api/v1/jobs`.
    pub fn snapshot_jobs(&self) -> Vec<export::jobs::JobView> {
        export::jobs::job_views(&self.store, Some(&self.analysis))
    }

    /// Same data as `GET /api/v1/nodes`.
    pub fn snapshot_nodes(&self) -> Vec<NodeView> {
        export::api::node_views(&self.store)
    }

    /// Ingest counters since start.
    pub fn ingest_stats(&self) -> IngestStats {
        self.health.ingest_stats()
    }

    /// The `/metrics` text, rendered now.
    pub fn render_metrics(&self) -> String {
        self.exposition.render(&self.health).unwrap_or_default()
    }

    /// A trigger that makes [`CollectorHandle::wait`] return after a graceful stop.
    pub fn shutdown_trigger(&self) -> ShutdownTrigger {
        ShutdownTrigger(self.shutdown_tx.clone())
    }

    /// Stops gracefully: no new connections, open streams end with `UNAVAILABLE`, queued batches are committed.
    /// Safe with nothing connected.
    pub async fn shutdown(self) {
        self.shutdown_tx.send_replace(true);
        self.wait().await;
    }

    /// Waits until the collector stops (after [`ShutdownTrigger::shutdown`], or a server failure), then
    /// finishes the persistence writer.
    pub async fn wait(self) {
        let CollectorHandle {
            shutdown_tx,
            mut grpc,
            mut http,
            expiry,
            analysis_task,
            writer,
            step_engine,
            ..
        } = self;
        // Either server ending (error) stops the other too.
        let mut rx = shutdown_tx.subscribe();
        tokio::select! {
            _ = rx.wait_for(|s| *s) => {}
            _ = &mut grpc => { shutdown_tx.send_replace(true); }
            _ = &mut http => { shutdown_tx.send_replace(true); }
        }
        for (name, task) in [("grpc", grpc), ("http", http)] {
            // A server that ended in the select above has been polled to completion: polling it again panics.
            if task.is_finished() {
                continue;
            }
            let abort = task.abort_handle();
            if tokio::time::timeout(SHUTDOWN_GRACE, task).await.is_err() {
                warn!(
                    server = name,
                    "server did not stop within the grace period; aborted"
                );
                abort.abort();
            }
        }
        if let Some(e) = step_engine {
            e.abort();
        }
        expiry.abort();
        analysis_task.abort();
        if let Some(w) = writer {
            let abort = w.abort_handle();
            if tokio::time::timeout(SHUTDOWN_GRACE, w).await.is_err() {
                warn!("persistence writer did not finish within the grace period; aborted");
                abort.abort();
            }
        }
        info!("collector stopped");
    }

    /// Stops at once without flushing anything: what a kill does (tests use it to check recovery). Batches
    /// not yet committed are lost (they were not acked either).
    pub fn abort(self) {
        if let Some(w) = &self.writer {
            w.abort();
        }
        self.grpc.abort();
        self.http.abort();
        self.expiry.abort();
        self.analysis_task.abort();
        if let Some(e) = &self.step_engine {
            e.abort();
        }
        self.shutdown_tx.send_replace(true);
    }
}

async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, CollectorError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| CollectorError::Bind { what, addr, source })
}

/// Replays persisted Hellos and batches into the store (receive order) and restores dedup state.
fn replay(
    store: &Store,
    items: Vec<Replay>,
    seqs: Vec<(String, u64, u64)>,
    health: &Health,
) -> (usize, usize) {
    let mut hellos: std::collections::HashMap<(String, u64), Hello> = Default::default();
    let (mut n_batches, mut n_hellos) = (0usize, 0usize);
    let mut scratch = Vec::new();
    for item in items {
        match item {
            Replay::Hello {
                node,
                instance_id,
                received_unix_ns,
                payload,
            } => {
                let h = match pb::Hello::decode(payload.as_slice())
                    .map_err(|e| e.to_string())
                    .and_then(|h| Hello::try_from(h).map_err(|e| e.to_string()))
                {
                    Ok(h) => h,
                    Err(e) => {
                        health.persist_errors.inc();
                        warn!(node, instance_id, error = %e, "skipping unreadable persisted hello");
                        continue;
                    }
                };
                if let Err(e) = store.hello(&h, received_unix_ns, None) {
                    warn!(node, instance_id, error = %e, "skipping persisted hello");
                    continue;
                }
                n_hellos += 1;
                hellos.insert((node, instance_id), h);
            }
            Replay::Batch {
                node,
                instance_id,
                received_unix_ns,
                payload,
            } => {
                let b = match pb::SampleBatch::decode(payload.as_slice())
                    .map_err(|e| e.to_string())
                    .and_then(|b| Batch::try_from(b).map_err(|e| e.to_string()))
                {
                    Ok(b) => b,
                    Err(e) => {
                        health.persist_errors.inc();
                        warn!(node, instance_id, error = %e, "skipping unreadable persisted batch");
                        continue;
                    }
                };
                let Some(n) = store.node(&node) else { continue };
                if n.lock().instance_id() != instance_id {
                    // Two instances' streams interleaved: make this one's inventory current again.
                    let Some(h) = hellos.get(&(node.clone(), instance_id)) else {
                        continue;
                    };
                    if store.hello(h, received_unix_ns, None).is_err() {
                        continue;
                    }
                }
                let mut n = n.lock();
                match n.apply_batch(&b, received_unix_ns, &mut scratch) {
                    Ok(_) => {
                        n.mark_durable(instance_id, b.seq);
                        n_batches += 1;
                    }
                    Err(e) => {
                        warn!(node, instance_id, seq = b.seq, error = %e, "skipping persisted batch")
                    }
                }
            }
        }
    }
    for (node, instance_id, seq) in seqs {
        if let Some(n) = store.node(&node) {
            n.lock().raise_highest(instance_id, seq);
        }
    }
    (n_hellos, n_batches)
}

/// Restores each node's persisted job list when the node's current instance (after [`replay`]) is the one
/// that sent it. Returns how many were restored.
fn replay_jobs(store: &Store, rows: Vec<persist::PersistedJobs>, health: &Health) -> usize {
    let mut n = 0;
    for row in rows {
        let Some(node) = store.node(&row.node) else {
            continue;
        };
        if node.lock().instance_id() != row.instance_id {
            continue;
        }
        let list = pb::JobInventory::decode(row.payload.as_slice())
            .map_err(|e| e.to_string())
            .and_then(|j| store::JobList::validated(j, store.limits()).map_err(|e| e.to_string()));
        match list {
            Ok(l) => {
                store.set_jobs(&node, l);
                n += 1;
            }
            Err(e) => {
                health.persist_errors.inc();
                warn!(node = row.node, instance_id = row.instance_id, error = %e, "skipping unreadable persisted job list");
            }
        }
    }
    n
}

/// Starts the collector: opens and replays the state directory (if any), binds both listeners (port 0
/// allowed), and spawns the gRPC and HTTP servers and the node-expiry sweep.
pub async fn start(config: CollectorConfig) -> Result<CollectorHandle, CollectorError> {
    // Authentication material first: a bad file fails the start before anything listens.
    let token = match &config.token_file {
        Some(p) => Some(ingest::auth::load_token(p).map_err(CollectorError::Auth)?),
        None => None,
    };
    let api_access = Arc::new(export::access::ApiAccess {
        token: match &config.api_token_file {
            Some(p) => Some(ingest::auth::load_token(p).map_err(CollectorError::Auth)?),
            None => None,
        },
    });
    let server_tls = match &config.tls {
        Some(tls) => Some(ingest::auth::server_tls(tls).map_err(CollectorError::Auth)?),
        None => None,
    };
    config.validate()?;
    let remote_plaintext = config.check_transport()?;
    let health = Health::new()?;
    let store = Arc::new(Store::new(
        config.retention,
        config.node_expiry,
        config.limits.clone(),
    ));
    // The store's families are written by `exposition` itself; their names are registered so that no other
    // collector can take them.
    health
        .registry
        .register(Box::new(export::prometheus::StoreDescs::new()?))?;
    let exposition = Arc::new(export::prometheus::Exposition::new(store.clone()));
    let step_store = Arc::new(steps::StepStore::new());
    health
        .registry
        .register(Box::new(export::steps::StepCollector::new(
            step_store.clone(),
        )?))?;

    let mut persist = None;
    let mut writer = None;
    if let Some(dir) = &config.state_dir {
        let dir = dir.clone();
        let retention = config.retention;
        let loaded = tokio::task::spawn_blocking(move || {
            let (conn, path) = persist::open(&dir)?;
            let (items, seqs) = persist::load(&conn, &path, retention)?;
            let jobs = persist::load_jobs(&conn, &path)?;
            Ok::<_, PersistError>((conn, path, items, seqs, jobs))
        })
        .await
        .map_err(|e| {
            CollectorError::Persist(PersistError::CreateDir {
                path: config.state_dir.clone().unwrap_or_default(),
                source: std::io::Error::other(e.to_string()),
            })
        })??;
        let (conn, path, items, seqs, jobs) = loaded;
        let (h, b) = replay(&store, items, seqs, &health);
        let j = replay_jobs(&store, jobs, &health);
        info!(path = %path.display(), hellos = h, batches = b, job_lists = j, "replayed persisted state");
        let (handle, task) = persist::spawn_writer(conn, path, config.retention, health.clone());
        persist = Some(handle);
        writer = Some(task);
    }

    let grpc_listener = bind("grpc", config.grpc_listen).await?;
    let http_listener = bind("http", config.http_listen).await?;
    let grpc_addr = grpc_listener
        .local_addr()
        .map_err(|source| CollectorError::Bind {
            what: "grpc",
            addr: config.grpc_listen,
            source,
        })?;
    let http_addr = http_listener
        .local_addr()
        .map_err(|source| CollectorError::Bind {
            what: "http",
            addr: config.http_listen,
            source,
        })?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);

    let shared = Arc::new(Shared {
        store: store.clone(),
        health: health.clone(),
        persist,
        config: config.clone(),
        next_conn: AtomicU64::new(1),
        shutdown: shutdown_rx.clone(),
    });
    let service = tonic::service::interceptor::InterceptedService::new(
        pb::ingest_server::IngestServer::new(IngestService::new(shared))
            .max_decoding_message_size(config.limits.max_batch_bytes),
        {
            let health = health.clone();
            move |req: tonic::Request<()>| match &token {
                Some(t) => match ingest::auth::check_token(t, &req) {
                    Ok(()) => Ok(req),
                    Err(status) => {
                        // Counted, logged at debug only: a flood of bad tokens must not flood the log.
                        health
                            .rejected_streams
                            .with_label_values(&["unauthenticated"])
                            .inc();
                        tracing::debug!(peer = ?req.remote_addr(), "agent stream without the right bearer token refused");
                        Err(status)
                    }
                },
                None => Ok(req),
            }
        },
    );
    let mut builder = tonic::transport::Server::builder();
    match server_tls {
        Some(tls) => {
            builder = builder
                .tls_config(tls)
                .map_err(|e| CollectorError::Auth(ingest::auth::AuthError::Tls(e.to_string())))?;
        }
        None if remote_plaintext => {
            warn!(grpc_listen = %config.grpc_listen, "gRPC ingest in plain text on a non-loopback address, allowed by allow_plaintext: agents' data and tokens cross the network readable; configure [tls] (and client_ca_file for mutual TLS)");
        }
        None => {}
    }
    let mut stop = shutdown_rx.clone();
    let grpc = tokio::spawn(async move {
        let result = builder
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .add_service(service)
            .serve_with_incoming_shutdown(TcpListenerStream::new(grpc_listener), async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = result {
            error!(error = %e, "gRPC server failed");
        }
    });
    let stop = shutdown_rx.clone();
    let router = export::api::router(export::api::HttpState {
        store: store.clone(),
        health: health.clone(),
        exposition: exposition.clone(),
    })
    .merge(export::steps::router(step_store.clone()));
    let analysis = analysis::AnalysisHandle::open(
        store.clone(),
        step_store.clone(),
        analysis::AnalysisConfig {
            state_dir: config.state_dir.clone(),
            ..Default::default()
        },
    )
    .await?;
    let analysis_task = tokio::spawn(analysis.clone().run());
    health
        .registry
        .register(Box::new(export::findings::FindingsCollector::new(
            analysis.clone(),
        )?))?;
    let router = router.merge(export::findings::router(analysis.clone()));
    health
        .registry
        .register(Box::new(export::jobs::JobsCollector::new(store.clone())?))?;
    let router = router.merge(export::jobs::router(store.clone(), analysis.clone()));
    let router = router.layer(axum::middleware::from_fn_with_state(
        api_access,
        export::access::guard,
    ));
    let http = tokio::spawn(commwatch_httpd::serve(
        http_listener,
        router,
        commwatch_httpd::HttpBounds::new(config.limits.max_http_connections),
        commwatch_httpd::ConnectionMetrics {
            open: health.http_connections.clone(),
            refused: health.http_connections_refused.clone(),
        },
        stop,
    ));
    let sweep_store = store.clone();
    let sweep_health = health.clone();
    let every = (config.node_expiry / 4).clamp(Duration::from_millis(25), Duration::from_secs(1));
    let expiry = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let n = sweep_store.expire(unix_now_ns());
            if n > 0 {
                sweep_health.expired_nodes.inc_by(n as u64);
                info!(nodes = n, "expired stale nodes");
            }
        }
    });
    let step_engine = (!config.steps_interval.is_zero())
        .then(|| steps::engine::spawn(store.clone(), step_store.clone(), config.steps_interval));
    info!(%grpc_addr, %http_addr, state_dir = ?config.state_dir, "collector listening");
    Ok(CollectorHandle {
        grpc_addr,
        http_addr,
        store,
        health,
        exposition,
        shutdown_tx,
        grpc,
        http,
        expiry,
        analysis,
        analysis_task,
        writer,
        steps: step_store,
        step_engine,
    })
}
