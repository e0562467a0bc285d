//! `commwatch probe serve` and `commwatch probe run`: active probes between two hosts, bare bandwidth both ways
//! and small-message latency over TCP or RDMA verbs (the `commwatch-probe` crate). `serve` answers probes until
//! Ctrl-C; `run` measures once and prints text or JSON (`tx_bytes_per_second`, `rx_bytes_per_second`,
//! `latency_p50_seconds`, `latency_p99_seconds`, `latency_max_seconds`, ...).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use commwatch_probe::{
    ClientOptions, Limits, NeverBusy, Params, Server, ServerConfig, TransportKind,
};

use super::OutputFormat;

/// Default `probe serve --listen`: loopback (give the fabric interface's address to probe across it).
pub const DEFAULT_PROBE_LISTEN: &str = "127.0.0.1:9476";

#[derive(Subcommand, Debug)]
pub enum ProbeCommand {
    /// Answer probes on an address (bind it to the fabric interface, e.g. the IPoIB address), until Ctrl-C.
    Serve(ServeArgs),
    /// Probe a `probe serve` (or an agent with probes enabled): bandwidth both ways and latency.
    Run(RunArgs),
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to answer probes on.
    #[arg(long, value_name = "HOST:PORT", default_value = DEFAULT_PROBE_LISTEN)]
    pub listen: SocketAddr,
    /// File holding the token clients must present (none: any client is answered).
    #[arg(long, value_name = "F")]
    pub token_file: Option<PathBuf>,
    /// Largest message size a client may ask for, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = Limits::default().max_size)]
    pub max_size: u64,
    /// Longest probe a client may ask for (`30s`).
    #[arg(long, value_name = "D", value_parser = humantime::parse_duration, default_value = "30s")]
    pub max_duration: Duration,
    /// RDMA device to answer RDMA probes on (default: the first; needs the `rdma` build).
    #[arg(long, value_name = "DEV")]
    pub device: Option<String>,
    /// Most connections held at once; one beyond is closed at accept (a client also has 5 s to say hello).
    #[arg(long, value_name = "N", default_value_t = commwatch_probe::server::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=65536))]
    pub max_connections: usize,
}

/// `--transport`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportArg {
    Tcp,
    Rdma,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The probe server.
    #[arg(long, value_name = "HOST:PORT")]
    pub target: String,
    /// Data path: `tcp`, or `rdma` (verbs: RDMA WRITE for bandwidth, SEND ping-pong for latency).
    #[arg(long, value_enum, default_value_t = TransportArg::Tcp)]
    pub transport: TransportArg,
    /// RDMA device (`mlx5_0`; default: the first found).
    #[arg(long, value_name = "DEV")]
    pub device: Option<String>,
    /// Whole probe: 40% each bandwidth direction, 20% latency.
    #[arg(long, value_name = "D", value_parser = humantime::parse_duration, default_value = "5s")]
    pub duration: Duration,
    /// Bytes per message in the bandwidth phases.
    #[arg(long, value_name = "BYTES", default_value_t = commwatch_probe::params::DEFAULT_SIZE,
          value_parser = clap::value_parser!(u64).range(1..=u64::from(commwatch_probe::wire::MAX_DATA_BYTES)))]
    pub size: u64,
    /// Local address to probe from (the fabric interface's, so the probe does not take the management NIC).
    #[arg(long, value_name = "IP")]
    pub bind: Option<IpAddr>,
    /// File holding the server's probe token.
    #[arg(long, value_name = "F")]
    pub token_file: Option<PathBuf>,
    /// Output: `text` or `json`.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

/// The token in the file at `path`; a file that group or others can read or change is warned about, naming
/// it and `chmod 600`, as the agent and the collector do for their secrets (the token still works: refusing
/// would stop a probe over a mode bit, and the warning is said at every start).
fn token(path: Option<&PathBuf>) -> anyhow::Result<Option<String>> {
    if let Some(w) =
        path.and_then(|p| commwatch_model::token::exposure_warning("probe token file", p))
    {
        tracing::warn!("{w}");
    }
    path.map(|p| commwatch_model::token::read_token_file(p))
        .transpose()
        .map_err(anyhow::Error::from)
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// Runs `probe serve` or `probe run`.
pub fn run(c: &ProbeCommand) -> anyhow::Result<()> {
    match c {
        ProbeCommand::Serve(a) => serve(a),
        ProbeCommand::Run(a) => run_once(a),
    }
}

fn serve(a: &ServeArgs) -> anyhow::Result<()> {
    let config = ServerConfig {
        token: token(a.token_file.as_ref())?,
        limits: Limits {
            max_size: a.max_size,
            max_duration: a.max_duration,
            ..Limits::default()
        },
        rdma_device: a.device.clone(),
        relay: false,
        bind: None,
        max_connections: a.max_connections,
        ..ServerConfig::default()
    };
    if config.token.is_none() {
        tracing::warn!("no --token-file: any client that reaches this address may probe it");
    }
    runtime()?.block_on(async {
        let listener = tokio::net::TcpListener::bind(a.listen)
            .await
            .with_context(|| format!("cannot listen on {}", a.listen))?;
        tracing::info!(listen = %a.listen, "answering probes");
        Server::new(config, Arc::new(NeverBusy))
            .serve(listener, crate::shutdown_signal())
            .await;
        Ok(())
    })
}

fn run_once(a: &RunArgs) -> anyhow::Result<()> {
    let opts = ClientOptions {
        target: a.target.clone(),
        bind: a.bind,
        token: token(a.token_file.as_ref())?,
        params: Params {
            transport: match a.transport {
                TransportArg::Tcp => TransportKind::Tcp,
                TransportArg::Rdma => TransportKind::Rdma,
            },
            size: a.size,
            duration: a.duration,
        },
        device: a.device.clone(),
    };
    let result = runtime()?.block_on(commwatch_probe::run(&opts))?;
    match a.format {
        OutputFormat::Text => print!("{}", result.to_text()),
        OutputFormat::Json => println!("{}", serde_json::to_string_pretty(&result)?),
    }
    Ok(())
}
