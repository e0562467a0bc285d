//! Findings: one rule per file, each a pure function of the analysed inputs, registered in [`RULES`].
//!
//! A finding has the shape the collector's `/api/v1/findings` uses (`kind`, `severity`, `subject`, `summary`,
//! `evidence`, `action`), with the collector's finding kinds where one fits (`nccl_misconfiguration`,
//! `management_network_traffic`, `link_underutilized`, `link_errors`, …) and kinds of its own for what only
//! an offline input shows: `test_failed`, `results_incomplete`, `results_unvalidated`, `mixed_inputs`,
//! `bandwidth_collapse`, `impossible_bandwidth`. Evidence keys carry their unit (`_gbps` GB/s, `_us`
//! microseconds, `_bytes` bytes, `_share`/`_ratio` a fraction) or are counts and words.
//!
//! [`network`] holds what the network rules read alike from a log.

mod bandwidth_collapse;
mod baseline_below_link;
mod comm_share;
mod cpu_bound;
mod docker_bridge;
mod exposed_communication;
mod few_channels;
mod gdr_disabled;
mod impossible_bandwidth;
mod ll_protocol;
mod management_nic;
mod mixed_inputs;
mod nccl_warnings;
pub mod network;
mod p2p_disabled;
mod plugin_fallback;
mod protocol_forced;
mod results_unvalidated;
mod shared_gpu;
mod socket_fallback;
mod sockets_forced;
mod straggler;
mod tcp_provider;
mod test_failed;
mod virtual_interface;
mod wrong_results;

#[cfg(test)]
pub(crate) mod testing;

use std::collections::BTreeMap;

use serde::Serialize;

/// How bad a finding is: the severity the collector's findings use, so that a report and the live findings
/// rank alike.
pub use commwatch_model::Severity;

use crate::analysed::{LogReport, TestReport, TraceReport};
use crate::analysis::straggler::StragglerAnalysis;
pub use crate::lines::Cite;
use crate::link::LinkInfo;

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// One of the collector's finding kinds (`link_underutilized`, `nccl_misconfiguration`, …).
    pub kind: &'static str,
    pub severity: Severity,
    /// What it is about: `file`, `interface`, `rank`, `collective`, … as they apply.
    pub subject: BTreeMap<String, String>,
    pub summary: String,
    /// The numbers behind it.
    pub evidence: BTreeMap<String, serde_json::Value>,
    pub action: String,
    /// The input lines it rests on: file, line number, the line quoted. Every finding cites at least one.
    pub cites: Vec<Cite>,
}

impl Finding {
    pub(crate) fn new(
        kind: &'static str,
        severity: Severity,
        summary: String,
        action: &str,
    ) -> Finding {
        Finding {
            kind,
            severity,
            subject: BTreeMap::new(),
            summary,
            evidence: BTreeMap::new(),
            action: action.to_string(),
            cites: Vec::new(),
        }
    }

    /// Adds the lines it rests on (each once).
    pub(crate) fn cite<'c>(mut self, cites: impl IntoIterator<Item = &'c Cite>) -> Finding {
        for c in cites {
            if !self.cites.contains(c) {
                self.cites.push(c.clone());
            }
        }
        self
    }

    /// Adds line `line` of `file` (quoted when the report resolves it, see [`Cite::at`]).
    pub(crate) fn cite_line(self, file: &str, line: usize) -> Finding {
        if line == 0 {
            return self;
        }
        let c = Cite::at(file, line);
        self.cite([&c])
    }

    pub(crate) fn subject(mut self, key: &str, value: impl ToString) -> Finding {
        self.subject.insert(key.to_string(), value.to_string());
        self
    }

    pub(crate) fn evidence(mut self, key: &str, value: impl Into<serde_json::Value>) -> Finding {
        self.evidence.insert(key.to_string(), value.into());
        self
    }
}

/// What the rules look at.
pub struct Context<'a> {
    pub tests: &'a [TestReport],
    pub logs: &'a [LogReport],
    pub traces: &'a [TraceReport],
    pub straggler: Option<&'a StragglerAnalysis>,
    pub link: &'a LinkInfo,
    /// Kernel time by kernel (`nsys stats` tables, traces).
    pub kernels: &'a [crate::kernels::KernelSummary],
}

type Rule = fn(&Context) -> Vec<Finding>;

/// Every rule, in report order (within a severity): whether the runs measured anything, then what the logs
/// say about the network, then the baselines against the fabric, then the training timeline.
pub const RULES: &[Rule] = &[
    test_failed::check,
    wrong_results::check,
    mixed_inputs::check,
    plugin_fallback::check,
    tcp_provider::check,
    shared_gpu::check,
    sockets_forced::check,
    socket_fallback::check,
    management_nic::check,
    virtual_interface::check,
    docker_bridge::check,
    p2p_disabled::check,
    protocol_forced::check,
    gdr_disabled::check,
    few_channels::check,
    nccl_warnings::check,
    results_unvalidated::check,
    impossible_bandwidth::check,
    baseline_below_link::check,
    bandwidth_collapse::check,
    ll_protocol::check,
    comm_share::check,
    exposed_communication::check,
    cpu_bound::check,
    straggler::check,
];

/// Runs every rule; the most severe findings first, rule order otherwise. A finding whose rule cited no line
/// gets the lines its subject and evidence point at ([`cite_by_subject`]).
pub fn evaluate(ctx: &Context) -> Vec<Finding> {
    let mut out: Vec<Finding> = RULES
        .iter()
        .flat_map(|rule| rule(ctx))
        .map(|f| {
            if f.cites.is_empty() {
                cite_by_subject(f, ctx)
            } else {
                f
            }
        })
        .collect();
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

/// The lines a finding rests on, from what it is about: in a log, the lines that name its interface or
/// setting, else the lines of the topic its words name (GPU Direct RDMA, channels), else the network's; in
/// an nccl-tests output, the rows at the sizes its evidence names (`*_bytes`), else the run's rows and
/// average; in a trace, the trace itself (a trace has no lines: its figures are quoted).
pub fn cite_by_subject(f: Finding, ctx: &Context) -> Finding {
    let file = f.subject.get("file").cloned().unwrap_or_default();
    if let Some(l) = ctx.logs.iter().find(|l| l.file == file) {
        let log = &l.log;
        let cites: Vec<Cite> = if let Some(name) = f.subject.get("interface") {
            ["interfaces", "network", "connections", "warnings"]
                .iter()
                .flat_map(|t| log.cited(t))
                .filter(|c| c.text.contains(name.as_str()))
                .cloned()
                .collect()
        } else if let Some(setting) = f.subject.get("setting") {
            log.cited(&format!("settings.{setting}")).to_vec()
        } else {
            Vec::new()
        };
        let text = format!("{} {}", f.summary, f.kind).to_ascii_lowercase();
        let topics: &[&str] = if text.contains("gdr") || text.contains("direct rdma") {
            &["gdr", "connections"]
        } else if text.contains("channel") {
            &["channels", "connections"]
        } else if text.contains("warn") {
            &["warnings"]
        } else {
            &[
                "network",
                "connections",
                "interfaces",
                "warnings",
                "version",
            ]
        };
        // The first two topics that have lines, two lines each: enough to check, short enough to read.
        let more: Vec<&Cite> = topics
            .iter()
            .map(|t| log.cited(t))
            .filter(|c| !c.is_empty())
            .take(2)
            .flat_map(|c| c.iter().take(2))
            .collect();
        let f = f.cite(cites.iter().take(4));
        return if !f.cites.is_empty() {
            f
        } else if !more.is_empty() {
            f.cite(more)
        } else {
            f.cite(log.cited("last_line"))
        };
    }
    if let Some(t) = ctx.tests.iter().find(|t| t.file == file) {
        let collective = f.subject.get("collective");
        let t = ctx
            .tests
            .iter()
            .find(|o| o.file == file && Some(&o.test.collective) == collective)
            .unwrap_or(t);
        let sizes: Vec<u64> = f
            .evidence
            .iter()
            .filter(|(k, _)| k.ends_with("_bytes"))
            .filter_map(|(_, v)| v.as_u64())
            .collect();
        let mut cites = test_rows(t, &sizes);
        if cites.is_empty() {
            cites = test_rows(t, &[]);
        }
        return f.cite(&cites);
    }
    let traces: Vec<&TraceReport> = ctx
        .traces
        .iter()
        .filter(|t| t.file == file || !f.subject.contains_key("file"))
        .collect();
    let cites: Vec<Cite> = traces
        .iter()
        .map(|t| {
            let a = &t.analysis;
            Cite {
                file: t.file.clone(),
                line: None,
                text: format!(
                    "rank {}: {} GPU events, communication {:.0} us, computation {:.0} us, idle {:.0} us, \
                     exposed communication {:.0} us",
                    a.rank, a.gpu_events, a.comm_time_us, a.compute_time_us, a.idle_time_us, a.exposed_comm_us
                ),
            }
        })
        .collect();
    f.cite(&cites)
}

/// A run as a sentence names it: its collective, or "the run" where the file does not tell which.
pub(crate) fn run_name(t: &TestReport) -> &str {
    match t.test.collective.as_str() {
        "" | "unknown" => "the run",
        c => c,
    }
}

/// The lines of a test to cite for a claim about its results: the rows at `sizes` (all rows when empty, at
/// most 3), and its average line.
pub fn test_rows(t: &TestReport, sizes: &[u64]) -> Vec<Cite> {
    let mut out: Vec<Cite> = t
        .test
        .rows
        .iter()
        .filter(|r| sizes.is_empty() || sizes.contains(&r.size_bytes))
        .filter(|r| r.line > 0)
        .map(|r| Cite::at(&t.file, r.line))
        .collect();
    if sizes.is_empty() && out.len() > 3 {
        let last = out.pop();
        out.truncate(2);
        out.extend(last);
    }
    if let Some(l) = t.test.avg_line {
        out.push(Cite::at(&t.file, l));
    }
    if out.is_empty() {
        if let Some(l) = t
            .test
            .header_line
            .or(Some(t.test.first_line).filter(|l| *l > 0))
        {
            out.push(Cite::at(&t.file, l));
        }
    }
    out
}

/// Rounds for evidence: two decimals.
pub(crate) fn r2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}
