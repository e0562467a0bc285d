//! commwatch collector: receives the agents' streams, keeps each series' recent window, finds the training steps
//! and what slows them, and exports all of it.
//!
//! # Module map, in flow order
//! Data flows down this list; a module reads only from those above it (`scripts/modcycles.py` checks it).
//! - [`config`], [`pace`]: the settings ([`CollectorConfig`]: defaults, TOML, `validate()`) and the pacing of
//!   the periodic passes over the fleet.
//! - [`store`]: per node, its inventory, job list and bounded per-series windows (rings), counter rates with
//!   reset and saturation handling; everything below reads it through [`Store`].
//! - [`telemetry`]: the collector's own health registry and counters, which every stage writes.
//! - [`ingest`]: the gRPC `Ingest` service — wire messages validated at the edge ([`ingest::domain`]), agents
//!   authenticated ([`ingest::auth`]), one stream task per agent applying to the store and acking once durable.
//! - [`persist`]: SQLite persistence of what ingest accepted, and its replay into the store at start.
//! - [`steps`]: the step engine — training steps from markers or inferred from traffic, with per-link figures —
//!   and the [`steps::StepStore`] history it owns.
//! - [`jobs`]: the nodes' job lists merged into fleet jobs.
//! - [`collectives`]: NCCL Inspector records aligned by communicator and sequence number, per job, with their
//!   per-collective figures.
//! - [`analysis`]: the rules over the store's windows, the steps and the jobs; findings with hysteresis, their
//!   history and the baselines.
//! - [`export`]: `/metrics`, the JSON API (nodes, steps, jobs, findings, baselines) and `/healthz`.
//! - [`remote_write`]: the families of `/metrics` sent to a Prometheus remote-write receiver (`[remote_write]`).
//! - [`lifecycle`]: the stop signal and the task set; this file wires the stages together.
//! - `measure` (tests only): in-process measurements that drive the store and the stages above it, kept out
//!   of every stage so that none of them reaches forward.
//!
//! # Lifecycle
//! [`start`] binds both listeners and calls [`run`]. `run` loads and checks everything that can fail (auth
//! material, configuration, persisted state replayed into the store, analysis history, metric registrations),
//! then starts the tasks in flow order: persistence writer, gRPC ingest server, step engine, analysis,
//! node-expiry sweep, HTTP server. One signal stops them all — the `shutdown` future given to [`run`]
//! resolving, [`CollectorHandle::shutdown`], or a server failing — and they are awaited in reverse order:
//! the HTTP server drains, the periodic tasks are dropped, open agent streams end with `UNAVAILABLE`, and the
//! writer, last, commits what is queued. Stopping is safe with nothing connected. [`CollectorHandle::abort`]
//! stops everything at once without committing (what a kill does).

pub mod analysis;
pub mod collectives;
pub mod config;
pub mod export;
pub mod ingest;
pub mod jobs;
pub mod lifecycle;
pub mod pace;
pub mod persist;
pub mod probes;
pub mod remote_write;
pub mod steps;
pub mod store;
pub mod telemetry;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tracing::{info, warn};

/// The shared vocabulary the collector's types are written in (links, tiers, severities, finding kinds, jobs).
pub use commwatch_model as model;
pub use config::{CollectorConfig, ConfigError, Limits, TlsConfig};
pub use export::nodes::{LinkView, NodeView};
pub use lifecycle::SHUTDOWN_GRACE;
pub use store::{Store, StoreMemory};
pub use telemetry::IngestStats;

use commwatch_model::clock::unix_now_ns;
use lifecycle::{Shutdown, Tasks};
use persist::PersistError;
use telemetry::Health;

/// Errors starting the collector. Each message says its cause once: none is repeated as a `source()`, so a
/// printed chain (`{e:#}`) never reads `X: X`.
#[derive(Debug, thiserror::Error)]
pub enum CollectorError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr} ({what}): {error}{}", busy_hint(what, error))]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error(transparent)]
    Persist(#[from] PersistError),
    #[error("metrics registry: {0}")]
    Metrics(prometheus::Error),
    #[error("{0}")]
    Analysis(analysis::history::HistoryError),
    #[error(transparent)]
    Auth(ingest::auth::AuthError),
    #[error(transparent)]
    RemoteWrite(#[from] remote_write::RemoteWriteError),
}

/// For a port in use: which flag picks another (`--grpc-listen`, `--http-listen`); nothing otherwise.
fn busy_hint(what: &str, error: &std::io::Error) -> String {
    if error.kind() != std::io::ErrorKind::AddrInUse {
        return String::new();
    }
    let flag = if what == "grpc" {
        "--grpc-listen"
    } else {
        "--http-listen"
    };
    format!(" (another process has this port: stop it, or choose another with {flag} HOST:PORT)")
}

impl From<prometheus::Error> for CollectorError {
    fn from(e: prometheus::Error) -> Self {
        CollectorError::Metrics(e)
    }
}

impl From<analysis::history::HistoryError> for CollectorError {
    fn from(e: analysis::history::HistoryError) -> Self {
        CollectorError::Analysis(e)
    }
}

/// The collector's two listeners, bound.
pub struct Listeners {
    /// Where agents connect (`grpc_listen`).
    pub grpc: TcpListener,
    /// Where `/metrics`, the API and `/healthz` are served (`http_listen`).
    pub http: TcpListener,
}

impl Listeners {
    /// Binds `grpc_listen` and `http_listen` (port 0 allowed).
    pub async fn bind(config: &CollectorConfig) -> Result<Listeners, CollectorError> {
        Ok(Listeners {
            grpc: bind("grpc", config.grpc_listen).await?,
            http: bind("http", config.http_listen).await?,
        })
    }
}

/// Connections a listener holds that the collector has not yet accepted (the kernel caps it at
/// `net.core.somaxconn`, 4,096 by default). A fleet's agents connect at once when a collector starts or
/// restarts: with tokio's 1,024, 2,000 demo nodes connecting to a collector on one busy core overflowed the
/// queue (15,190 overflows in one start), the kernel dropped their handshakes unanswered, and the connects of
/// hundreds of agents ran past a 10 s timeout (the collector counted nothing: it never saw them).
pub const LISTEN_BACKLOG: u32 = 8192;

/// Binds `addr` as tokio's `TcpListener::bind` does (`SO_REUSEADDR`, a socket of the address' family), with a
/// queue of [`LISTEN_BACKLOG`].
async fn bind(what: &'static str, addr: SocketAddr) -> Result<TcpListener, CollectorError> {
    let listen = || {
        let socket = match addr {
            SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
            SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
        };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(LISTEN_BACKLOG)
    };
    listen().map_err(|error| CollectorError::Bind { what, addr, error })
}

fn local_addr(
    what: &'static str,
    listener: &TcpListener,
    asked: SocketAddr,
) -> Result<SocketAddr, CollectorError> {
    listener.local_addr().map_err(|error| CollectorError::Bind {
        what,
        addr: asked,
        error,
    })
}

/// A running collector. Dropping it leaves the tasks running until the runtime ends; call
/// [`CollectorHandle::shutdown`] to stop them.
pub struct CollectorHandle {
    /// Where agents connect (the bound address: the real port when 0 was asked).
    pub grpc_addr: SocketAddr,
    /// Where `/metrics`, the API and `/healthz` are served.
    pub http_addr: SocketAddr,
    store: Arc<Store>,
    health: Health,
    /// Renders `/metrics` (the store's families and the health registry's).
    exposition: Arc<export::prometheus::Exposition>,
    analysis: analysis::AnalysisHandle,
    steps: Arc<steps::StepStore>,
    shutdown: Shutdown,
    tasks: Tasks,
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

    /// Stops gracefully: no new connections, open streams end with `UNAVAILABLE`, queued batches are committed.
    /// Safe with nothing connected.
    pub async fn shutdown(self) {
        self.shutdown.trigger();
        self.wait().await;
    }

    /// Waits until the collector has stopped: after the `shutdown` future given to [`run`] resolved, or a
    /// server failed.
    pub async fn wait(self) {
        self.tasks.wait().await;
        info!("collector stopped");
    }

    /// Stops at once without flushing anything: what a kill does (tests use it to check recovery). Batches
    /// not yet committed are lost (they were not acked either).
    pub fn abort(self) {
        self.tasks.abort();
    }
}

/// Starts the collector: binds both listeners (port 0 allowed) and [`run`]s it until
/// [`CollectorHandle::shutdown`].
pub async fn start(config: CollectorConfig) -> Result<CollectorHandle, CollectorError> {
    let listeners = Listeners::bind(&config).await?;
    run(listeners, config, std::future::pending()).await
}

/// Runs the collector on bound listeners until `shutdown` resolves (or [`CollectorHandle::shutdown`]): loads
/// and replays what must be ready first, then starts the tasks in flow order (see the crate documentation).
pub async fn run(
    listeners: Listeners,
    config: CollectorConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<CollectorHandle, CollectorError> {
    // Authentication material and the configuration first: a bad file fails before anything is served.
    let (agent_auth, access) = load_auth(&config).map_err(CollectorError::Auth)?;
    config.validate()?;
    let remote_plaintext = config.check_transport()?;
    let grpc_addr = local_addr("grpc", &listeners.grpc, config.grpc_listen)?;
    let http_addr = local_addr("http", &listeners.http, config.http_listen)?;
    let health = Health::new()?;
    telemetry::stage_cpu::register(&health.registry)?;
    let store = Arc::new(Store::new(
        config.retention,
        config.node_expiry,
        config.limits.clone(),
    ));
    let steps = Arc::new(steps::StepStore::with_retention(config.step_retention));
    let signal = Shutdown::new();
    let mut tasks = Tasks::new(signal.clone());

    let persist = open_persistence(&config, &store, &health, &mut tasks).await?;
    let analysis_config = analysis::AnalysisConfig {
        state_dir: config.state_dir.clone(),
        history_retention: analysis::history::Retention {
            max_age: config.findings_retention,
            max_cleared: config.findings_max_cleared,
            max_events: config.findings_max_events,
        },
        history_pruned: Some(analysis::history::pruned_counter(&health.registry)?),
        ..Default::default()
    };
    let analysis = analysis::AnalysisHandle::open(
        store.clone(),
        steps.clone(),
        health.passes.clone(),
        analysis_config,
    )
    .await?;
    // Stored findings and baselines the start could not read were skipped (and logged): count them.
    health.persist_errors.inc_by(analysis.skipped_records());
    let probe_token = config
        .probes
        .token_file
        .as_deref()
        .map(ingest::auth::load_token);
    let probe_token = probe_token.transpose().map_err(CollectorError::Auth)?;
    let prober = probes::Prober::new(config.probes.clone(), probe_token.map(|t| t.to_string()));
    analysis.use_probes(prober.book.clone());
    let (router, exposition) = export::api::app(export::api::Sources {
        store: store.clone(),
        health: health.clone(),
        steps: steps.clone(),
        analysis: analysis.clone(),
        // Refused tokens counted in this collector's registry (created after the files were read).
        access: Arc::new(export::access::ApiAccess {
            failures: export::access::AuthFailures::new(&health),
            ..(*access).clone()
        }),
        nvlink_detail: config.nvlink_detail,
        counter_detail: config.counter_detail,
        cpu_detail: config.cpu_detail,
        gpu_detail: config.gpu_detail,
        prober: prober.clone(),
        export_share: config.export_share,
    })?;
    let mut shared = ingest::Shared::new(
        store.clone(),
        health.clone(),
        persist,
        config.clone(),
        signal.subscribe(),
    );
    shared.probe_adverts = prober.adverts.clone();
    let grpc = ingest::server(shared, agent_auth, remote_plaintext, listeners.grpc);

    tasks.spawn_server("grpc", grpc);
    if !config.steps_interval.is_zero() {
        let passes = health.passes.clone();
        let engine = steps::engine::run(
            steps::engine::Engine::new(store.clone(), steps.clone(), passes)
                .with_nvlink_detail(config.nvlink_detail),
            config.steps_interval,
            config.steps_share,
        );
        tasks.spawn_loop("step engine", engine);
    }
    tasks.spawn_loop("analysis", analysis.clone().run(config.analysis_share));
    let live = store.clone();
    let matrix = prober.run_matrix(move || live.node_names(unix_now_ns()), signal.subscribe());
    tasks.spawn_loop("probe matrix", matrix);
    let sweep = expire_nodes(store.clone(), health.clone(), config.node_expiry);
    tasks.spawn_loop("node expiry", sweep);
    let http = export::api::server(
        listeners.http,
        router,
        config.limits.max_http_connections,
        &health,
        signal.subscribe(),
    );
    tasks.spawn_server("http", http);
    let gather = Arc::new(remote_write::ExpositionSource {
        exposition: exposition.clone(),
        health: health.clone(),
    });
    let sender = remote_write::start(
        &config.remote_write,
        gather,
        &health,
        signal.subscribe(),
        config.export_share,
    )?;
    if let Some(task) = sender {
        tasks.adopt("remote write", task);
    }
    let on_signal = signal.clone();
    tasks.spawn_loop("shutdown signal", async move {
        shutdown.await;
        on_signal.trigger();
    });
    if !http_addr.ip().is_loopback() {
        warn!(%http_addr, api_token = config.api_token_file.is_some(),
            "the HTTP listener is not on a loopback address: /metrics, /healthz and the API's reads answer anyone \
             who can reach it (with api_token_file, /api needs the token); bind 127.0.0.1 behind a proxy unless \
             scrapers elsewhere need it");
    }
    info!(%grpc_addr, %http_addr, state_dir = ?config.state_dir, "collector listening");
    Ok(CollectorHandle {
        grpc_addr,
        http_addr,
        store,
        health,
        exposition,
        analysis,
        steps,
        shutdown: signal,
        tasks,
    })
}

/// Reads what agents and API clients must present: the agents' token and TLS material, the API token.
fn load_auth(
    config: &CollectorConfig,
) -> Result<(ingest::auth::AgentAuth, Arc<export::access::ApiAccess>), ingest::auth::AuthError> {
    let agent_auth = ingest::auth::AgentAuth::load(config)?;
    let path = config.api_token_file.as_deref();
    let token = path.map(ingest::auth::load_token).transpose()?;
    if let Some(w) = path.and_then(|p| ingest::auth::exposure_warning("API token file", p)) {
        warn!("{w}");
    }
    Ok((
        agent_auth,
        Arc::new(export::access::ApiAccess {
            token,
            secure_cookie: config.secure_cookie,
            trusted_proxies: config.trusted_proxies.clone(),
            ..Default::default()
        }),
    ))
}

/// With a state directory: replays it into the store and starts the writer (the first task). `None` without.
async fn open_persistence(
    config: &CollectorConfig,
    store: &Store,
    health: &Health,
    tasks: &mut Tasks,
) -> Result<Option<persist::PersistHandle>, PersistError> {
    let Some(dir) = &config.state_dir else {
        return Ok(None);
    };
    let (handle, writer) = persist::open_and_replay(dir, config.retention, store, health).await?;
    tasks.adopt("persistence writer", writer);
    Ok(Some(handle))
}

/// Removes the nodes not seen within `node_expiry` (counted in the health registry), every quarter of it
/// (25 ms to 1 s), so that a node is gone at most a quarter late.
async fn expire_nodes(store: Arc<Store>, health: Health, node_expiry: Duration) {
    let every = (node_expiry / 4).clamp(Duration::from_millis(25), Duration::from_secs(1));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let n = store.expire(unix_now_ns());
        if n > 0 {
            health.expired_nodes.inc_by(n as u64);
            info!(nodes = n, "expired stale nodes");
        }
    }
}

#[cfg(test)]
mod measure;

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    /// Every error of `e`'s chain whose message already holds its `source()`'s message (`X: X` when printed).
    fn repeated_causes(e: &(dyn Error + 'static)) -> Vec<String> {
        let mut out = Vec::new();
        let mut cur = Some(e);
        while let Some(err) = cur {
            if let Some(src) = err.source() {
                if err.to_string().contains(&src.to_string()) {
                    out.push(format!("{err} ← {src}"));
                }
            }
            cur = err.source();
        }
        out
    }

    #[tokio::test]
    async fn a_bound_listener_accepts_and_holds_its_port() {
        let listener = bind("grpc", "127.0.0.1:0".parse().unwrap())
            .await
            .expect("binds");
        let addr = listener.local_addr().expect("address");
        let client = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connects");
        let (_, peer) = listener.accept().await.expect("accepts");
        assert_eq!(Some(peer), client.local_addr().ok());
        match bind("grpc", addr).await {
            Err(CollectorError::Bind { error, .. }) => {
                assert_eq!(error.kind(), std::io::ErrorKind::AddrInUse)
            }
            other => panic!("a second listener on {addr}: {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn a_busy_port_names_the_flag_that_picks_another() {
        let busy = CollectorError::Bind {
            what: "http",
            addr: "127.0.0.1:9470".parse().unwrap(),
            error: std::io::Error::from(std::io::ErrorKind::AddrInUse),
        };
        let text = busy.to_string();
        assert!(
            text.starts_with("cannot listen on 127.0.0.1:9470 (http): "),
            "{text}"
        );
        assert!(
            text.ends_with("(another process has this port: stop it, or choose another with --http-listen HOST:PORT)"),
            "{text}"
        );
        let denied = CollectorError::Bind {
            what: "grpc",
            addr: "127.0.0.1:1".parse().unwrap(),
            error: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        };
        assert!(!denied.to_string().contains("--grpc-listen"));
    }

    #[test]
    fn no_start_error_says_its_cause_twice() {
        let io = || std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let missing = std::path::Path::new("/nonexistent/commwatch/token");
        let errors: Vec<CollectorError> = vec![
            CollectorError::Bind {
                what: "grpc",
                addr: "127.0.0.1:1".parse().unwrap(),
                error: io(),
            },
            CollectorError::Persist(PersistError::CreateDir {
                path: missing.into(),
                error: io(),
            }),
            CollectorError::Persist(PersistError::Sqlite {
                path: missing.into(),
                error: rusqlite::Error::InvalidQuery,
            }),
            CollectorError::Auth(ingest::auth::load_token(missing).unwrap_err()),
            CollectorError::Auth(ingest::auth::AuthError::from(
                ingest::tls::TlsAcceptor::load(&TlsConfig {
                    cert_file: missing.into(),
                    key_file: missing.into(),
                    client_ca_file: None,
                })
                .unwrap_err(),
            )),
            CollectorError::Config(CollectorConfig::from_file(missing).unwrap_err()),
            CollectorError::from(prometheus::Error::Msg("duplicate".into())),
        ];
        for e in &errors {
            assert_eq!(repeated_causes(e), Vec::<String>::new());
            assert!(!e.to_string().is_empty());
        }
    }
}
