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
pub mod near_median;
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
use std::borrow::Cow;
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
        let mut k = String::new();
        self.write_key(&mut k);
        k
    }

    /// Appends [`Subject::key`] to `out` (one string for a whole id: [`finding_id`]).
    fn write_key(&self, out: &mut String) {
        let start = out.len();
        let node = (!self.node.is_empty()).then_some(&self.node);
        let parts = [
            node,
            self.device.as_ref(),
            self.port.as_ref(),
            self.gpu.as_ref(),
            self.link.as_ref(),
            self.setting.as_ref(),
        ];
        for (k, p) in parts.into_iter().flatten().enumerate() {
            if k > 0 {
                out.push(':');
            }
            out.push_str(p);
        }
        if let Some(j) = &self.job {
            if out.len() > start {
                out.push(':');
            }
            out.push_str("job=");
            out.push_str(j);
        }
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
    /// `bytes_per_second`, `ratio`, `errors_per_second`, `seconds`, `lanes`, ... (a rule's fixed word,
    /// borrowed: a candidate is built at every evaluation).
    pub unit: Cow<'static, str>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub over_steps: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub over_seconds: Option<f64>,
    /// Keyed by the rule's fixed names, borrowed (most candidates refresh a finding and are dropped).
    #[serde(skip_serializing_if = "BTreeMap::is_empty", default)]
    pub details: BTreeMap<Cow<'static, str>, serde_json::Value>,
}

impl Evidence {
    pub fn new(measured: f64, unit: impl Into<Cow<'static, str>>) -> Evidence {
        Evidence {
            measured,
            unit: unit.into(),
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

    pub fn detail(
        mut self,
        k: impl Into<Cow<'static, str>>,
        v: impl Into<serde_json::Value>,
    ) -> Evidence {
        self.details.insert(k.into(), v.into());
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
    /// What to do: most rules' advice is fixed text, borrowed rather than copied at each evaluation.
    pub action: Cow<'static, str>,
    /// Id of the finding that explains this one (set by [`rollup`] or [`link_causes`], or by a rule that
    /// knows).
    pub caused_by: Option<String>,
    /// Ids of findings this one explains (set by [`rollup`] and [`link_causes`]).
    pub consequences: Vec<String>,
    /// Consecutive evaluations (and intervals of wall time) it must be seen in before the tracker raises it,
    /// 1..=[`tracker::RAISE_AFTER`] (the default). A rule lowers it only where its evidence cannot cross
    /// the line by noise: e.g. 1 for a counted error increase, which stays in the window once there.
    pub raise_after: u32,
    /// The figures `summary` and `evidence` are written from, when they are not written yet
    /// ([`Candidate::write_words`]): `summary` is then empty and `evidence` holds its figures but no details.
    /// [`evaluate`] writes them; [`evaluate_keyed`] leaves them to the tracker, which writes them only for a
    /// finding raised or whose figures changed (most candidates refresh a finding with the same figures, or
    /// stay pending).
    pub words: Option<Box<Words>>,
}

/// The figures a candidate's words are written from (one variant per rule that leaves its words unwritten):
/// equal figures (and subjects) give equal words.
#[derive(Debug, Clone, PartialEq)]
pub enum Words {
    Underutilized(underutilized::Words),
}

impl Words {
    /// Writes the summary of a finding about `subject` into `summary` (cleared first: its room is kept) and
    /// returns its evidence.
    pub(crate) fn write(&self, subject: &Subject, summary: &mut String) -> Evidence {
        match self {
            Words::Underutilized(w) => w.write(subject, summary),
        }
    }
}

impl Candidate {
    pub fn new(kind: FindingKind, severity: Severity, subject: Subject) -> Candidate {
        Candidate {
            kind,
            severity,
            subject,
            summary: String::new(),
            evidence: Evidence::default(),
            action: Cow::Borrowed(""),
            caused_by: None,
            consequences: Vec::new(),
            raise_after: tracker::RAISE_AFTER,
            words: None,
        }
    }

    pub fn id(&self) -> String {
        finding_id(self.kind, &self.subject)
    }

    /// Writes the summary and evidence from [`Candidate::words`] when they are not written yet, and returns
    /// the figures they were written from (`None`: they were written already).
    pub fn write_words(&mut self) -> Option<Box<Words>> {
        let words = self.words.take()?;
        self.evidence = words.write(&self.subject, &mut self.summary);
        Some(words)
    }
}

/// The stable id of a finding: `kind:subject-key`.
pub fn finding_id(kind: FindingKind, subject: &Subject) -> String {
    let kind = kind.as_str();
    let mut id = String::with_capacity(kind.len() + 1 + subject.node.len() + 40);
    id.push_str(kind);
    id.push(':');
    subject.write_key(&mut id);
    id
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

/// The name of the rule [`scaling::evaluate`] in [`RULES`].
const SCALING: &str = "scaling";
/// The names of [`straggler::evaluate`], [`exposed_comm::evaluate`] and [`underutilized::evaluate_unwritten`]
/// in [`RULES`]: they read each node's fabric burst rate or busy share, worked out once per evaluation for
/// them and the jobs' figures ([`NodeFigures`]).
const STRAGGLER: &str = "straggler";
const EXPOSED_COMM: &str = "exposed_comm";
const UNDERUTILIZED: &str = "underutilized";

/// Every rule, in evaluation order. A new finding is one new file plus one line here.
pub const RULES: &[(&str, Rule)] = &[
    ("management_nic", management_nic::evaluate),
    (UNDERUTILIZED, underutilized::evaluate_unwritten),
    ("degraded", degraded::evaluate),
    ("link_errors", link_errors::evaluate),
    ("congestion", congestion::evaluate),
    (STRAGGLER, straggler::evaluate),
    (EXPOSED_COMM, exposed_comm::evaluate),
    ("cpu_bound", cpu_bound::evaluate),
    (SCALING, scaling::evaluate),
    ("nccl", nccl::evaluate),
    ("tcp_retransmits", tcp_retransmits::evaluate),
    ("transmit_queue", transmit_queue::evaluate),
];

/// Runs every rule on `input`, rolls identical node-level findings of a job up ([`rollup`]) and links
/// consequences to root causes ([`link_causes`]). Deterministic: sorted by id.
pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    let written = |(_, mut c): (String, Candidate)| {
        c.write_words();
        c
    };
    evaluate_keyed(input).into_iter().map(written).collect()
}

/// [`evaluate`] with each candidate's id ([`Candidate::id`]) beside it, formatted once per candidate: what
/// the tracker takes ([`tracker::Tracker::update_keyed`]). Sorted by id (stable). Candidates may come with
/// their words unwritten ([`Candidate::words`]).
pub fn evaluate_keyed(input: &AnalysisInput) -> Vec<(String, Candidate)> {
    keyed_with(input, &NodeFigures::new(input), None)
}

/// [`evaluate_keyed`] and the jobs' figures ([`scaling::job_figures`]), worked out once for both (the
/// `scaling` rule reads them, and an evaluation reports them).
pub(crate) fn evaluate_keyed_with_figures(
    input: &AnalysisInput,
) -> (Vec<(String, Candidate)>, Vec<scaling::JobFigures>) {
    let nodes = NodeFigures::new(input);
    let figures = scaling::job_figures_with(input, &nodes);
    (keyed_with(input, &nodes, Some(&figures)), figures)
}

/// [`evaluate_keyed`], the nodes' shared figures read from `nodes`, the `scaling` rule on `figures` when
/// given.
fn keyed_with(
    input: &AnalysisInput,
    nodes: &NodeFigures<'_>,
    figures: Option<&[scaling::JobFigures]>,
) -> Vec<(String, Candidate)> {
    let run = |(name, rule): &(&str, Rule)| match (*name, figures) {
        (SCALING, Some(f)) => scaling::evaluate_with(input, f),
        (STRAGGLER, _) => straggler::evaluate_with(input, nodes),
        (EXPOSED_COMM, _) => exposed_comm::evaluate_with(input, nodes),
        (UNDERUTILIZED, _) => underutilized::evaluate_unwritten_with(input, nodes),
        _ => rule(input),
    };
    // Each rule's list moved in once, into room for all (not grown candidate by candidate).
    let lists: Vec<Vec<Candidate>> = RULES.iter().map(run).collect();
    let mut found: Vec<Candidate> = Vec::with_capacity(lists.iter().map(Vec::len).sum());
    for mut list in lists {
        found.append(&mut list);
    }
    // Each candidate's id formatted once (a comparison that formatted both ids was most of the sort), sorted
    // with the candidate's place: a candidate is moved once, not at each step of the sort.
    let mut order: Vec<(String, usize)> = found.iter().map(Candidate::id).zip(0..).collect();
    // One candidate per id (a rule that found the same subject twice keeps the worse one, the first found
    // among equals).
    order.sort_unstable_by(|a, b| {
        let severity = |k: usize| found[k].severity;
        a.0.cmp(&b.0)
            .then(severity(b.1).cmp(&severity(a.1)))
            .then(a.1.cmp(&b.1))
    });
    order.dedup_by(|a, b| a.0 == b.0);
    // Room for the roll-ups too (a few per job).
    let (mut ids, mut out) = (
        Vec::with_capacity(order.len()),
        Vec::with_capacity(order.len() + 8),
    );
    for (id, c) in in_order(found, order) {
        ids.push(id);
        out.push(c);
    }
    rollup::roll_up_keyed(input, &mut out, &ids);
    // The roll-ups are appended; neither step changes a subject, so the ids formatted above still hold.
    let ruled = ids.len();
    let rolled: Vec<String> = out[ruled..].iter().map(Candidate::id).collect();
    ids.extend(rolled);
    causes::link_causes_keyed(input, &mut out, &ids);
    // By id again (stable: a roll-up whose id a rule's candidate has comes after it): the rules' candidates
    // are in id order already, the roll-ups are sorted and merged in.
    let mut rolled: Vec<(String, usize)> = ids.drain(ruled..).zip(ruled..).collect();
    rolled.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut rolled = rolled.into_iter().peekable();
    let mut order: Vec<(String, usize)> = Vec::with_capacity(out.len());
    for (k, id) in ids.into_iter().enumerate() {
        while let Some(r) = rolled.next_if(|(r, _)| *r < id) {
            order.push(r);
        }
        order.push((id, k));
    }
    order.extend(rolled);
    in_order(out, order).collect()
}

/// `items` in the order of `order`'s places, each with its key (a place given twice or out of range yields
/// nothing; items at no place are dropped).
fn in_order<K, T>(items: Vec<T>, order: Vec<(K, usize)>) -> impl Iterator<Item = (K, T)> {
    let mut slots: Vec<Option<T>> = items.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(move |(k, at)| Some((k, slots.get_mut(at)?.take()?)))
}

/// Figures of a node that several rules read, each a walk over every link of the node or of each of its
/// steps (a demo node's 64 steps list 161 links each), worked out at most once per evaluation for the rules
/// that read them: [`input::NodeInput::fabric_burst_rate`] (straggler, exposed communication) and
/// [`input::NodeInput::fabric_busy_share`] (the exposed-communication share: the jobs' figures, exposed
/// communication, underutilization).
pub(crate) struct NodeFigures<'i> {
    nodes: &'i [input::NodeInput],
    rates: Vec<std::cell::OnceCell<Option<f64>>>,
    busy: Vec<std::cell::OnceCell<Option<f64>>>,
}

impl<'i> NodeFigures<'i> {
    pub(crate) fn new(input: &'i AnalysisInput) -> NodeFigures<'i> {
        NodeFigures {
            nodes: &input.nodes,
            rates: vec![std::cell::OnceCell::new(); input.nodes.len()],
            busy: vec![std::cell::OnceCell::new(); input.nodes.len()],
        }
    }

    /// `n`'s place in the input's list of nodes (found by its address), `None` for a node not of the input.
    fn place(&self, n: &input::NodeInput) -> Option<usize> {
        let size = std::mem::size_of::<input::NodeInput>().max(1);
        let k = (n as *const input::NodeInput as usize)
            .checked_sub(self.nodes.as_ptr() as usize)
            .map(|offset| offset / size)?;
        self.nodes.get(k).filter(|x| std::ptr::eq(*x, n)).map(|_| k)
    }

    /// `n`'s burst rate, bytes/s: kept for a node of the input, worked out each time for any other.
    pub(crate) fn burst_rate(&self, n: &input::NodeInput) -> Option<f64> {
        match self.place(n).and_then(|k| self.rates.get(k)) {
            Some(rate) => *rate.get_or_init(|| n.fabric_burst_rate()),
            None => n.fabric_burst_rate(),
        }
    }

    /// `n`'s busiest fabric port's busy share: kept for a node of the input, worked out each time for any
    /// other.
    pub(crate) fn busy_share(&self, n: &input::NodeInput) -> Option<f64> {
        match self.place(n).and_then(|k| self.busy.get(k)) {
            Some(busy) => *busy.get_or_init(|| n.fabric_busy_share()),
            None => n.fabric_busy_share(),
        }
    }

    /// [`exposed_comm::exposed_share`] of `n`, its busy share read from here.
    pub(crate) fn exposed_share(&self, n: &input::NodeInput) -> Option<f64> {
        exposed_comm::exposed_share_given(n, || self.busy_share(n))
    }
}

/// A link's figures step after step ([`input::step_figure`]'s answer), looked for first where the link was
/// in the step before: a node's steps list its links in one order, so a walk over its steps for one link
/// compares one pointer per step instead of scanning each step's links (a demo node's steps carry 161 links,
/// and the rules walked 64 steps for each fabric and management link).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct StepFigures {
    /// Where the link was in the last step it was found in.
    at: usize,
}

impl StepFigures {
    /// The figures of `link` in step `s`, as [`input::step_figure`] finds them: by the shared link (a node's
    /// links are distinct, so one step lists each at most once), else by its key.
    pub(crate) fn of<'s>(
        &mut self,
        s: &'s crate::steps::NodeStep,
        link: &std::sync::Arc<Link>,
    ) -> Option<&'s crate::steps::StepLink> {
        if let Some(x) = s.links.get(self.at) {
            if std::sync::Arc::ptr_eq(&x.link, link) {
                return Some(x);
            }
        }
        let at = s
            .links
            .iter()
            .position(|x| std::sync::Arc::ptr_eq(&x.link, link))
            .or_else(|| s.links.iter().position(|x| x.link.key == link.key))?;
        self.at = at;
        s.links.get(at)
    }
}

/// A fabric link's achieved rate step after step, as [`StepFigures`] finds its figures, read from each step's
/// fabric figures in brief ([`crate::steps::NodeStep::fabric`]: a few links, not a demo node's 161) and looked
/// for first where the link was in the step before.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FabricStepFigures {
    /// Where the link was in the last brief it was found in.
    at: usize,
}

impl FabricStepFigures {
    /// `(confident, achieved bytes/s)` of `link` in step `s`, from the figures [`input::step_figure`] finds:
    /// by the shared link (a link on the fabric is in the brief when the step lists it), else by its key.
    pub(crate) fn of(
        &mut self,
        s: &crate::steps::NodeStep,
        link: &std::sync::Arc<Link>,
    ) -> Option<(bool, Option<f64>)> {
        let brief = s.fabric();
        let shared = |x: &crate::steps::FabricFigure| std::sync::Arc::ptr_eq(&x.link, link);
        let found = match brief.get(self.at).filter(|x| shared(x)) {
            Some(x) => Some(x),
            None if crate::steps::FabricFigure::on_fabric(link) => {
                brief.iter().position(shared).and_then(|at| {
                    self.at = at;
                    brief.get(at)
                })
            }
            None => None,
        };
        if let Some(x) = found {
            return Some((x.confident, x.achieved_bytes_per_second));
        }
        input::step_figure(s, link).map(|x| (x.confident, x.achieved_bytes_per_second))
    }
}

/// `v` bytes/s as `x.xx GB/s`.
pub(crate) fn gbs(v: f64) -> String {
    Gbs(v).to_string()
}

/// [`gbs`] written where it is formatted (no string of its own): `format!("{}", Gbs(v)) == gbs(v)`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gbs(pub f64);

impl std::fmt::Display for Gbs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2} GB/s", self.0 / 1e9)
    }
}

/// Rounds to 4 significant decimals for evidence (keeps JSON readable, values exact enough to assert).
pub(crate) fn r4(v: f64) -> f64 {
    (v * 1e4).round() / 1e4
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps of one node listing its links in changing orders, some steps without a link, some with a link
    /// announced again (a new `Arc` of the same key): the figures found step by step are `step_figure`'s.
    #[test]
    fn step_figures_found_where_the_link_was_are_step_figures() {
        let links = six_links(|_, _| {});
        for l in &links {
            let mut f = StepFigures::default();
            for s in &shuffled_steps(&links) {
                let want = input::step_figure(s, l).map(|x| x.tx_bytes);
                assert_eq!(f.of(s, l).map(|x| x.tx_bytes), want, "step {}", s.index);
            }
        }
    }

    /// The same with fabric, management and NVLink links (a fabric figure is read from the step's brief).
    #[test]
    fn fabric_step_figures_are_step_figures() {
        use commwatch_model::{Endpoint, LinkRole};
        let links = six_links(|k, l| match k {
            1 => l.role = LinkRole::Management,
            2 => {
                l.key.class = LinkClass::Nvlink;
                l.endpoint = Endpoint::GpuLink;
            }
            3 => {
                l.key.class = LinkClass::Ethernet;
                l.endpoint = Endpoint::Interface;
            }
            _ => {}
        });
        let steps = shuffled_steps(&links);
        let mut found = 0;
        for l in &links {
            let mut f = FabricStepFigures::default();
            for s in &steps {
                let want =
                    input::step_figure(s, l).map(|x| (x.confident, x.achieved_bytes_per_second));
                found += usize::from(want.is_some());
                assert_eq!(f.of(s, l), want, "step {} port {}", s.index, l.key.port);
            }
        }
        assert!(found > 200, "{found}");
    }

    /// Six links of one node: the fixture's HCA port as `port` 0..6, each changed by `change(k, link)`.
    fn six_links(change: impl Fn(usize, &mut Link)) -> Vec<std::sync::Arc<Link>> {
        use crate::analysis::test_support::{hca_step, periodic, HcaFigures};
        let base = hca_step("n", 0, periodic(0, 1), HcaFigures::short_burst(true));
        let link_of = |port: usize| {
            let mut l = Link::clone(&base.links[0].link);
            l.key.port = port.to_string();
            change(port, &mut l);
            std::sync::Arc::new(l)
        };
        (0..6).map(link_of).collect()
    }

    /// 60 steps listing `links` in changing orders, some steps without a link, some with a link announced
    /// again (a new `Arc` of the same key), figures and confidence varying.
    fn shuffled_steps(links: &[std::sync::Arc<Link>]) -> Vec<crate::steps::NodeStep> {
        use crate::analysis::test_support::{hca_step, periodic, HcaFigures};
        let mut steps = Vec::new();
        let mut seed = 7u64;
        for i in 0..60u64 {
            let mut s = hca_step("n", i, periodic(i, 1), HcaFigures::short_burst(true));
            let proto = s.links.pop().expect("a link");
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            for (k, l) in links.iter().enumerate() {
                // Every 7th step drops a link; every 11th lists a copy of the key (announced again).
                if (seed >> (k + 3)) % 7 == 3 {
                    continue;
                }
                let link = match (seed >> (k + 11)) % 11 {
                    0 => std::sync::Arc::new(Link::clone(l)),
                    _ => l.clone(),
                };
                s.links.push(crate::steps::StepLink {
                    link,
                    tx_bytes: i * 100 + k as u64,
                    achieved_bytes_per_second: (!(seed >> (k + 17)).is_multiple_of(5))
                        .then_some((i * 1000 + k as u64) as f64),
                    confident: !(seed >> (k + 23)).is_multiple_of(4),
                    ..proto.clone()
                });
            }
            // Mostly one order; now and then another.
            if i % 9 == 4 {
                s.links.reverse();
            }
            if i % 13 == 6 {
                let k = 2.min(s.links.len());
                s.links.rotate_left(k);
            }
            steps.push(s);
        }
        steps
    }

    /// Nodes whose steps measured bursts at different rates: each node's kept rate is its own, asked once or
    /// many times; a node from outside the input is worked out.
    #[test]
    fn burst_rates_kept_per_node_are_each_node_s_own() {
        use crate::analysis::test_support::{hca_step, periodic, HcaFigures};
        let node = |name: &str, rate: f64| input::NodeInput {
            name: name.into(),
            steps: (0..5u64)
                .map(|i| {
                    let f = HcaFigures {
                        achieved: Some(rate * (1 + i) as f64),
                        ..HcaFigures::short_burst(true)
                    };
                    std::sync::Arc::new(hca_step(name, i, periodic(i, 1), f))
                })
                .collect(),
            ..input::NodeInput::default()
        };
        let input = AnalysisInput {
            nodes: vec![node("a", 1e9), node("b", 2e9), node("c", 3e9)],
            ..AnalysisInput::default()
        };
        let rates = NodeFigures::new(&input);
        for _ in 0..2 {
            let kept: Vec<Option<f64>> = input.nodes.iter().map(|n| rates.burst_rate(n)).collect();
            assert_eq!(kept, [Some(3e9), Some(6e9), Some(9e9)]);
            let busy: Vec<Option<f64>> = input.nodes.iter().map(|n| rates.busy_share(n)).collect();
            let own: Vec<Option<f64>> = input.nodes.iter().map(|n| n.fabric_busy_share()).collect();
            assert_eq!(busy, own);
        }
        let outside = node("d", 4e9);
        assert_eq!(rates.burst_rate(&outside), Some(12e9));
        assert_eq!(rates.busy_share(&outside), outside.fabric_busy_share());
        assert_eq!(
            rates.burst_rate(&input.nodes[1]),
            input.nodes[1].fabric_burst_rate()
        );
    }

    #[test]
    fn items_taken_in_order_come_once_each_with_their_keys() {
        let items = vec!["a".to_string(), "b".into(), "c".into(), "d".into()];
        // "b" at no place (dropped), "c" asked twice (given once), a place past the end (nothing).
        let order = vec![(1, 3), (2, 0), (3, 2), (4, 2), (5, 9)];
        let got: Vec<(u32, String)> = in_order(items, order).collect();
        assert_eq!(got, [(1, "d".into()), (2, "a".into()), (3, "c".into())]);
    }

    /// The key as it was formatted: its parts joined by `:`, then `job=`.
    fn joined_key(s: &Subject) -> String {
        let mut parts: Vec<&str> = Vec::new();
        if !s.node.is_empty() {
            parts.push(&s.node);
        }
        let rest = [&s.device, &s.port, &s.gpu, &s.link, &s.setting];
        parts.extend(rest.into_iter().flatten().map(String::as_str));
        let mut k = parts.join(":");
        if let Some(j) = &s.job {
            if !k.is_empty() {
                k.push(':');
            }
            k.push_str("job=");
            k.push_str(j);
        }
        k
    }

    #[test]
    fn ids_written_in_one_string_are_the_joined_keys() {
        let some = |v: &str| Some(v.to_string());
        let mut subjects = vec![Subject::default(), Subject::node("n1"), Subject::job("j")];
        for mask in 0u32..128 {
            let pick = |bit: u32, v: &str| ((mask >> bit) & 1 == 1).then(|| v.to_string());
            subjects.push(Subject {
                node: if mask & 1 == 1 {
                    "node-7".into()
                } else {
                    String::new()
                },
                device: pick(1, "mlx5_0"),
                port: pick(2, if mask & 64 == 0 { "1" } else { "" }),
                gpu: pick(3, "3"),
                link: pick(4, "12"),
                setting: pick(5, "NCCL_SOCKET_IFNAME"),
                job: pick(6, "train-a"),
                interface: some("eth0"),
            });
        }
        subjects.push(Subject {
            device: some(""),
            job: some("j"),
            ..Default::default()
        });
        for s in &subjects {
            assert_eq!(s.key(), joined_key(s), "{s:?}");
            let id = finding_id(FindingKind::LinkErrors, s);
            assert_eq!(id, format!("link_errors:{}", joined_key(s)));
        }
    }

    #[test]
    fn the_rules_given_shared_figures_are_found_by_their_names() {
        for name in [SCALING, STRAGGLER, EXPOSED_COMM, UNDERUTILIZED] {
            let named = RULES.iter().filter(|(n, _)| *n == name).count();
            assert_eq!(named, 1, "{name}");
        }
        let input = AnalysisInput::default();
        let figures = scaling::job_figures(&input);
        assert_eq!(evaluate_keyed_with_figures(&input).1, figures);
        let nodes = NodeFigures::new(&input);
        assert_eq!(
            keyed_with(&input, &nodes, Some(&figures)),
            keyed_with(&input, &nodes, None)
        );
    }

    #[test]
    fn gbs_written_in_place_reads_as_its_own_string() {
        for v in [0.0, 1.0, 12.5e9, 199_999_999.9, 3.456e12, -2e9, f64::NAN] {
            assert_eq!(format!("{}", Gbs(v)), format!("{:.2} GB/s", v / 1e9));
            assert_eq!(gbs(v), format!("{:.2} GB/s", v / 1e9));
        }
    }
}
