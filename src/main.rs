//! `commwatch`: the command line. Thin clap wrappers over the library crates; nothing else lives here
//! except the demo's orchestration (`demo.rs`).

mod demo;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "commwatch",
    version,
    about = "Watches the communication of distributed GPU training: which link, on which node, slows which job, and why."
)]
struct Cli {
    /// Log filter (`info`, `debug`, `commwatch_agent=debug`, ...); also read from RUST_LOG.
    #[arg(long, global = true, env = "COMMWATCH_LOG", default_value = "info")]
    log: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the node agent: sample InfiniBand, NIC and host counters and stream them to a collector.
    Agent(AgentArgs),
    /// Run the collector: ingest agents' streams, derive rates, export Prometheus metrics and the JSON API.
    Collector(CollectorArgs),
    /// Run a simulated cluster through the real agent and collector code.
    Demo(demo::DemoArgs),
    /// Offline diagnosis of nccl-tests results, NCCL debug logs, PyTorch profiler traces, Nsight exports.
    Diagnose(commwatch_diagnose::DiagnoseArgs),
    /// Bare-communication baselines kept by a collector.
    #[command(subcommand)]
    Baseline(BaselineCommand),
}

#[derive(Subcommand, Debug)]
enum BaselineCommand {
    /// Send a nccl-tests result to a running collector; live findings compare in-training bandwidth with it.
    Import {
        /// nccl-tests output (any format generation, or the JSON of -J).
        file: PathBuf,
        /// The collector's HTTP address, e.g. http://127.0.0.1:9470.
        #[arg(long)]
        collector: String,
        /// The job the baseline is for (default: the fabric's, for every job).
        #[arg(long)]
        job: Option<String>,
        /// File holding the collector's API token (when the collector has `api_token_file`).
        #[arg(long)]
        token_file: Option<PathBuf>,
    },
}

#[derive(Args, Debug)]
struct AgentArgs {
    /// Collector URL, e.g. http://collector:7070. Required unless --once.
    #[arg(long)]
    collector: Option<String>,
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
}

#[derive(Args, Debug)]
struct CollectorArgs {
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
    /// How long raw samples are kept, e.g. 10m.
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
    /// Allow plain-text gRPC on a non-loopback --grpc-listen (without TLS); loopback is always allowed.
    #[arg(long)]
    allow_plaintext: bool,
    /// File holding the bearer token required for /api/* (else reads are open, writes loopback-only).
    #[arg(long)]
    api_token_file: Option<PathBuf>,
}

fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(filter))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn agent_config(a: &AgentArgs) -> anyhow::Result<commwatch_agent::AgentConfig> {
    let mut c = match &a.config {
        Some(p) => commwatch_agent::AgentConfig::from_file(p)?,
        None => commwatch_agent::AgentConfig::default(),
    };
    if let Some(v) = &a.collector {
        c.collector = Some(v.clone());
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
    match a.steps_udp.as_deref() {
        None => {}
        Some("off") => c.steps_udp = None,
        Some(v) => c.steps_udp = Some(v.parse().with_context(|| format!("--steps-udp {v:?}"))?),
    }
    match a.steps_socket.as_deref() {
        None => {}
        Some("off") => c.steps_socket = None,
        Some(v) => c.steps_socket = Some(PathBuf::from(v)),
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
    c.validate()?;
    Ok(c)
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
    if let Some(v) = &a.api_token_file {
        c.api_token_file = Some(v.clone());
    }
    c.allow_plaintext |= a.allow_plaintext;
    c.validate()?;
    Ok(c)
}

/// Resolves on Ctrl-C or SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

async fn run_agent(a: AgentArgs) -> anyhow::Result<()> {
    let config = agent_config(&a)?;
    if a.once {
        let doc =
            tokio::task::spawn_blocking(move || commwatch_agent::once::run_once(&config)).await?;
        for w in doc["warnings"].as_array().into_iter().flatten() {
            if let Some(w) = w.as_str() {
                eprintln!("warning: {w}");
            }
        }
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

async fn run_collector(a: CollectorArgs) -> anyhow::Result<()> {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.log);
    let result = match cli.command {
        Command::Baseline(BaselineCommand::Import {
            file,
            collector,
            job,
            token_file,
        }) => {
            let token = match token_file
                .as_deref()
                .map(std::fs::read_to_string)
                .transpose()
            {
                Ok(t) => t.map(|t| t.trim().to_string()),
                Err(e) => {
                    eprintln!("error: cannot read --token-file: {e}");
                    return ExitCode::FAILURE;
                }
            };
            let options = commwatch_diagnose::collector::ClientOptions {
                token,
                ..Default::default()
            };
            let client = match commwatch_diagnose::collector::Client::new(&collector, &options) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match commwatch_diagnose::baseline::import(&file, &client, job.as_deref()) {
                Ok(stored) => {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&stored).unwrap_or_default()
                    );
                    return ExitCode::SUCCESS;
                }
                Err(e) => Err(anyhow::Error::new(e)),
            }
        }
        Command::Diagnose(args) => match commwatch_diagnose::run(&args) {
            Ok(code) => return ExitCode::from(code.clamp(0, 255) as u8),
            Err(e) => Err(anyhow::Error::new(e)),
        },
        command => {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    return ExitCode::FAILURE;
                }
            };
            rt.block_on(async move {
                match command {
                    Command::Agent(a) => run_agent(a).await,
                    Command::Collector(a) => run_collector(a).await,
                    Command::Demo(a) => demo::run(a).await,
                    Command::Diagnose(_) | Command::Baseline(_) => Ok(()),
                }
            })
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
