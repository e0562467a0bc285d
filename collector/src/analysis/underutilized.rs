//! `link_underutilized`: a fabric link whose achieved bandwidth during communication stays far below its
//! capacity — and below the bare-communication baseline, when one is known — sustained.
//!
//! Data: the node's confident steps (achieved bandwidth = bytes ÷ active time, only where the burst spans
//! enough samples; see `steps`). Fires when at least [`MIN_STEPS`] confident steps with traffic exist and at
//! least [`SUSTAINED_SHARE`] of them have utilisation below [`UTILIZATION_BELOW`] (and achieved below
//! [`BASELINE_SHARE_BELOW`] × the baseline's bus bandwidth when a baseline is known). Without steps for the
//! node, the link's resolved bursts stand in for steps (same confidence rule: a burst spanning at least three
//! samples); the evidence says which was used. A figure from a burst shorter than a few samples is a lower
//! bound (`confident: false`, or activity not `resolved`) and is never used.
//!
//! commwatch's own probes ([`super::link_probes`]) are a bare baseline per link: with a usable probe between
//! the node and a peer of its job (ok, at most [`super::link_probes::PROBE_MAX_AGE_S`] old), achieved must also
//! be below [`BASELINE_SHARE_BELOW`] × the probe's figure, and the words say "the bare link gives X (probe
//! node-a -> node-b at T), the job gets Y" (`probe_bytes_per_second`, `probe_share`). A declined, failed or
//! older probe is only named (`probe_unused`): no verdict, severity or action rests on it.
//!
//! Severity warning only when the link's own rate shows and costs the job time: the node's GPU data show its
//! communication exposed (at least [`EXPOSED_SHARE_ABOVE`] of the time, see `exposed_comm`) and running mostly
//! apart from compute (the fabric's busy share and the GPUs' compute share overlap by at most
//! [`OVERLAP_AT_MOST`] of the time). Communication that overlaps compute is paced by it — gradient buckets go
//! out as backward produces them, here or on a slower node — so its rate says nothing about the link; without
//! GPU data the samples cannot tell the two apart. Otherwise info, the evidence saying whether the
//! communication was `hidden`, `overlapped` or its cost `unknown`. Info as well when another finding explains
//! it.

use super::exposed_comm::{compute_share, EXPOSED_SHARE_ABOVE};
use super::input::{AnalysisInput, BareBaseline, LinkInput, NodeInput};
use super::link_probes::ProbeBaseline;
use super::{
    median_select, r4, Candidate, Evidence, FabricStepFigures, FindingKind, Gbs, NodeFigures,
    Severity, Subject,
};
use crate::collectives::CollectiveSummary;
use std::fmt::Write as _;

/// Confident steps (or resolved bursts) needed.
pub const MIN_STEPS: usize = 5;
/// Utilisation (achieved ÷ capacity) below which a step counts as underutilised.
pub const UTILIZATION_BELOW: f64 = 0.5;
/// With a baseline: achieved below this share of the baseline's bus bandwidth.
pub const BASELINE_SHARE_BELOW: f64 = 0.7;
/// Share of the steps that must be underutilised.
pub const SUSTAINED_SHARE: f64 = 0.8;
/// Most overlap of communication with compute (share of the time) under which the link's rate is its own.
pub const OVERLAP_AT_MOST: f64 = 0.1;

/// Whether the node's communication costs its job time at the links' own rate, as far as its GPU data tell:
/// `(severity, what the communication was)`; its fabric busy share read from `nodes`.
fn cost(n: &NodeInput, nodes: &NodeFigures<'_>) -> (Severity, &'static str) {
    let overlap = match (nodes.busy_share(n), compute_share(n)) {
        (Some(b), Some(c)) => b + c - 1.0,
        _ => 0.0,
    };
    match nodes.exposed_share(n) {
        Some(x) if x >= EXPOSED_SHARE_ABOVE && overlap <= OVERLAP_AT_MOST => {
            (Severity::Warning, "exposed")
        }
        Some(x) if x >= EXPOSED_SHARE_ABOVE => (Severity::Info, "overlapped"),
        Some(_) => (Severity::Info, "hidden"),
        None => (Severity::Info, "unknown"),
    }
}

/// Achieved rates of fabric link `l` of `n` into `rates` (cleared first): per confident step, or per
/// resolved burst without steps; returns which was used.
fn achieved_rates(n: &NodeInput, l: &LinkInput, rates: &mut Vec<f64>) -> &'static str {
    rates.clear();
    if !n.steps.is_empty() {
        let mut figures = FabricStepFigures::default();
        rates.extend(
            n.steps
                .iter()
                .filter_map(|s| figures.of(s, &l.link))
                .filter(|(confident, _)| *confident)
                .filter_map(|(_, achieved)| achieved),
        );
        return "steps";
    }
    if let Some(a) = &l.activity {
        if a.resolved && a.burst_rate_bytes_per_second.is_some() {
            // Per complete burst: bytes over its interior-corrected length is not available per burst; use
            // the window's median interior rate for each complete burst.
            let r = a.burst_rate_bytes_per_second.unwrap_or(0.0);
            rates.extend(std::iter::repeat_n(r, a.complete_bursts()));
        }
    }
    "link_activity"
}

/// The rule's candidates, their words written.
pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    let mut out = evaluate_unwritten(input);
    for c in &mut out {
        c.write_words();
    }
    out
}

/// The rule's candidates, their words left unwritten ([`Candidate::words`]): what [`super::RULES`] runs.
pub fn evaluate_unwritten(input: &AnalysisInput) -> Vec<Candidate> {
    evaluate_unwritten_with(input, &NodeFigures::new(input))
}

/// [`evaluate_unwritten`], each node's fabric busy share read from `nodes` (shared with the other rules that
/// read it).
pub(crate) fn evaluate_unwritten_with(
    input: &AnalysisInput,
    nodes: &NodeFigures<'_>,
) -> Vec<Candidate> {
    let mut out = Vec::new();
    let mut rates: Vec<f64> = Vec::new();
    for n in &input.nodes {
        // Worked out once a link qualifies: a node with nothing to say does not pay for its GPU figures.
        let mut cost_memo = None;
        let mut cost_of = || *cost_memo.get_or_insert_with(|| cost(n, nodes));
        let job = input
            .job_of(&n.name)
            .map(|j| j.id.as_str())
            .or_else(|| n.steps.iter().rev().find_map(|s| s.job.as_deref()));
        let baseline = input.bare_baseline(job);
        let probe = input.link_probe(&n.name, job);
        let bare_link = usable_figure(probe);
        let collective = costliest_inter_node(input, job);
        let before = out.len();
        for l in n.fabric_links() {
            let Some(cap) = l.link.capacity_bytes_per_second.filter(|c| *c > 0.0) else {
                continue;
            };
            let source = achieved_rates(n, l, &mut rates);
            if rates.len() < MIN_STEPS {
                continue;
            }
            let limit = match baseline {
                Some(b) => {
                    (UTILIZATION_BELOW * cap).min(BASELINE_SHARE_BELOW * b.busbw_bytes_per_second)
                }
                None => UTILIZATION_BELOW * cap,
            };
            let limit = bare_link.map_or(limit, |bw| limit.min(BASELINE_SHARE_BELOW * bw));
            let low = rates.iter().filter(|r| **r < limit).count();
            if (low as f64) < SUSTAINED_SHARE * rates.len() as f64 {
                continue;
            }
            let steps = rates.len();
            let achieved = median_select(&mut rates).unwrap_or(0.0);
            let (severity, exposure) = cost_of();
            let mut c = Candidate::new(
                FindingKind::LinkUnderutilized,
                severity,
                Subject::link(&n.name, &l.link),
            );
            // The figures now, the words when the tracker needs them.
            c.evidence = Evidence::new(r4(achieved), "bytes_per_second")
                .expected(cap)
                .steps(steps);
            c.action = if baseline
                .is_some_and(|b| b.busbw_bytes_per_second >= UTILIZATION_BELOW * cap)
                || bare_link.is_some_and(|bw| bw >= UTILIZATION_BELOW * cap)
            {
                "The bare baseline reaches the link's rate but training does not: look for overlap, synchronisation \
                 or contention (stragglers, other traffic, NCCL channels/algorithm), not the link itself."
                    .into()
            } else {
                "Compare with a bare nccl-tests all_reduce_perf run on these nodes (commwatch baseline import); if it \
                 is also low, check the port's rate/width, NCCL_IB_HCA and GPU-NIC affinity; if not, the job's \
                 overlap or another node slows the ring."
                    .into()
            };
            c.words = Some(Box::new(super::Words::Underutilized(Words {
                achieved,
                cap,
                low,
                steps,
                source,
                exposure,
                baseline: baseline.map(|b| (b.busbw_bytes_per_second, b.source.clone())),
                probe: probe.map(|(p, why)| (p.clone(), why)),
                collective: collective.map(CollectiveFigures::of),
            })));
            out.push(c);
        }
        if out.len() == before && collective.is_some() {
            let (severity, exposure) = cost_of();
            out.extend(from_collective(n, collective, baseline, severity, exposure));
        }
    }
    out
}

/// What a link's finding says ([`super::Words::Underutilized`]), kept as figures: its summary and evidence
/// are written from them (and the candidate's subject) only when the tracker needs them.
#[derive(Debug, Clone, PartialEq)]
pub struct Words {
    /// The median achieved rate and the link's capacity, bytes/s.
    achieved: f64,
    cap: f64,
    /// Steps (or bursts) below the line, and all of them.
    low: usize,
    steps: usize,
    /// `steps` or `link_activity` ([`achieved_rates`]).
    source: &'static str,
    /// What the communication was ([`cost`]).
    exposure: &'static str,
    /// The bare baseline's bus bandwidth (bytes/s) and source, when one is known.
    baseline: Option<(f64, String)>,
    /// The probe between the node and a peer, and why it is not used (`None`: used).
    probe: Option<(ProbeBaseline, Option<&'static str>)>,
    /// The job's costliest inter-node collective.
    collective: Option<CollectiveFigures>,
}

impl Words {
    /// Writes the summary of a finding about `subject` (which names the node, device and port) into `s`
    /// (cleared first: its room is kept) and returns its evidence.
    pub(super) fn write(&self, subject: &Subject, s: &mut String) -> Evidence {
        let (achieved, cap) = (self.achieved, self.cap);
        fn part(p: &Option<String>) -> &str {
            p.as_deref().unwrap_or_default()
        }
        s.clear();
        let _ = write!(
            s,
            "{} {} port {} achieves {} during communication, {:.0}% of its {} capacity ({} of {} steps below {:.0}%)",
            subject.node,
            part(&subject.device),
            part(&subject.port),
            Gbs(achieved),
            achieved / cap * 100.0,
            Gbs(cap),
            self.low,
            self.steps,
            UTILIZATION_BELOW * 100.0
        );
        let mut e = Evidence::new(r4(achieved), "bytes_per_second")
            .expected(cap)
            .steps(self.steps)
            .detail("utilization", r4(achieved / cap))
            .detail("source", self.source)
            .detail("communication", self.exposure);
        if let Some((busbw, source)) = &self.baseline {
            let _ = write!(
                s,
                " and below the bare baseline of {} ({})",
                Gbs(*busbw),
                source
            );
            e = e
                .detail("baseline_bytes_per_second", r4(*busbw))
                .detail("baseline_share", r4(achieved / busbw));
        }
        let probe = self.probe.as_ref().map(|(p, why)| (p, *why));
        e = with_probe(s, e, probe, achieved);
        s.push_str(match self.exposure {
            "hidden" => "; the communication hides under compute, so it costs nothing now.",
            "overlapped" => {
                "; the communication overlaps compute, which paces it, so the rate is not the link's own."
            }
            "unknown" => "; without GPU data it is unknown whether it costs the job time.",
            _ => ".",
        });
        match &self.collective {
            Some(x) => with_collective(s, e, x, self.baseline.as_ref().map(|(busbw, _)| *busbw)),
            None => e,
        }
    }
}

/// What a finding says of the job's costliest inter-node collective ([`CollectiveSummary`]'s figures).
#[derive(Debug, Clone, PartialEq)]
struct CollectiveFigures {
    collective: String,
    size_bytes: u64,
    count: u64,
    bus_bandwidth_bytes_per_second: f64,
    fabric_share: Option<f64>,
    fabric_capacity_bytes_per_second: Option<f64>,
}

impl CollectiveFigures {
    fn of(s: &CollectiveSummary) -> CollectiveFigures {
        CollectiveFigures {
            collective: s.collective.clone(),
            size_bytes: s.size_bytes,
            count: s.count,
            bus_bandwidth_bytes_per_second: s.bus_bandwidth_bytes_per_second,
            fabric_share: s.fabric_share,
            fabric_capacity_bytes_per_second: s.fabric_capacity_bytes_per_second,
        }
    }
}

/// The probe's figure, bytes/s, when it may be used (fresh, not declined, not failed).
fn usable_figure(probe: Option<(&ProbeBaseline, Option<&'static str>)>) -> Option<f64> {
    probe
        .filter(|(_, why)| why.is_none())
        .and_then(|(p, _)| p.bytes_per_second)
}

/// The probe's figure in the finding's words and evidence: "the bare link gives X (probe a -> b at T), the job
/// gets Y" when it is usable; otherwise which probe was not used and why (it changes no verdict).
fn with_probe(
    s: &mut String,
    e: Evidence,
    probe: Option<(&ProbeBaseline, Option<&'static str>)>,
    achieved: f64,
) -> Evidence {
    let Some((p, why)) = probe else { return e };
    let e = e
        .detail("probe", p.describe())
        .detail("probe_transport", p.transport.as_str())
        .detail("probe_at_unix_s", r4(p.at_unix_s));
    match (why, p.bytes_per_second) {
        (None, Some(bw)) => {
            let _ = write!(
                s,
                "; the bare link gives {} (probe {}), the job gets {}",
                Gbs(bw),
                p.describe(),
                Gbs(achieved)
            );
            e.detail("probe_bytes_per_second", r4(bw))
                .detail("probe_share", r4(achieved / bw))
        }
        (why, _) => {
            let why = why.unwrap_or("failed");
            let _ = write!(
                s,
                "; the probe {} is not used ({})",
                p.describe(),
                match why {
                    "stale" => "older than an hour",
                    other => other,
                }
            );
            e.detail("probe_unused", why)
        }
    }
}

/// The job's costliest collective that crosses nodes (NCCL Inspector), when its fabric capacity is known.
fn costliest_inter_node<'a>(
    input: &'a AnalysisInput,
    job: Option<&str>,
) -> Option<&'a CollectiveSummary> {
    input
        .collectives_of(job)
        .iter()
        .find(|s| s.nodes > 1 && s.fabric_share.is_some())
}

/// The collective's figures in a finding's words (appended to `words`) and evidence (`e`, returned with
/// them; `baseline`: the bare baseline's bus bandwidth, bytes/s).
fn with_collective(
    words: &mut String,
    e: Evidence,
    s: &CollectiveFigures,
    baseline: Option<f64>,
) -> Evidence {
    let mut e = e
        .detail("collective", s.collective.as_str())
        .detail("collective_size_bytes", s.size_bytes)
        .detail("collective_count", s.count)
        .detail(
            "collective_bus_bandwidth_bytes_per_second",
            r4(s.bus_bandwidth_bytes_per_second),
        );
    if let Some(share) = s.fabric_share {
        e = e.detail("collective_fabric_share", r4(share));
    }
    let _ = write!(
        words,
        " NCCL Inspector: its {} of {:.0} MB runs at {} bus bandwidth",
        s.collective,
        s.size_bytes as f64 / 1e6,
        Gbs(s.bus_bandwidth_bytes_per_second)
    );
    if let (Some(share), Some(cap)) = (s.fabric_share, s.fabric_capacity_bytes_per_second) {
        let _ = write!(
            words,
            ", {:.0}% of the node's fabric ({})",
            share * 100.0,
            Gbs(cap)
        );
    }
    if let Some(busbw) = baseline.filter(|b| *b > 0.0) {
        let share = s.bus_bandwidth_bytes_per_second / busbw;
        e = e.detail("collective_baseline_share", r4(share));
        let _ = write!(
            words,
            " and {:.0}% of the bare baseline ({})",
            share * 100.0,
            Gbs(busbw)
        );
    }
    words.push('.');
    e
}

/// A finding from the collectives alone, where the link counters resolve too few steps (a collective of tens of
/// milliseconds is shorter than a few samples): the job's costliest inter-node collective, over at least
/// [`MIN_STEPS`] instances, below [`UTILIZATION_BELOW`] of the node's fabric and [`BASELINE_SHARE_BELOW`] of the
/// bare baseline when one is known. Its subject is the node's largest fabric port.
fn from_collective(
    n: &NodeInput,
    collective: Option<&CollectiveSummary>,
    baseline: Option<&BareBaseline>,
    severity: Severity,
    exposure: &str,
) -> Option<Candidate> {
    let s = collective?;
    let share = s.fabric_share?;
    let below_baseline = baseline.is_none_or(|b| {
        s.bus_bandwidth_bytes_per_second < BASELINE_SHARE_BELOW * b.busbw_bytes_per_second
    });
    if (s.count as usize) < MIN_STEPS || share >= UTILIZATION_BELOW || !below_baseline {
        return None;
    }
    let l = n.fabric_links().max_by(|a, b| {
        let cap = |x: &&super::input::LinkInput| x.link.capacity_bytes_per_second.unwrap_or(0.0);
        cap(a).total_cmp(&cap(b))
    })?;
    let mut c = Candidate::new(
        FindingKind::LinkUnderutilized,
        severity,
        Subject::link(&n.name, &l.link),
    );
    c.summary = format!(
        "The collectives of {}'s job reach far less than its fabric ({} of {} collectives measured by NCCL Inspector).",
        n.name, s.count, s.collective
    );
    c.evidence = Evidence::new(r4(s.bus_bandwidth_bytes_per_second), "bytes_per_second")
        .expected(r4(s.fabric_capacity_bytes_per_second.unwrap_or(0.0)))
        .steps(s.count as usize)
        .detail("source", "nccl_inspector")
        .detail("communication", exposure);
    let busbw = baseline.map(|b| b.busbw_bytes_per_second);
    let e = std::mem::take(&mut c.evidence);
    c.evidence = with_collective(&mut c.summary, e, &CollectiveFigures::of(s), busbw);
    c.action = format!(
        "The {} of {:.0} MB is the job's costliest collective: check which network NCCL uses between the nodes \
         (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_DEBUG=INFO's NET lines), then the ports' rate and the GPU-NIC \
         affinity; compare with a bare all_reduce_perf run (commwatch baseline import).",
        s.collective,
        s.size_bytes as f64 / 1e6
    )
.into();
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::input::LinkInput;
    use crate::analysis::test_support::{hca_step, periodic, HcaFigures};
    use commwatch_model::{LinkClass, LinkRole};
    use std::sync::Arc;

    const NOW_S: f64 = 1_764_619_200.0;

    /// `node-00`, one 25 GB/s HCA port achieving 8.8 GB/s over 30 confident steps, no GPU data.
    fn slow_node() -> NodeInput {
        let mut link = LinkInput::new(LinkClass::Infiniband, "mlx5_0", "1", LinkRole::Fabric);
        Arc::make_mut(&mut link.link).capacity_bytes_per_second = Some(25e9);
        let burst = HcaFigures::short_burst(true);
        let step = |i: u64| hca_step("node-00", i, periodic(i, 310_000_000), burst);
        NodeInput {
            name: "node-00".into(),
            links: vec![link],
            steps: (0..30).map(step).map(Arc::new).collect(),
            ..Default::default()
        }
    }

    fn with_probe(age_s: f64, outcome: &str, bw: Option<f64>) -> AnalysisInput {
        AnalysisInput {
            now_unix_ns: (NOW_S * 1e9) as i64,
            nodes: vec![slow_node()],
            probes: vec![ProbeBaseline {
                from: "node-00".into(),
                to: "node-01".into(),
                transport: "tcp".into(),
                at_unix_s: NOW_S - age_s,
                outcome: outcome.into(),
                bytes_per_second: bw,
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_fresh_probe_is_the_bare_link_in_words_and_evidence() {
        let c = evaluate(&with_probe(60.0, "ok", Some(20e9)));
        assert_eq!(c.len(), 1, "{c:#?}");
        assert!(
            c[0].summary.contains(
                "the bare link gives 20.00 GB/s (probe node-00 -> node-01 at 2025-12-01T19:59:00Z), \
                 the job gets 8.80 GB/s"
            ),
            "{}",
            c[0].summary
        );
        let d = &c[0].evidence.details;
        assert_eq!(d["probe_bytes_per_second"], 20e9);
        assert_eq!(d["probe_share"], 0.44);
        assert!(!d.contains_key("probe_unused"));
        assert!(
            c[0].action.starts_with("The bare baseline reaches"),
            "{}",
            c[0].action
        );
    }

    /// Candidates whose words the tracker writes (raised, refreshed with other figures or the same) give the
    /// findings and changes that candidates written by the rule give.
    #[test]
    fn words_the_tracker_writes_are_the_rule_s_words() {
        use crate::analysis::tracker::{Change, Tracker};
        let at = |achieved: f64| {
            let mut n = slow_node();
            for (i, s) in n.steps.iter_mut().enumerate() {
                let f = HcaFigures {
                    achieved: Some(achieved + (i % 3) as f64 * 1e8),
                    ..HcaFigures::short_burst(true)
                };
                *s = Arc::new(hca_step(
                    "node-00",
                    i as u64,
                    periodic(i as u64, 310_000_000),
                    f,
                ));
            }
            AnalysisInput {
                nodes: vec![n],
                ..Default::default()
            }
        };
        // `unread`'s changes are never read: its findings' words lag their figures until listed or cleared.
        let (mut written, mut unwritten, mut unread) =
            (Tracker::new(), Tracker::new(), Tracker::new());
        let rates = [8.8e9, 8.8e9, 8.8e9, 9.1e9, 9.1e9, 7.0e9, 9.1e9, 9.1e9];
        for (k, r) in rates.into_iter().enumerate() {
            let input = at(r);
            let now = k as f64 + 1.0;
            let unwritten_now = evaluate_unwritten(&input);
            assert!(unwritten_now
                .iter()
                .all(|c| c.words.is_some() && c.summary.is_empty()));
            unread.update(now, unwritten_now.clone());
            let a = written.update(now, evaluate(&input));
            // A refresh's words lag its figures until read: each change read as the engine publishes it.
            let b: Vec<Change> = unwritten
                .update(now, unwritten_now)
                .into_iter()
                .map(|ch| match ch {
                    Change::Updated(f) => Change::Updated(unwritten.written(f)),
                    other => other,
                })
                .collect();
            assert_eq!(a, b, "evaluation {k}");
            assert_eq!(written.findings(), unwritten.findings(), "evaluation {k}");
            assert_eq!(written.findings(), unread.findings(), "evaluation {k}");
        }
        // Cleared with the words of its last figures, read before or not.
        let mut cleared = Vec::new();
        for k in 0..crate::analysis::tracker::CLEAR_AFTER {
            let now = 9.0 + f64::from(k);
            let a = written.update(now, Vec::new());
            assert_eq!(a, unread.update(now, Vec::new()), "clearing {k}");
            cleared.extend(a);
        }
        assert!(
            matches!(&cleared[..], [Change::Cleared(f)] if f.summary.contains("achieves 9.")),
            "{cleared:?}"
        );
        assert_eq!(unwritten.active().len(), 1);
        assert!(unwritten.active()[0]
            .summary
            .starts_with("node-00 mlx5_0 port 1 achieves 9."));
    }

    #[test]
    fn a_fresh_probe_near_what_the_job_gets_clears_the_link() {
        // 8.8 GB/s is more than 70 % of a bare 10 GB/s: the link gives what it can.
        assert_eq!(evaluate(&with_probe(60.0, "ok", Some(10e9))), vec![]);
    }

    #[test]
    fn only_a_probe_to_a_peer_of_the_job_counts() {
        // node-09 is outside the job: its 10 GB/s figure would clear the link, but it is not the job's link.
        let mut input = with_probe(60.0, "ok", Some(20e9));
        input.probes.push(ProbeBaseline {
            to: "node-09".into(),
            bytes_per_second: Some(10e9),
            ..input.probes[0].clone()
        });
        input.jobs = vec![crate::analysis::input::JobInput {
            id: "j".into(),
            ranks: vec![
                crate::jobs::FleetRank::from_markers("node-00", 0),
                crate::jobs::FleetRank::from_markers("node-01", 1),
            ],
            ..Default::default()
        }];
        let c = evaluate(&input);
        assert_eq!(c.len(), 1, "{c:#?}");
        assert_eq!(c[0].evidence.details["probe_bytes_per_second"], 20e9);
        // Without the job, the lowest of any peer is the node's bare link: 8.8 of 10 GB/s is no shortfall.
        input.jobs.clear();
        assert_eq!(evaluate(&input), vec![]);
    }

    #[test]
    fn stale_or_declined_probes_change_no_verdict_and_no_severity() {
        let none = evaluate(&AnalysisInput {
            nodes: vec![slow_node()],
            ..Default::default()
        });
        assert_eq!(none.len(), 1);
        for (age, outcome, bw, why) in [
            (
                crate::analysis::link_probes::PROBE_MAX_AGE_S + 1.0,
                "ok",
                Some(10e9),
                "stale",
            ),
            (60.0, "declined", None, "declined"),
            (60.0, "failed", None, "failed"),
        ] {
            let c = evaluate(&with_probe(age, outcome, bw));
            assert_eq!(c.len(), 1, "{why}: {c:#?}");
            assert_eq!(c[0].severity, none[0].severity, "{why}");
            assert_eq!(c[0].action, none[0].action, "{why}");
            let d = &c[0].evidence.details;
            assert_eq!(d["probe_unused"], why);
            assert!(!d.contains_key("probe_bytes_per_second"), "{why}");
            assert!(
                c[0].summary.contains("node-00 -> node-01"),
                "{}",
                c[0].summary
            );
        }
    }
}
