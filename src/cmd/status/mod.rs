//! `commwatch status`: a running collector at a glance. Asks, in order, `GET /healthz` (reachable?),
//! `/metrics` (only the `commwatch_build_info` line, for the version), `/api/v1/nodes` (up or stale),
//! `/api/v1/jobs` and `/api/v1/findings` (the active root causes), and prints one screen of text or one JSON
//! document ([`report::Report`]). With several `--collector` (shards), every shard is asked and the answers
//! merged ([`crate::cmd::shards`]): nodes counted once, jobs and root causes tagged with the shard that answered them, and a
//! line per shard.
//!
//! Exit status: 0 when the collector answered and no active root cause is critical; 3
//! ([`crate::outcome::EXIT_CRITICAL`]) when one is; 1 when the collector cannot be reached or does not answer
//! (a refused token included) — with shards, when any shard cannot (the others' report is still printed); 2
//! on a usage error.

mod report;
mod text;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use commwatch_diagnose::collector::{Client, ClientError};

use super::OutputFormat;
use crate::api::{read_findings, sort_findings, Finding, Job, Node};
use crate::cmd::shards::{self, ShardArgs};
use crate::outcome::{CliError, EXIT_CRITICAL};
use report::{Report, ShardLine, Version};

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub connect: ShardArgs,
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
    let clients = args.connect.clients()?;
    if clients.len() > 1 {
        return run_shards(args, &clients);
    }
    let client = &clients[0];
    let report = match gather(client) {
        Ok(r) => r.report(client.name(), args.stale_after),
        Err((reachable, e)) => {
            if args.format == OutputFormat::Json {
                let doc = report::failure(client.name(), reachable, &e.to_string());
                println!("{doc:#}");
            }
            return Err(CliError::Collector(e));
        }
    };
    print_report(args, &report)
}

/// Several shards: all asked at once under one deadline (`--timeout`), the answers merged into one report
/// with a line per shard (a shard without a whole answer by then says so). Exit 1 (after the report) when a
/// shard gave no usable answer.
fn run_shards(
    args: &StatusArgs,
    clients: &[commwatch_diagnose::collector::Client],
) -> Result<u8, CliError> {
    let mut answers = Vec::new();
    let mut lines = Vec::new();
    let mut first_error = None;
    let timeout = args.connect.timeout;
    let results = shards::ask_all(clients, timeout, gather);
    for (client, result) in clients.iter().zip(results) {
        let url = client.name().to_string();
        match result.unwrap_or_else(|| Err((false, shards::late(client, timeout)))) {
            Ok(a) => {
                lines.push(ShardLine::answered(
                    &url,
                    &a.version,
                    a.nodes.len(),
                    a.jobs.len(),
                    a.findings.len(),
                ));
                answers.push((url, a));
            }
            Err((reachable, e)) => {
                lines.push(ShardLine::failed(&url, reachable, &e.to_string()));
                first_error.get_or_insert(e);
            }
        }
    }
    let urls: Vec<&str> = clients.iter().map(|c| c.name()).collect();
    let mut report = Answer::merge(answers).report(&urls.join(","), args.stale_after);
    report.collector.reachable = first_error.is_none();
    report.collectors = lines;
    let code = print_report(args, &report)?;
    match first_error {
        Some(e) => Err(CliError::Collector(e)),
        None => Ok(code),
    }
}

fn print_report(args: &StatusArgs, report: &Report) -> Result<u8, CliError> {
    match args.format {
        OutputFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(anyhow::Error::from)?
        ),
        // The values are escaped where they were read (`parse`); the laid-out text is escaped again whole.
        OutputFormat::Text => print!(
            "{}",
            commwatch_model::text::EscapedLines(&text::render(report))
        ),
    }
    Ok(if report.is_critical() {
        EXIT_CRITICAL
    } else {
        0
    })
}

/// What one collector answered.
struct Answer {
    version: Version,
    /// Seconds since the Unix epoch on the collector's clock (its Date header), else this host's.
    now: f64,
    nodes: Vec<Node>,
    /// Each job with the shard that answered it (`None` with one collector).
    jobs: Vec<(Job, Option<String>)>,
    /// The active root causes, in order.
    findings: Vec<(serde_json::Value, Finding)>,
}

impl Answer {
    fn report(self, url: &str, stale_after: Duration) -> Report {
        Report::new(
            url,
            self.version,
            self.now,
            stale_after,
            &self.nodes,
            &self.jobs,
            self.findings,
        )
    }

    /// Several shards' answers as one: nodes once each, jobs and root causes tagged with their shard, the
    /// latest clock; the version when every shard that answered runs the same.
    fn merge(answers: Vec<(String, Answer)>) -> Answer {
        let versions: Vec<&Version> = answers.iter().map(|(_, a)| &a.version).collect();
        let version = match versions.first() {
            Some(v) if versions.iter().all(|x| x == v) => (*v).clone(),
            _ => Version::default(),
        };
        let now = answers.iter().map(|(_, a)| a.now).fold(0.0, f64::max);
        let mut nodes = Vec::new();
        let mut jobs = Vec::new();
        let mut findings = Vec::new();
        for (url, a) in answers {
            nodes.push(a.nodes);
            jobs.extend(a.jobs.into_iter().map(|(j, _)| (j, Some(url.clone()))));
            findings.extend(
                a.findings
                    .into_iter()
                    .map(|(raw, f)| (shards::tag(raw, &url), f)),
            );
        }
        sort_findings(&mut findings);
        Answer {
            version,
            now,
            nodes: shards::merge_nodes(nodes),
            jobs,
            findings,
        }
    }
}

/// Everything the report needs; on failure, whether `/healthz` had answered, and the error.
fn gather(client: &Client) -> Result<Answer, (bool, ClientError)> {
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
    let jobs: serde_json::Value = client.get_json("/api/v1/jobs", &[]).map_err(reached)?;
    let jobs: Vec<Job> = crate::api::escaped_view(&jobs)
        .map_err(|e| bad_body(client, "/api/v1/jobs", e))
        .map_err(reached)?;
    let query = [("active", "true".to_string()), ("root", "true".to_string())];
    let list: Vec<serde_json::Value> = client
        .get_json("/api/v1/findings", &query)
        .map_err(reached)?;
    let mut findings = read_findings(list)
        .map_err(|e| bad_body(client, "/api/v1/findings", e))
        .map_err(reached)?;
    findings.retain(|(_, f)| f.active && f.is_root());
    sort_findings(&mut findings);
    Ok(Answer {
        version,
        now,
        nodes,
        jobs: jobs.into_iter().map(|j| (j, None)).collect(),
        findings,
    })
}

/// `body` as a `T`, its strings' control characters escaped (they reach the terminal).
fn parse<T: serde::de::DeserializeOwned>(
    client: &Client,
    path: &str,
    body: &str,
) -> Result<T, ClientError> {
    serde_json::from_str(body)
        .and_then(|v: serde_json::Value| crate::api::escaped_view(&v))
        .map_err(|e| bad_body(client, path, e))
}

fn bad_body(client: &Client, path: &str, e: serde_json::Error) -> ClientError {
    ClientError::BadBody {
        url: client.url(path),
        message: e.to_string(),
    }
}
