//! Analysis: turns the store's windows and the steps into findings — which link, on which node, slows which
//! job, why, and what to do.
//!
//! Shape (pure functions first, a thin task around them):
//! - [`input`]: [`AnalysisInput`], everything a rule may look at (node inventories, link activity and counter
//!   windows, steps, GPU and host figures, jobs and their NCCL conflicts, baselines), built from the store in
//!   one short pass ([`input::build`]) or by tests from synthetic values.
//! - One rule per file, each `fn evaluate(&AnalysisInput) -> Vec<Candidate>` and registered in [`RULES`]:
//!   [`management_nic`], [`underutilized`], [`degraded`], [`link_errors`], [`congestion`], [`straggler`],
//!   [`exposed_comm`], [`cpu_bound`], [`scaling`], [`nccl`].
//! - [`evaluate`] runs every rule, rolls the same finding on many nodes of one job up into one job-level
//!   finding ([`rollup`]), then links consequences to their root cause ([`causes`]).
//! - [`tracker`]: hysteresis in wall time — a candidate becomes an active finding only once it was seen for
//!   [`tracker::RAISE_AFTER`] evaluation intervals (and in as many consecutive evaluations), and clears once
//!   missing for [`tracker::CLEAR_AFTER`] intervals (and as many evaluations), however far the pacing
//!   stretches the evaluations apart; a consequence is raised only once its cause is, never before it.
//! - [`engine`]: the periodic task (every [`DEFAULT_INTERVAL`]); reads the store briefly per node, never
//!   blocks ingest; keeps the findings, the raised counters and the scaling figures; persists through
//!   [`history`].
//! - [`history`]: SQLite tables for finding history, baselines and per-scale throughput (beside `persist.rs`'s).
//! - [`baselines`]: operators' baselines (`POST /api/v1/baselines`): validation at the edge, bounds, the merge.
//! - [`trend`]: each job's own recent history, the reference a drop in its efficiency is measured against.
//!
//! A finding's `id` is stable: `kind:node[:device[:port]]` (or `kind:job=<job>` for job findings), so the same
//! problem keeps its id across evaluations and restarts.

pub mod activity;
pub mod baselines;
pub mod causes;
pub mod congestion;
pub mod cpu_bound;
pub mod degraded;
pub mod engine;
pub mod exposed_comm;
pub mod history;
pub mod input;
pub mod link_errors;
pub mod link_probes;
pub mod management_nic;
pub mod nccl;
pub mod rollup;
pub mod scaling;
pub mod scope;
pub mod straggler;
pub mod tcp_retransmits;
#[cfg(test)]
pub(crate) mod test_support;
pub mod tracker;
pub mod transmit_queue;
pub mod trend;
pub mod underutilized;
pub mod windows;

/// [`median`]'s value by selection (linear time, the slice left unordered): where the rules take a median of
/// a list they read no further.
pub(crate) use crate::steps::busy::median_select;
pub(crate) use commwatch_model::stats::median;
use std::collections::BTreeMap;
use std::time::Duration;

use commwatch_model::{Link, LinkClass};
use serde::{Deserialize, Serialize};

pub use causes::link_causes;
pub use commwatch_model::{FindingKind, Severity};
pub use engine::{AnalysisConfig, AnalysisHandle, FindingEvent};
pub use input::AnalysisInput;

/// Default evaluation period (the tracker's hysteresis is counted in it).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);

/// What a finding is about. `node` is empty only for job-wide findings (then `job` is set).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Subject {
    pub node: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub device: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub port: Option<String>,
    /// Network interface name (netdev), when the subject is one.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub interface: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub gpu: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub link: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub job: Option<String>,
    /// The NCCL setting a finding is about (`NCCL_SOCKET_IFNAME`, ...).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub setting: Option<String>,
}

impl Subject {
    pub fn node(node: &str) -> Subject {
        Subject {
            node: node.to_string(),
            ..Default::default()
        }
    }

    pub fn job(job: &str) -> Subject {
        Subject {
            job: Some(job.to_string()),
            ..Default::default()
        }
    }

    /// A link of a node: `device`/`port`, plus `interface` for an Ethernet or RoCE network interface and
    /// `gpu`/`link` for NVLink.
    pub fn link(node: &str, l: &Link) -> Subject {
        let netdev =
            matches!(l.key.class, LinkClass::Ethernet | LinkClass::Roce) && l.is_interface();
        Subject {
            node: node.to_string(),
            device: Some(l.key.device.clone()),
            port: Some(l.key.port.clone()),
            interface: netdev.then(|| l.key.device.clone()),
            gpu: l.gpu.clone(),
            link: l.link.clone(),
            job: None,
            setting: None,
        }
    }

    /// The stable part of a finding id: `node[:device[:port]]`, `gpu<N>`/link for NVLink, `:setting` for an
    /// NCCL setting, then `job=<id>`.
    pub fn key(&self) -> String {
        let mut parts: Vec<&str> = Vec::new();
        if !self.node.is_empty() {
            parts.push(&self.node);
        }
        for p in [
            &self.device,
            &self.port,
            &self.gpu,
            &self.link,
            &self.setting,
        ]
        .into_iter()
        .flatten()
        {
            parts.push(p);
        }
        let mut k = parts.join(":");
        if let Some(j) = &self.job {
            if !k.is_empty() {
                k.push(':');
            }
            k.push_str("job=");
            k.push_str(j);
        }
        k
    }
}

/// The numbers behind a finding. `measured` and `expected` are in `unit`; `over_steps` / `over_seconds` say
/// how much data it rests on; `details` holds the rule's other numbers (and the method used, where a rule has
/// several).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    pub measured: f64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub expected: Option<f64>,
    /// `bytes_per_second`, `ratio`, `errors_per_second`, `seconds`, `lanes`, ...
    pub unit: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub over_steps: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub over_seconds: Option<f64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub details: BTreeMap<String, serde_json::Value>,
}

impl Evidence {
    pub fn new(measured: f64, unit: &str) -> Evidence {
        Evidence {
            measured,
            unit: unit.to_string(),
            ..Default::default()
        }
    }

    pub fn expected(mut self, v: f64) -> Evidence {
        self.expected = Some(v);
        self
    }

    pub fn steps(mut self, n: usize) -> Evidence {
        self.over_steps = Some(u32::try_from(n).unwrap_or(u32::MAX));
        self
    }

    pub fn seconds(mut self, s: f64) -> Evidence {
        self.over_seconds = Some(s);
        self
    }

    pub fn detail(mut self, k: &str, v: impl Into<serde_json::Value>) -> Evidence {
        self.details.insert(k.to_string(), v.into());
        self
    }
}

/// What one rule concluded in one evaluation. The tracker turns repeated candidates into [`Finding`]s.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub kind: FindingKind,
    pub severity: Severity,
    pub subject: Subject,
    /// One sentence with the numbers.
    pub summary: String,
    pub evidence: Evidence,
    /// What to do.
    pub action: String,
    /// Id of the finding that explains this one (set by [`rollup`] or [`link_causes`], or by a rule that
    /// knows).
    pub caused_by: Option<String>,
    /// Ids of findings this one explains (set by [`rollup`] and [`link_causes`]).
    pub consequences: Vec<String>,
    /// Consecutive evaluations (and intervals of wall time) it must be seen in before the tracker raises it,
    /// 1..=[`tracker::RAISE_AFTER`] (the default). A rule lowers it only where its evidence cannot cross
    /// the line by noise: e.g. 1 for a counted error increase, which stays in the window once there.
    pub raise_after: u32,
}

impl Candidate {
    pub fn new(kind: FindingKind, severity: Severity, subject: Subject) -> Candidate {
        Candidate {
            kind,
            severity,
            subject,
            summary: String::new(),
            evidence: Evidence::default(),
            action: String::new(),
            caused_by: None,
            consequences: Vec::new(),
            raise_after: tracker::RAISE_AFTER,
        }
    }

    pub fn id(&self) -> String {
        finding_id(self.kind, &self.subject)
    }
}

/// The stable id of a finding: `kind:subject-key`.
pub fn finding_id(kind: FindingKind, subject: &Subject) -> String {
    format!("{}:{}", kind.as_str(), subject.key())
}

/// One finding as `GET /api/v1/findings` returns it (the API's keys, a contract).
///
/// Causes form a tree: a consequence names the one finding that explains it in `caused_by`, that finding
/// lists it in `consequences`, and following `caused_by` up ends at a root cause (`root`, no `caused_by`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    pub id: String,
    pub kind: FindingKind,
    pub severity: Severity,
    pub subject: Subject,
    pub summary: String,
    pub evidence: Evidence,
    pub action: String,
    /// Seconds since the Unix epoch (fractional) when it was raised first / last seen active.
    pub first_seen_unix_s: f64,
    pub last_seen_unix_s: f64,
    pub active: bool,
    /// True for a root cause: no other finding explains this one (`caused_by` is null). Always
    /// `caused_by.is_none()`; set wherever `caused_by` is ([`tracker`]).
    #[serde(default)]
    pub root: bool,
    /// Id of the finding that explains this one (its cause), when another finding does.
    #[serde(default)]
    pub caused_by: Option<String>,
    /// Ids of the findings this one explains.
    #[serde(default)]
    pub consequences: Vec<String>,
}

impl Finding {
    /// Whether this is a job-level roll-up of the same finding on many nodes (see [`rollup`]).
    pub fn is_rollup(&self) -> bool {
        rollup::is_rollup(self.kind, &self.subject)
    }
}

/// The evidence detail of `management_network_traffic` that says whether the NIC's node causes the traffic
/// ([`CAUSE`]) or is a ring [`NEIGHBOUR`] of one that does (read by [`causes`] to file neighbours under their
/// cause).
pub const RING_ROLE: &str = "ring_role";
pub const CAUSE: &str = "cause";
pub const NEIGHBOUR: &str = "neighbour";

/// A rule: a pure function of the input.
pub type Rule = fn(&AnalysisInput) -> Vec<Candidate>;

/// Every rule, in evaluation order. A new finding is one new file plus one line here.
pub const RULES: &[(&str, Rule)] = &[
    ("management_nic", management_nic::evaluate),
    ("underutilized", underutilized::evaluate),
    ("degraded", degraded::evaluate),
    ("link_errors", link_errors::evaluate),
    ("congestion", congestion::evaluate),
    ("straggler", straggler::evaluate),
    ("exposed_comm", exposed_comm::evaluate),
    ("cpu_bound", cpu_bound::evaluate),
    ("scaling", scaling::evaluate),
    ("nccl", nccl::evaluate),
    ("tcp_retransmits", tcp_retransmits::evaluate),
    ("transmit_queue", transmit_queue::evaluate),
];

/// Runs every rule on `input`, rolls identical node-level findings of a job up ([`rollup`]) and links
/// consequences to root causes ([`link_causes`]). Deterministic: sorted by id.
pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    evaluate_keyed(input).into_iter().map(|(_, c)| c).collect()
}

/// [`evaluate`] with each candidate's id ([`Candidate::id`]) beside it, formatted once per candidate: what
/// the tracker takes ([`tracker::Tracker::update_keyed`]). Sorted by id (stable).
pub fn evaluate_keyed(input: &AnalysisInput) -> Vec<(String, Candidate)> {
    // Each candidate's id formatted once (a comparison that formatted both ids was most of the sort).
    let mut keyed: Vec<(String, Candidate)> = RULES
        .iter()
        .flat_map(|(_, r)| r(input))
        .map(|c| (c.id(), c))
        .collect();
    // One candidate per id (a rule that found the same subject twice keeps the worse one).
    keyed.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.severity.cmp(&a.1.severity)));
    keyed.dedup_by(|a, b| a.0 == b.0);
    let (mut ids, mut out): (Vec<String>, Vec<Candidate>) = keyed.into_iter().unzip();
    rollup::roll_up(input, &mut out);
    // The roll-ups are appended; neither step changes a subject, so the ids formatted above still hold.
    let rolled: Vec<String> = out[ids.len()..].iter().map(Candidate::id).collect();
    ids.extend(rolled);
    causes::link_causes_keyed(input, &mut out, &ids);
    let mut keyed: Vec<(String, Candidate)> = ids.into_iter().zip(out).collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    keyed
}

/// `v` bytes/s as `x.xx GB/s`.
pub(crate) fn gbs(v: f64) -> String {
    format!("{:.2} GB/s", v / 1e9)
}

/// Rounds to 4 significant decimals for evidence (keeps JSON readable, values exact enough to assert).
pub(crate) fn r4(v: f64) -> f64 {
    (v * 1e4).round() / 1e4
}
