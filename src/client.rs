//! The flags every command that asks a running collector shares (`status`, `findings`), and the client they
//! build: the one HTTP(S) client of the project, with the API token read from its file.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use commwatch_diagnose::collector::{Client, ClientError, ClientOptions};

use crate::outcome::CliError;

/// How to reach the collector's HTTP API.
#[derive(Args, Debug, Clone)]
pub struct ConnectArgs {
    /// The collector's HTTP address: http://HOST:PORT, or https://HOST:PORT[/PREFIX] through a TLS proxy.
    #[arg(long, value_name = "URL", env = "COMMWATCH_COLLECTOR")]
    pub collector: String,
    /// File holding the collector's API token (its --api-token-file), sent as `authorization: Bearer`.
    #[arg(long, value_name = "FILE", env = "COMMWATCH_API_TOKEN_FILE")]
    pub api_token_file: Option<PathBuf>,
    /// PEM CA certificate(s) that signed the collector's (or its proxy's) certificate, trusted besides the
    /// system's roots; with an https:// URL only.
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Give up on a request after this long, e.g. 10s.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "10s")]
    pub timeout: Duration,
}

/// The client for `args`; a token file that cannot be read, a bad URL or CA file are usage errors.
pub fn connect(args: &ConnectArgs) -> Result<Client, CliError> {
    connect_via(args, None)
}

/// [`connect`], reaching the collector at `addr` instead of the URL host's address (one shard of a DNS name).
pub fn connect_via(
    args: &ConnectArgs,
    addr: Option<std::net::SocketAddr>,
) -> Result<Client, CliError> {
    let token = args
        .api_token_file
        .as_deref()
        .map(|p| read_token(p, "--api-token-file"))
        .transpose()?;
    let options = ClientOptions {
        ca_file: args.tls_ca.clone(),
        token,
        timeout: Some(args.timeout),
        connect_to: addr,
    };
    build(&args.collector, &options, "--tls-ca")
}

/// The token in `path`, without surrounding whitespace (a trailing newline is usual in a secret file).
pub fn read_token(path: &std::path::Path, flag: &str) -> Result<String, CliError> {
    std::fs::read_to_string(path)
        .map(|t| t.trim().to_string())
        .map_err(|e| CliError::Usage(format!("cannot read {flag} {}: {e}", path.display())))
}

/// [`Client::new`], naming the flag when the CA file is the problem, and warning when a token would cross
/// the network in clear.
pub fn build(url: &str, options: &ClientOptions, ca_flag: &str) -> Result<Client, CliError> {
    let client = Client::new(url, options).map_err(|e| match e {
        ClientError::CaFile { .. } => CliError::Usage(format!("{ca_flag}: {e}")),
        ClientError::BadToken(_) => CliError::Usage(format!("{e} (read from its file)")),
        e => CliError::Collector(e),
    })?;
    if client.has_token() && client.is_plaintext_off_host() {
        tracing::warn!(
            collector = client.base_url(),
            "sending the API token over plain http:// to another host; use https://"
        );
    }
    Ok(client)
}
