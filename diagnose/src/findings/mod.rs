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
mod cpu_bound;
mod exposed_communication;
mod few_channels;
mod gdr_disabled;
mod impossible_bandwidth;
mod management_nic;
mod mixed_inputs;
mod nccl_warnings;
pub mod network;
mod results_unvalidated;
mod socket_fallback;
mod sockets_forced;
mod straggler;
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
        }
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
}

type Rule = fn(&Context) -> Vec<Finding>;

/// Every rule, in report order (within a severity): whether the runs measured anything, then what the logs
/// say about the network, then the baselines against the fabric, then the training timeline.
pub const RULES: &[Rule] = &[
    test_failed::check,
    wrong_results::check,
    mixed_inputs::check,
    sockets_forced::check,
    socket_fallback::check,
    management_nic::check,
    virtual_interface::check,
    gdr_disabled::check,
    few_channels::check,
    nccl_warnings::check,
    results_unvalidated::check,
    impossible_bandwidth::check,
    baseline_below_link::check,
    bandwidth_collapse::check,
    exposed_communication::check,
    cpu_bound::check,
    straggler::check,
];

/// Runs every rule; the most severe findings first, rule order otherwise.
pub fn evaluate(ctx: &Context) -> Vec<Finding> {
    let mut out: Vec<Finding> = RULES.iter().flat_map(|rule| rule(ctx)).collect();
    out.sort_by_key(|f| std::cmp::Reverse(f.severity));
    out
}

/// Rounds for evidence: two decimals.
pub(crate) fn r2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}
