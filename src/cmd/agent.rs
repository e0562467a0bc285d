//! `commwatch agent`: the flags, their merge over the configuration file, and the run (or `--once`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::shutdown_signal;

#[derive(Args, Debug)]
pub struct AgentArgs {
    /// Collector URL, e.g. http://collector:7070. Required unless --once. Several collectors (shards): repeat
    /// the flag or separate the URLs by commas; the agent picks one by rendezvous hashing on its job id.
    #[arg(long, value_delimiter = ',')]
    collector: Vec<String>,
    /// Node name reported to the collector (default: the host name).
    #[arg(long)]
    node: Option<String>,
    /// Root of sysfs; every sysfs path is built from it.
    #[arg(long)]
    sysfs_root: Option<PathBuf>,
    /// Root of procfs.
    #[arg(long)]
    procfs_root: Option<PathBuf>,
    /// Address of the agent's own /metrics (default 127.0.0.1:9471).
    #[arg(long)]
    http_listen: Option<SocketAddr>,
    /// Sample every source once, print one JSON document on stdout, exit.
    #[arg(long)]
    once: bool,
    /// TOML configuration file; command-line flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Fast-tier period (byte counters), e.g. 50ms.
    #[arg(long, value_parser = humantime::parse_duration)]
    fast_period: Option<Duration>,
    /// Slow-tier period (errors, state, host), e.g. 1s.
    #[arg(long, value_parser = humantime::parse_duration)]
    slow_period: Option<Duration>,
    /// Resend buffer size in bytes (default: 10 minutes at the configured rates).
    #[arg(long)]
    buffer_bytes: Option<usize>,
    /// Loopback UDP address for step markers (default 127.0.0.1:9473), or `off`.
    #[arg(long)]
    steps_udp: Option<String>,
    /// Unix datagram socket for step markers (default /run/commwatch/steps.sock), or `off`.
    #[arg(long)]
    steps_socket: Option<String>,
    /// PEM CA that signed the collector's certificate (with an https:// collector URL).
    #[arg(long)]
    tls_ca: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (names this node).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM key of the client certificate.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// File holding the bearer token to present to the collector.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Allow an http:// (plain text) collector on another host; loopback is always allowed.
    #[arg(long)]
    allow_plaintext: bool,
    /// Answer active probes on this address (the fabric interface's); off unless set.
    #[arg(long, value_name = "HOST:PORT", requires = "probe_token_file")]
    probe_listen: Option<std::net::SocketAddr>,
    /// File holding the token probers must present.
    #[arg(long, value_name = "F")]
    probe_token_file: Option<PathBuf>,
    /// NVLink byte counters: `gpu`, per GPU at the fast rate and per link at the slow rate (the default);
    /// `link`, every link at the fast rate.
    #[arg(long, value_name = "gpu|link")]
    nvlink_bytes: Option<commwatch_agent::source::nvml::NvlinkBytes>,
}

fn agent_config(a: &AgentArgs) -> anyhow::Result<commwatch_agent::AgentConfig> {
    let mut c = match &a.config {
        Some(p) => commwatch_agent::AgentConfig::from_file(p)?,
        None => commwatch_agent::AgentConfig::default(),
    };
    if !a.collector.is_empty() {
        c.collector = Some(a.collector.join(","));
    }
    if let Some(v) = &a.node {
        c.node = v.clone();
    }
    if let Some(v) = &a.sysfs_root {
        c.sysfs_root = v.clone();
    }
    if let Some(v) = &a.procfs_root {
        c.procfs_root = v.clone();
    }
    if let Some(v) = a.http_listen {
        c.http_listen = v;
    }
    if let Some(v) = a.fast_period {
        c.fast_period = v;
    }
    if let Some(v) = a.slow_period {
        c.slow_period = v;
    }
    if let Some(v) = a.buffer_bytes {
        c.buffer_bytes = Some(v);
    }
    if let Some(v) = a.steps_udp.as_deref() {
        c.steps_udp = commwatch_agent::config::parse_steps_udp(v)
            .map_err(|e| anyhow::anyhow!("--steps-udp: {e}"))?;
    }
    if let Some(v) = a.steps_socket.as_deref() {
        c.steps_socket = commwatch_agent::config::parse_steps_socket(v);
    }
    if let Some(v) = &a.tls_ca {
        c.tls.ca_file = Some(v.clone());
    }
    if let (Some(cert), Some(key)) = (&a.tls_cert, &a.tls_key) {
        c.tls.cert_file = Some(cert.clone());
        c.tls.key_file = Some(key.clone());
    }
    if let Some(v) = &a.token_file {
        c.token_file = Some(v.clone());
    }
    c.allow_plaintext |= a.allow_plaintext;
    if let Some(v) = a.probe_listen {
        c.probe.listen = Some(v);
    }
    if let Some(v) = &a.probe_token_file {
        c.probe.token_file = Some(v.clone());
    }
    if let Some(v) = a.nvlink_bytes {
        c.nvlink_bytes = v;
    }
    if a.once {
        // `--once` never connects: a collector URL from the flags or the file (plain text to another host
        // included) is not its concern.
        c.collector = None;
    }
    c.validate()?;
    Ok(c)
}

/// Runs the agent until Ctrl-C or SIGTERM; with `--once`, samples once and prints the JSON document.
pub async fn run(a: AgentArgs) -> anyhow::Result<()> {
    let config = agent_config(&a)?;
    if a.once {
        let doc =
            tokio::task::spawn_blocking(move || commwatch_agent::once::run_once(&config)).await?;
        // The agent logs each of the document's `warnings` itself (coded, with its level).
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    if config.collector.is_none() {
        anyhow::bail!("--collector URL is required (or use --once to sample once and print JSON)");
    }
    let handle = commwatch_agent::start(config).await?;
    tracing::info!(metrics = %format!("http://{}/metrics", handle.http_addr), "agent running");
    shutdown_signal().await;
    tracing::info!("shutting down");
    handle.shutdown().await;
    Ok(())
}
