//! commwatch agent: samples the node's links, GPUs and host, and ships the samples to a collector.
//!
//! Module map, in the order data flows (a module uses only modules listed before it, and the shared
//! vocabulary of `commwatch-model`):
//! - [`telemetry`]: the agent's own health metrics; anything may report to it.
//! - [`nccl`]: a job's `NCCL_*` settings checked against the node's links (a pure function).
//! - [`source`]: the hardware sources, one file each behind the [`source::Source`] contract (InfiniBand and
//!   RoCE ports, network interfaces, host CPU and memory, NVML GPUs and NVLinks, training processes and
//!   their jobs), the pure sysfs parsers, and the explicit list built from plain [`source::SourceSettings`].
//! - [`steps`]: step markers from training loops (loopback UDP and a unix socket) into a bounded queue.
//! - [`inspector`]: NCCL Inspector's dump files of the training processes the `processes` source sees,
//!   followed as they grow; its records ride on the batches.
//! - [`sampler`]: runs the sources on the fast and slow tiers in its own thread, gives links and series
//!   stable agent-local ids, builds columnar batches with the queued step markers, and hands batches and
//!   inventory updates to the shipper.
//! - [`shipper`]: the gRPC stream to the collector, the bounded resend buffer, acks, reconnects with
//!   backoff.
//! - [`probe`]: the probe server answering active probes (off by default), busy from the node's own counters.
//! - [`config`]: defaults, the TOML file, validation; converted here into each part's plain settings.
//! - [`http`]: the agent's own `/metrics` and `/healthz`.
//! - [`coverage`]: what the agent cannot see (roots, absent hardware, interfaces left out), as coded warnings.
//! - [`once`]: `--once`, one JSON document describing what the node shows.
//!
//! This file wires them: [`start`] validates the configuration, discovers the hardware, and starts the
//! marker listeners, the shipper, the sampling thread and `/metrics`.

pub mod config;
pub mod coverage;
pub mod http;
pub mod inspector;
pub mod nccl;
pub mod once;
pub mod probe;
pub mod sampler;
pub mod shipper;
pub mod source;
pub mod steps;
pub mod telemetry;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use commwatch_model::token::read_token_file;
use tokio::sync::{mpsc, watch};

pub use config::AgentConfig;

/// Backends injected instead of the node's own hardware (the simulated cluster's GPUs and host CPU); see
/// [`start_with`].
pub type AgentExtras = source::SourceExtras;

/// Errors that stop the agent from starting. Each message says its cause itself; none also hands it out as
/// `source()`, so a printed chain (`error: {e:#}`) never says a cause twice.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    /// `flag` is the option that chose the address (`--http-listen`, `--probe-listen`): a busy port names it.
    #[error("cannot listen on {addr}: {error}{}", if error.kind() == std::io::ErrorKind::AddrInUse {
        format!(" (another process has this port: stop it, or choose another with {flag} HOST:PORT)")
    } else {
        String::new()
    })]
    Listen {
        flag: &'static str,
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("cannot read {what} {path}: {error}")]
    ReadFile {
        what: &'static str,
        path: std::path::PathBuf,
        error: std::io::Error,
    },
    /// The token file's error says its path and cause.
    #[error("{0}")]
    Token(commwatch_model::token::TokenError),
    #[error("cannot start the sampling thread: {0}")]
    Thread(std::io::Error),
}

impl From<commwatch_model::token::TokenError> for AgentError {
    fn from(e: commwatch_model::token::TokenError) -> Self {
        AgentError::Token(e)
    }
}

/// A running agent. Stop it with [`AgentHandle::shutdown`].
pub struct AgentHandle {
    /// Where the agent's `/metrics` listens.
    pub http_addr: SocketAddr,
    pub metrics: Arc<telemetry::AgentMetrics>,
    /// Where the step-marker listeners are bound.
    pub step_listeners: steps::BoundListeners,
    shutdown: watch::Sender<bool>,
    sampler: Option<sampler::SamplerHandle>,
    shipper: Option<tokio::task::JoinHandle<()>>,
    http: tokio::task::JoinHandle<()>,
}

impl AgentHandle {
    /// Stops sampling, hands the last batch to the shipper, gives the collector up to two seconds to
    /// acknowledge what is in flight, and stops the HTTP server.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.sampler.take() {
            let _ = tokio::task::spawn_blocking(move || s.stop()).await;
        }
        let _ = self.shutdown.send(true);
        if let Some(s) = self.shipper.take() {
            let _ = s.await;
        }
        let _ = (&mut self.http).await;
    }
}

fn read_file(what: &'static str, path: &Path) -> Result<Vec<u8>, AgentError> {
    std::fs::read(path).map_err(|error| AgentError::ReadFile {
        what,
        path: path.to_path_buf(),
        error,
    })
}

/// TLS towards the collector for an `https://` URL: the collector's certificate is verified against the
/// configured CA (else the bundled web PKI roots); a client certificate is presented for mutual TLS.
fn client_tls(
    config: &AgentConfig,
) -> Result<Option<tonic::transport::ClientTlsConfig>, AgentError> {
    let Some(url) = &config.collector else {
        return Ok(None);
    };
    if !shipper::discovery::strip_dns(url.trim_start()).starts_with("https://") {
        return Ok(None);
    }
    let mut tls = tonic::transport::ClientTlsConfig::new();
    tls = match &config.tls.ca_file {
        Some(ca) => tls.ca_certificate(tonic::transport::Certificate::from_pem(read_file(
            "TLS CA", ca,
        )?)),
        None => tls.with_enabled_roots(),
    };
    if let (Some(cert), Some(key)) = (&config.tls.cert_file, &config.tls.key_file) {
        tls = tls.identity(tonic::transport::Identity::from_pem(
            read_file("TLS client certificate", cert)?,
            read_file("TLS client key", key)?,
        ));
    }
    if let Some(name) = &config.tls.server_name {
        tls = tls.domain_name(name.clone());
    }
    Ok(Some(tls))
}

/// The host's boot id from `<procfs-root>/sys/kernel/random/boot_id`, empty when unreadable.
pub fn boot_id(procfs_root: &Path) -> String {
    let procfs = source::FsRoot::new(procfs_root);
    procfs
        .read_trimmed(&procfs.join("sys/kernel/random/boot_id"))
        .unwrap_or_default()
}

/// Resend buffer size that holds `span` of batches at the given series counts and periods.
///
/// A sample costs about 10 bytes on the wire (a 1–2 byte varint id and an 8-byte value), a tick 12 more
/// (timestamp and length), a batch ~32 more. The result is at least 1 MiB.
pub fn buffer_bytes_for(
    fast_series: usize,
    slow_series: usize,
    fast: Duration,
    slow: Duration,
    batch: Duration,
    span: Duration,
) -> usize {
    let per_s = |n: usize, p: Duration| (n as f64 * 10.0 + 12.0) / p.as_secs_f64().max(1e-3);
    let bytes_per_s =
        per_s(fast_series, fast) + per_s(slow_series, slow) + 32.0 / batch.as_secs_f64().max(1e-3);
    ((bytes_per_s * span.as_secs_f64()) as usize).max(1 << 20)
}

/// Starts an agent: sources, sampling thread, shipper (when a collector is configured) and `/metrics`.
pub async fn start(config: AgentConfig) -> Result<AgentHandle, AgentError> {
    start_with(config, AgentExtras::default()).await
}

/// [`start`] with injected backends: a GPU backend for the `nvml` and `processes` sources and a host backend
/// for the `host` source, used instead of NVML and this machine's CPUs.
pub async fn start_with(
    config: AgentConfig,
    extras: AgentExtras,
) -> Result<AgentHandle, AgentError> {
    config.validate()?;
    if config.plaintext_to_remote() {
        // Allowed explicitly (validate refuses it otherwise): say so at every start.
        tracing::warn!(collector = ?config.collector, "plain text to the collector allowed by allow_plaintext: counters, job settings and any token cross the network readable; use https:// with [tls]");
    }
    for w in config.warnings() {
        tracing::warn!(node = %config.node, "{w}");
    }
    coverage::log(
        &config.node,
        &coverage::check_roots_with(&config, extras.host.is_some()),
    );
    let metrics = Arc::new(telemetry::AgentMetrics::new());
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (http_addr, http) = http::serve(config.http_listen, metrics.clone(), shutdown_rx.clone())
        .await
        .map_err(|error| AgentError::Listen {
            flag: "--http-listen",
            addr: config.http_listen,
            error,
        })?;
    let probe_token = config
        .probe
        .token_file
        .as_deref()
        .map(read_token_file)
        .transpose()?;
    if let Some(addr) = config.probe.listen {
        probe::start(
            &config.probe,
            probe_token,
            &config.sysfs_root,
            metrics.probe.clone(),
            shutdown_rx.clone(),
        )
        .await
        .map_err(|error| AgentError::Listen {
            flag: "--probe-listen",
            addr,
            error,
        })?;
    }
    let smp = discover_at_start(&config, extras, &metrics).await?;
    let inv = smp.full_inventory();
    // Said once, at the first start: later discoveries change the inventory, not these.
    let blind = coverage::blindness(
        &config,
        &smp.source_names(),
        &smp.unavailable_sources(),
        &inv,
    );
    let warnings = coverage::check_discovery(&config, &smp.source_names(), &blind, &inv);
    coverage::log(&config.node, &warnings);
    // The health counts the roots' warnings (logged before the sources started) with the discovery's.
    let roots = coverage::check_roots(&config);
    metrics.set_setup_warnings(
        &roots
            .iter()
            .chain(&warnings)
            .map(|w| (w.code, w.level.as_str()))
            .collect::<Vec<_>>(),
    );
    metrics.set_blind(
        &blind
            .iter()
            .map(|b| (b.what, b.code, b.reason.as_str()))
            .collect::<Vec<_>>(),
    );
    let buffer_bytes = resend_buffer_bytes(&config, &inv);
    tracing::info!(
        node = %config.node,
        links = inv.links.len(),
        series = inv.series.len(),
        sources = ?smp.source_names(),
        buffer_bytes,
        "agent started"
    );
    let (markers, step_listeners) = start_markers(&config, &metrics, shutdown_rx.clone()).await;
    let periods = sampler::Periods::new(config.fast_period, config.slow_period);
    // Room for a minute of batches at the default batch period while the shipper is busy.
    let (ev_tx, mut ev_rx) = mpsc::channel(256);
    let shipper = match shipper_settings(&config, buffer_bytes, &blind)? {
        Some(settings) => {
            let sh = shipper::Shipper::new(settings, metrics.clone(), periods.clone(), inv);
            tokio::spawn(sh.run(ev_rx, shutdown_rx))
        }
        // No collector: drain the queue so the sampler never counts hand-off drops.
        None => tokio::spawn(async move { while ev_rx.recv().await.is_some() {} }),
    };
    let feed =
        inspector::feed::InspectorFeed::new(inspector::feed::DEFAULT_CAPACITY, metrics.clone());
    let follower = inspector::Follower::new(
        inspector::FollowerSettings::new(&config.procfs_root),
        metrics.clone(),
    );
    inspector::feed::spawn(&feed, follower, config.batch_period).map_err(AgentError::Thread)?;
    // The follower's thread ends by itself once the sampling loop drops the feed.
    let sampler = sampler::spawn(
        smp,
        periods,
        sampler::LoopSettings {
            batch_period: config.batch_period,
            discover_period: config.discover_period,
            markers: Some(markers),
            inspector: Some(feed),
        },
        ev_tx,
        metrics.clone(),
    )
    .map_err(AgentError::Thread)?;
    Ok(AgentHandle {
        http_addr,
        step_listeners,
        metrics,
        shutdown: shutdown_tx,
        sampler: Some(sampler),
        shipper: Some(shipper),
        http,
    })
}

/// Builds the sources and runs the first discovery (off the async threads: it reads files and calls NVML).
/// What it found goes out in the first `Hello`; later changes travel as updates.
async fn discover_at_start(
    config: &AgentConfig,
    extras: AgentExtras,
    metrics: &Arc<telemetry::AgentMetrics>,
) -> Result<sampler::Sampler, AgentError> {
    let sources = source::build_sources_with(&config.source_settings(), extras);
    let mut smp = sampler::Sampler::new(sources, metrics.clone());
    let mut smp = tokio::task::spawn_blocking(move || {
        smp.discover();
        smp
    })
    .await
    .map_err(|e| AgentError::Thread(std::io::Error::other(e.to_string())))?;
    let _ = smp.take_update();
    Ok(smp)
}

/// The configured resend buffer size, else one that holds [`config::DEFAULT_BUFFER_SPAN`] of batches of
/// the series discovered at start.
fn resend_buffer_bytes(config: &AgentConfig, inv: &commwatch_proto::v1::Inventory) -> usize {
    let fast_n = inv
        .series
        .iter()
        .filter(|s| commwatch_proto::convert::tier(s.tier) == Some(commwatch_model::Tier::Fast))
        .count();
    let slow_n = inv.series.len() - fast_n;
    config.buffer_bytes.unwrap_or_else(|| {
        buffer_bytes_for(
            fast_n,
            slow_n,
            config.fast_period,
            config.slow_period,
            config.batch_period,
            config::DEFAULT_BUFFER_SPAN,
        )
    })
}

/// Binds the step-marker listeners (creating the socket's directory); returns the queue they fill and
/// where they are bound.
async fn start_markers(
    config: &AgentConfig,
    metrics: &telemetry::AgentMetrics,
    shutdown: watch::Receiver<bool>,
) -> (Arc<steps::MarkerQueue>, steps::BoundListeners) {
    let markers = steps::MarkerQueue::new(65_536);
    if let Some(parent) = config.steps_socket.as_ref().and_then(|p| p.parent()) {
        let _ = std::fs::create_dir_all(parent);
    }
    let bound = steps::spawn_listeners(
        &steps::ListenerSettings {
            udp: config.steps_udp,
            unix: config.steps_socket.clone(),
            rate: config.steps_rate,
        },
        markers.clone(),
        steps::MarkerMetrics {
            received: metrics.markers_received.clone(),
            dropped: metrics.markers_dropped.clone(),
        },
        shutdown,
    )
    .await;
    (markers, bound)
}

/// The shipper's settings (TLS files and the token read now); `None` without a collector.
fn shipper_settings(
    config: &AgentConfig,
    buffer_bytes: usize,
    blind: &[coverage::Blindness],
) -> Result<Option<shipper::ShipperSettings>, AgentError> {
    let Some(url) = &config.collector else {
        return Ok(None);
    };
    Ok(Some(shipper::ShipperSettings {
        collector: url.clone(),
        collector_refresh: config.collector_refresh,
        tls_server_name: config.tls.server_name.clone(),
        node: config.node.clone(),
        boot_id: boot_id(&config.procfs_root),
        instance_id: rand::random::<u64>() | 1,
        buffer_bytes,
        ack_timeout: config.ack_timeout,
        shard_retry: config.shard_retry,
        backoff_min: config.backoff_min,
        backoff_max: config.backoff_max,
        connect_timeout: Duration::from_secs(5),
        tls: client_tls(config)?,
        token: match &config.token_file {
            Some(p) => Some(Arc::from(read_token_file(p)?)),
            None => None,
        },
        probe_advert: probe_advert(config.probe.listen),
        blind: blind.iter().map(coverage::Blindness::to_pb).collect(),
    }))
}

/// What the agent advertises as its probe address: `[probe] listen` unless it is loopback (no other node
/// reaches it) or port 0; a wildcard host (`0.0.0.0`) is sent as is, and the collector takes the stream's
/// peer IP for it.
pub(crate) fn probe_advert(listen: Option<std::net::SocketAddr>) -> Option<String> {
    let a = listen?;
    if a.ip().is_loopback() || a.port() == 0 {
        tracing::info!(listen = %a, "probe address not advertised (loopback or port 0)");
        return None;
    }
    Some(a.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error;

    /// Every error of `e`'s chain whose message already holds its `source()`'s message.
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

    #[test]
    fn a_busy_port_names_the_flag_that_picks_another() {
        let busy = AgentError::Listen {
            flag: "--probe-listen",
            addr: "127.0.0.1:9472".parse().unwrap(),
            error: std::io::Error::from(std::io::ErrorKind::AddrInUse),
        };
        assert!(
            busy.to_string()
                .ends_with("(another process has this port: stop it, or choose another with --probe-listen HOST:PORT)"),
            "{busy}"
        );
    }

    #[test]
    fn no_error_of_the_agent_says_its_cause_twice() {
        let io = || std::io::Error::from(std::io::ErrorKind::AddrInUse);
        let missing = std::path::Path::new("/nonexistent/commwatch/token");
        let errors: Vec<Box<dyn Error>> = vec![
            Box::new(AgentError::Listen {
                flag: "--http-listen",
                addr: "127.0.0.1:1".parse().unwrap(),
                error: io(),
            }),
            Box::new(AgentError::ReadFile {
                what: "TLS CA",
                path: missing.into(),
                error: io(),
            }),
            Box::new(AgentError::Thread(io())),
            Box::new(AgentError::from(read_token_file(missing).unwrap_err())),
            Box::new(AgentError::from(
                AgentConfig::from_file(missing).unwrap_err(),
            )),
            Box::new(AgentError::from(config::ConfigError::Parse {
                path: "agent.toml".into(),
                error: toml::from_str::<AgentConfig>("nod = 1").unwrap_err(),
            })),
            Box::new(source::SourceError::Io {
                path: missing.into(),
                error: io(),
            }),
            Box::new(source::gpu_recorded::RecordingError::from(
                serde_json::from_str::<u8>("x").unwrap_err(),
            )),
        ];
        for e in &errors {
            assert_eq!(repeated_causes(e.as_ref()), Vec::<String>::new(), "{e}");
        }
    }
}
