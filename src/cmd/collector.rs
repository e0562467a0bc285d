//! `commwatch collector`: the flags, their merge over the configuration file, and the run.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;

use crate::shutdown_signal;

#[derive(Args, Debug)]
pub struct CollectorArgs {
    /// gRPC address agents connect to (default 127.0.0.1:7070).
    #[arg(long)]
    grpc_listen: Option<SocketAddr>,
    /// HTTP address of /metrics, /api/v1 and /healthz (default 127.0.0.1:9470).
    #[arg(long)]
    http_listen: Option<SocketAddr>,
    /// TOML configuration file; command-line flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Directory for the durable state (SQLite); without it batches are held in memory only.
    #[arg(long)]
    state_dir: Option<PathBuf>,
    /// How long raw samples are kept, e.g. 10m (default 5m).
    #[arg(long, value_parser = humantime::parse_duration)]
    retention: Option<Duration>,
    /// PEM certificate of the collector: serve gRPC over TLS.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM key of the collector's certificate.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// PEM CA for mutual TLS: only agents with a certificate it signed are accepted, as the node it names.
    #[arg(long, requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// File holding the bearer token agents must present.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Send the /metrics families to this Prometheus remote-write receiver (e.g.
    /// http://prometheus:9090/api/v1/write); TLS, credentials, interval and families in [remote_write].
    #[arg(long, value_name = "URL")]
    remote_write_url: Option<String>,
    /// Allow plain-text gRPC on a non-loopback --grpc-listen (without TLS); loopback is always allowed.
    #[arg(long)]
    allow_plaintext: bool,
    /// File holding the bearer token required for /api/* (else reads are open, writes loopback-only).
    #[arg(long)]
    api_token_file: Option<PathBuf>,
    /// NVLink series in /metrics: `gpu` (a GPU's links summed, the default) or `link` (one per NVLink).
    #[arg(long, value_name = "gpu|link")]
    nvlink_detail: Option<commwatch_collector::config::NvlinkDetail>,
    /// Link error/congestion/other counters in /metrics: `family` (a link's counters of a family summed, the
    /// default) or `name` (one per agent counter name, `counter` label).
    #[arg(long, value_name = "family|name")]
    counter_detail: Option<commwatch_collector::config::CounterDetail>,
    /// CPU utilisation in /metrics: `total` (the node's, the default) or `core` (also one per core).
    #[arg(long, value_name = "total|core")]
    cpu_detail: Option<commwatch_collector::config::CpuDetail>,
    /// GPU series in /metrics: `summary` (PCIe maxima as a `max` label, the GPU's NVLink rate from its NVLink
    /// links; the default) or `full` (every GPU family as the agent sends it).
    #[arg(long, value_name = "summary|full")]
    gpu_detail: Option<commwatch_collector::config::GpuDetail>,
}

fn collector_config(a: &CollectorArgs) -> anyhow::Result<commwatch_collector::CollectorConfig> {
    let mut c = match &a.config {
        Some(p) => commwatch_collector::CollectorConfig::from_file(p)?,
        None => commwatch_collector::CollectorConfig::default(),
    };
    if let Some(v) = a.grpc_listen {
        c.grpc_listen = v;
    }
    if let Some(v) = a.http_listen {
        c.http_listen = v;
    }
    if let Some(v) = &a.state_dir {
        c.state_dir = Some(v.clone());
    }
    if let Some(v) = a.retention {
        c.retention = v;
    }
    if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
        c.tls = Some(commwatch_collector::TlsConfig {
            cert_file: cert.clone(),
            key_file: key.clone(),
            client_ca_file: a.tls_client_ca.clone(),
        });
    }
    if let Some(v) = &a.token_file {
        c.token_file = Some(v.clone());
    }
    if let Some(v) = &a.remote_write_url {
        c.remote_write.url = Some(v.clone());
    }
    if let Some(v) = &a.api_token_file {
        c.api_token_file = Some(v.clone());
    }
    c.allow_plaintext |= a.allow_plaintext;
    if let Some(v) = a.nvlink_detail {
        c.nvlink_detail = v;
    }
    if let Some(v) = a.counter_detail {
        c.counter_detail = v;
    }
    if let Some(v) = a.cpu_detail {
        c.cpu_detail = v;
    }
    if let Some(v) = a.gpu_detail {
        c.gpu_detail = v;
    }
    c.validate()?;
    Ok(c)
}

/// Runs the collector until Ctrl-C or SIGTERM.
pub async fn run(a: CollectorArgs) -> anyhow::Result<()> {
    let config = collector_config(&a)?;
    let handle = commwatch_collector::start(config)
        .await
        .context("starting the collector")?;
    tracing::info!(grpc = %handle.grpc_addr, http = %handle.http_addr, "collector running");
    shutdown_signal().await;
    tracing::info!("shutting down");
    handle.shutdown().await;
    Ok(())
}
