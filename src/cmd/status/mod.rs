//! `commwatch status`: a running collector at a glance. Asks, in order, `GET /healthz` (reachable?),
//! `/metrics` (only the `commwatch_build_info` line, for the version), `/api/v1/nodes` (up or stale),
//! `/api/v1/jobs` and `/api/v1/findings` (the active root causes), and prints one screen of text or one JSON
//! document ([`report::Report`]).
//!
//! Exit status: 0 when the collector answered and no active root cause is critical; 3
//! ([`crate::outcome::EXIT_CRITICAL`]) when one is; 1 when the collector cannot be reached or does not answer
//! (a refused token included); 2 on a usage error.

mod report;
mod text;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use commwatch_diagnose::collector::{Client, ClientError};

use super::OutputFormat;
use crate::api::{read_findings, sort_findings, Job, Node};
use crate::client::{connect, ConnectArgs};
use crate::outcome::{CliError, EXIT_CRITICAL};
use report::{Report, Version};

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// A node not heard from for longer than this is stale, e.g. 30s.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "30s")]
    pub stale_after: Duration,
    /// Output: `text` (one screen) or `json` (one document).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

/// Runs `commwatch status`; returns the exit status (0, or [`EXIT_CRITICAL`]). When the collector gives no
/// usable answer, `--format json` still prints a document (`status`: `unreachable` or `error`) before the
/// error is returned.
pub fn run(args: &StatusArgs) -> Result<u8, CliError> {
    let client = connect(&args.connect)?;
    let report = match gather(&client, args.stale_after) {
        Ok(r) => r,
        Err((reachable, e)) => {
            if args.format == OutputFormat::Json {
                let doc = report::failure(client.base_url(), reachable, &e.to_string());
                println!("{doc:#}");
            }
            return Err(CliError::Collector(e));
        }
    };
    match args.format {
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(anyhow::Error::from)?
        ),
        OutputFormat::Text => print!("{}", text::render(&report)),
    }
    Ok(if report.is_critical() {
        EXIT_CRITICAL
    } else {
        0
    })
}

/// Everything the report needs; on failure, whether `/healthz` had answered, and the error.
fn gather(client: &Client, stale_after: Duration) -> Result<Report, (bool, ClientError)> {
    client.get("/healthz", &[]).map_err(|e| (false, e))?;
    let reached = |e| (true, e);
    // The version is a courtesy: a collector without the family (or whose /metrics fails) is still healthy.
    let version = client
        .scan_lines("/metrics", Version::scan)
        .ok()
        .flatten()
        .map(|line| Version::from_build_info(&line))
        .unwrap_or_default();
    let nodes_answer = client.get("/api/v1/nodes", &[]).map_err(reached)?;
    let nodes: Vec<Node> = parse(client, "/api/v1/nodes", &nodes_answer.body).map_err(reached)?;
    // Node ages are measured on the collector's clock (its Date header), immune to this host's skew.
    let now = nodes_answer
        .date
        .as_deref()
        .and_then(|d| httpdate::parse_http_date(d).ok())
        .unwrap_or_else(SystemTime::now)
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let jobs: Vec<Job> = client.get_json("/api/v1/jobs", &[]).map_err(reached)?;
    let query = [("active", "true".to_string()), ("root", "true".to_string())];
    let list: Vec<serde_json::Value> = client
        .get_json("/api/v1/findings", &query)
        .map_err(reached)?;
    let mut findings = read_findings(list)
        .map_err(|e| bad_body(client, "/api/v1/findings", e))
        .map_err(reached)?;
    findings.retain(|(_, f)| f.active && f.is_root());
    sort_findings(&mut findings);
    Ok(Report::new(
        client.base_url(),
        version,
        now,
        stale_after,
        &nodes,
        &jobs,
        findings,
    ))
}

fn parse<T: serde::de::DeserializeOwned>(
    client: &Client,
    path: &str,
    body: &str,
) -> Result<T, ClientError> {
    serde_json::from_str(body).map_err(|e| bad_body(client, path, e))
}

fn bad_body(client: &Client, path: &str, e: serde_json::Error) -> ClientError {
    ClientError::BadBody {
        url: client.url(path),
        message: e.to_string(),
    }
}
