//! `commwatch baseline import FILE --collector URL`: a nccl-tests result sent to a running collector, over
//! http:// or https:// with its API token.

use std::path::PathBuf;

use clap::Subcommand;
use commwatch_diagnose::collector::ClientOptions;

use crate::client::{build, read_token};
use crate::outcome::CliError;

#[derive(Subcommand, Debug)]
pub enum BaselineCommand {
    /// Send a nccl-tests result to a running collector; live findings compare in-training bandwidth with it.
    Import {
        /// nccl-tests output (any format generation, or the JSON of -J).
        file: PathBuf,
        /// The collector's HTTP address, e.g. http://127.0.0.1:9470 (or https:// through a TLS proxy).
        #[arg(long)]
        collector: String,
        /// The job the baseline is for (default: the fabric's, for every job).
        #[arg(long)]
        job: Option<String>,
        /// File holding the collector's API token (when the collector has `api_token_file`); as the other
        /// clients' `--api-token-file` (`--token-file`, its old name, still works).
        #[arg(
            long = "api-token-file",
            value_name = "FILE",
            env = "COMMWATCH_API_TOKEN_FILE",
            alias = "token-file"
        )]
        token_file: Option<PathBuf>,
        /// PEM CA that signed the collector's (or its proxy's) certificate, with an https:// URL.
        #[arg(long, value_name = "FILE")]
        tls_ca: Option<PathBuf>,
    },
}

/// Runs `baseline import`; prints what the collector stored (its JSON answer) on stdout.
pub fn run(command: &BaselineCommand) -> Result<(), CliError> {
    let BaselineCommand::Import {
        file,
        collector,
        job,
        token_file,
        tls_ca,
    } = command;
    let token = token_file
        .as_deref()
        .map(|p| read_token(p, "--api-token-file"))
        .transpose()?;
    let options = ClientOptions {
        ca_file: tls_ca.clone(),
        token,
        timeout: None,
        connect_to: None,
    };
    let client = build(collector, &options, "--tls-ca")?;
    let stored = commwatch_diagnose::baseline::import(file, &client, job.as_deref())
        .map_err(anyhow::Error::new)?;
    println!(
        "{}",
        serde_json::to_string_pretty(&stored).unwrap_or_default()
    );
    Ok(())
}
