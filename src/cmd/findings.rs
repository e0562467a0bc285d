//! `commwatch findings`: a running collector's findings, filtered. The filters go to `GET /api/v1/findings`
//! and are applied again here, so a collector that predates a filter (and ignores its parameter) still gets
//! the right answer. Text: one finding per line (severity, kind, subject, summary); JSON: the findings as the
//! API returns them. With several `--collector` (shards) every shard is asked and the lists merged; each
//! finding then names the shard that answered it (`collector` in JSON, `(on URL)` in text).

use clap::builder::PossibleValuesParser;
use clap::Args;
use commwatch_model::{FindingKind, Severity};

use super::OutputFormat;
use crate::api::{read_findings, sort_findings, Finding};
use crate::cmd::shards::{tag, ShardArgs};
use crate::outcome::CliError;

#[derive(Args, Debug)]
pub struct FindingsArgs {
    #[command(flatten)]
    pub connect: ShardArgs,
    /// Only findings of this severity (several: comma-separated or the flag repeated).
    #[arg(
        long,
        value_name = "S",
        value_delimiter = ',',
        value_parser = PossibleValuesParser::new(Severity::ALL.map(|s| s.as_str()))
    )]
    pub severity: Vec<String>,
    /// Only findings of this kind (several: comma-separated or the flag repeated).
    #[arg(
        long,
        value_name = "K",
        value_delimiter = ',',
        value_parser = PossibleValuesParser::new(FindingKind::ALL.map(|k| k.as_str()))
    )]
    pub kind: Vec<String>,
    /// Only findings about this node.
    #[arg(long, value_name = "N", value_parser = node_name)]
    pub node: Option<String>,
    /// Only findings about this training job (its subject's job, or a node of the job).
    #[arg(long, value_name = "J", value_parser = job_id)]
    pub job: Option<String>,
    /// Only root causes (findings no other finding explains).
    #[arg(long)]
    pub root: bool,
    /// Only active findings (not the recently cleared ones).
    #[arg(long)]
    pub active: bool,
    /// At most this many findings (root causes and the worst first).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// Output: `text` (one finding per line) or `json` (the API's keys).
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

/// A node name as the agent accepts one: 1 to 253 bytes, no whitespace or control characters.
fn node_name(s: &str) -> Result<String, String> {
    name_like(s, 253, "a node name")
}

/// A job id: 1 to 256 bytes, no whitespace or control characters.
fn job_id(s: &str) -> Result<String, String> {
    name_like(s, 256, "a job id")
}

fn name_like(s: &str, max: usize, what: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > max {
        return Err(format!("{what} is 1 to {max} bytes"));
    }
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{what} has no whitespace or control characters"));
    }
    Ok(s.to_string())
}

impl FindingsArgs {
    /// The query parameters of `/api/v1/findings`.
    fn query(&self) -> Vec<(&'static str, String)> {
        let mut q = Vec::new();
        for (key, values) in [("severity", &self.severity), ("kind", &self.kind)] {
            if !values.is_empty() {
                q.push((key, values.join(",")));
            }
        }
        for (key, value) in [("node", &self.node), ("job", &self.job)] {
            if let Some(v) = value {
                q.push((key, v.clone()));
            }
        }
        if self.root {
            q.push(("root", "true".into()));
        }
        if self.active {
            q.push(("active", "true".into()));
        }
        if let Some(n) = self.limit {
            q.push(("limit", n.to_string()));
        }
        q
    }

    /// Whether `f` passes every filter given. A finding that names no job is left to the collector's `job`
    /// filter, which knows the job's nodes; one that names another job is dropped.
    fn keeps(&self, f: &Finding) -> bool {
        let any = |want: &[String], have: &str| want.is_empty() || want.iter().any(|w| w == have);
        any(&self.severity, &f.severity)
            && any(&self.kind, &f.kind)
            && self.node.as_ref().is_none_or(|n| *n == f.subject.node)
            && self
                .job
                .as_ref()
                .is_none_or(|j| f.subject.job.as_ref().is_none_or(|fj| fj == j))
            && (!self.root || f.is_root())
            && (!self.active || f.active)
    }
}

/// Runs `commwatch findings`; prints the findings on stdout.
/// With shards, all are asked at once under one deadline (`--timeout`); the ones that answered are printed,
/// then the first failure is returned (exit 1).
pub fn run(args: &FindingsArgs) -> Result<(), CliError> {
    let clients = args.connect.clients()?;
    let sharded = clients.len() > 1;
    let mut findings = Vec::new();
    let mut first_error = None;
    let query = args.query();
    let timeout = args.connect.timeout;
    let results = crate::cmd::shards::ask_all(&clients, timeout, move |c| fetch(c, &query));
    for (client, result) in clients.iter().zip(results) {
        let late = || CliError::Collector(crate::cmd::shards::late(client, timeout));
        match result.unwrap_or_else(|| Err(late())) {
            Ok(list) if sharded => findings.extend(
                list.into_iter()
                    .map(|(raw, f)| (tag(raw, client.name()), f)),
            ),
            Ok(list) => findings.extend(list),
            Err(e) if sharded => {
                eprintln!("{}: {e}", client.name());
                first_error.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    print_findings(args, findings)?;
    first_error.map_or(Ok(()), Err)
}

/// One collector's findings for `query`.
fn fetch(
    client: &commwatch_diagnose::collector::Client,
    query: &[(&'static str, String)],
) -> Result<Vec<(serde_json::Value, Finding)>, CliError> {
    let list: Vec<serde_json::Value> = client.get_json("/api/v1/findings", query)?;
    read_findings(list).map_err(|e| {
        CliError::Collector(commwatch_diagnose::collector::ClientError::BadBody {
            url: client.url("/api/v1/findings"),
            message: e.to_string(),
        })
    })
}

/// Filters, sorts, cuts and prints the findings.
fn print_findings(
    args: &FindingsArgs,
    mut findings: Vec<(serde_json::Value, Finding)>,
) -> Result<(), CliError> {
    findings.retain(|(_, f)| args.keeps(f));
    sort_findings(&mut findings);
    if let Some(n) = args.limit {
        findings.truncate(n as usize);
    }
    match args.format {
        OutputFormat::Json => {
            let raw: Vec<&serde_json::Value> = findings.iter().map(|(r, _)| r).collect();
            println!(
                "{}",
                serde_json::to_string_pretty(&raw).map_err(anyhow::Error::from)?
            );
        }
        OutputFormat::Text if findings.is_empty() => eprintln!("no findings match"),
        OutputFormat::Text => {
            let views: Vec<&Finding> = findings.iter().map(|(_, f)| f).collect();
            let text = render_lines(&views);
            for (l, (raw, _)) in text.lines().zip(&findings) {
                // The views' strings are escaped (`read_findings`); the line is again, whole.
                let l = commwatch_model::text::Escaped(l);
                match raw.get("collector").and_then(|c| c.as_str()) {
                    Some(c) => println!("{l} (on {})", commwatch_model::text::Escaped(c)),
                    None => println!("{l}"),
                }
            }
        }
    }
    Ok(())
}

/// One line per finding, in aligned columns: severity, kind, subject, summary; a cleared finding says so, and a
/// consequence names its root cause.
pub fn render_lines(findings: &[&Finding]) -> String {
    let subjects: Vec<String> = findings.iter().map(|f| f.subject.describe()).collect();
    let kind_w = findings.iter().map(|f| f.kind.len()).max().unwrap_or(0);
    let subject_w = subjects
        .iter()
        .map(|s| s.chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (f, subject) in findings.iter().zip(&subjects) {
        let mut summary = f.summary.clone();
        if !f.active {
            summary.insert_str(0, "[cleared] ");
        }
        if let Some(cause) = &f.caused_by {
            summary.push_str(&format!(" (caused by {cause})"));
        }
        out.push_str(
            format!(
                "{:<8}  {:<kind_w$}  {:<subject_w$}  {}",
                f.severity, f.kind, subject, summary
            )
            .trim_end(),
        );
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        args: FindingsArgs,
    }

    fn parse(extra: &[&str]) -> Result<FindingsArgs, clap::Error> {
        let mut argv = vec!["findings", "--collector", "http://127.0.0.1:9470"];
        argv.extend_from_slice(extra);
        Wrap::try_parse_from(argv).map(|w| w.args)
    }

    #[test]
    fn filters_become_the_query() {
        let a = parse(&[
            "--severity",
            "critical",
            "--severity",
            "warning",
            "--kind",
            "link_degraded,link_errors",
            "--node",
            "node-03",
            "--job",
            "1001",
            "--root",
            "--active",
            "--limit",
            "5",
        ])
        .unwrap();
        let query = a.query();
        let q: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
        assert_eq!(
            q,
            [
                ("severity", "critical,warning"),
                ("kind", "link_degraded,link_errors"),
                ("node", "node-03"),
                ("job", "1001"),
                ("root", "true"),
                ("active", "true"),
                ("limit", "5"),
            ]
        );
        assert!(parse(&[]).unwrap().query().is_empty());
    }

    #[test]
    fn bad_filters_are_usage_errors_that_name_the_flag() {
        for (flags, says) in [
            (&["--severity", "fatal"][..], "--severity"),
            (&["--kind", "link_down"][..], "management_network_traffic"),
            (&["--node", "node 3"][..], "whitespace"),
            (&["--node", ""][..], "1 to 253 bytes"),
            (&["--job", "a\tb"][..], "--job"),
            (&["--severity", "warning,bad"][..], "--severity"),
            (&["--limit", "0"][..], "--limit"),
        ] {
            let e = parse(flags).expect_err("refused");
            assert_eq!(e.exit_code(), 2);
            assert!(e.to_string().contains(says), "{flags:?}: {e}");
        }
    }

    fn finding(json: serde_json::Value) -> Finding {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn filters_are_applied_here_too() {
        let f = finding(serde_json::json!({
            "id": "link_errors:node-03:mlx5_0:1", "kind": "link_errors", "severity": "warning",
            "subject": {"node": "node-03", "device": "mlx5_0", "port": "1", "job": "7"},
            "active": true, "caused_by": null
        }));
        assert!(
            parse(&["--root", "--active", "--node", "node-03", "--job", "7"])
                .unwrap()
                .keeps(&f)
        );
        assert!(!parse(&["--severity", "critical"]).unwrap().keeps(&f));
        assert!(!parse(&["--kind", "congestion"]).unwrap().keeps(&f));
        assert!(!parse(&["--node", "node-04"]).unwrap().keeps(&f));
        assert!(!parse(&["--job", "8"]).unwrap().keeps(&f));
        assert!(parse(&["--severity", "critical,warning"])
            .unwrap()
            .keeps(&f));
        let node_wide = finding(serde_json::json!({
            "id": "c", "kind": "cpu_bound", "severity": "warning", "subject": {"node": "node-03"}
        }));
        assert!(parse(&["--job", "8"]).unwrap().keeps(&node_wide));
        let cleared_consequence = finding(serde_json::json!({
            "id": "x", "kind": "congestion", "severity": "info", "active": false, "caused_by": "y"
        }));
        assert!(!parse(&["--root"]).unwrap().keeps(&cleared_consequence));
        assert!(!parse(&["--active"]).unwrap().keeps(&cleared_consequence));
    }

    #[test]
    fn one_aligned_line_per_finding() {
        let a = finding(serde_json::json!({
            "id": "a", "kind": "management_network_traffic", "severity": "critical",
            "subject": {"node": "node-03", "device": "eth0", "port": "eth0"},
            "summary": "NCCL traffic on the management NIC eth0", "active": true
        }));
        let b = finding(serde_json::json!({
            "id": "b", "kind": "straggler", "severity": "info",
            "subject": {"node": "node-01", "gpu": "2"},
            "summary": "rank 3 is 40% slower", "active": false, "caused_by": "a"
        }));
        assert_eq!(
            render_lines(&[&a, &b]),
            "critical  management_network_traffic  node-03 eth0   NCCL traffic on the management NIC eth0\n\
             info      straggler                   node-01 gpu 2  [cleared] rank 3 is 40% slower (caused by a)\n"
        );
    }
}
