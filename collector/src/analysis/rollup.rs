//! Roll-up: the same finding on many nodes of one job becomes one job-level finding.
//!
//! A job whose fabric links all run slow, whose nodes all leave their communication exposed or all wait on
//! their input pipeline has one problem, not one per node. The node-level candidates of a kind in
//! [`ROLLUP_KINDS`] found on at least [`MIN_NODES`] nodes of one job are gathered under one job-level candidate
//! of that kind (subject: the job, id `kind:job=<job>`) whose evidence lists the nodes and the range of the
//! figure. The node-level candidates stay, as its consequences: `caused_by` the roll-up (the tracker lowers
//! them to info once it is raised: the operator acts on the roll-up, which takes the worst of their
//! severities). It runs before [`super::causes::link_causes`], so that a root cause elsewhere explains the
//! roll-up, not each node.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use super::input::AnalysisInput;
use super::scaling::CLUSTER_JOB;
use super::{gbs, median, r4, Candidate, Evidence, FindingKind, Severity, Subject};

/// The kinds that roll up: symptoms a whole job shows alike on its nodes. Physical faults (`link_errors`,
/// `link_degraded`), configuration (`nccl_misconfiguration`, `management_network_traffic`) and the one slow
/// node (`straggler`) stay per node: each needs its own repair.
pub const ROLLUP_KINDS: &[FindingKind] = &[
    FindingKind::LinkUnderutilized,
    FindingKind::ExposedCommunication,
    FindingKind::CpuBound,
];
/// Distinct nodes of one job that must show the same kind for a roll-up.
pub const MIN_NODES: usize = 2;
/// Node names a roll-up's summary spells out (the evidence lists them all).
const NAMES_IN_SUMMARY: usize = 8;

/// Whether a finding of `kind` about `subject` is a roll-up: a job-level finding of a kind that rolls up.
pub fn is_rollup(kind: FindingKind, subject: &Subject) -> bool {
    subject.node.is_empty() && ROLLUP_KINDS.contains(&kind)
}

/// The job a node-level candidate belongs to: its subject's job, else the first job listing its node, else
/// the job of the node's latest step, else [`CLUSTER_JOB`] (the scaling rule's name for unknown jobs).
/// Borrowed from the input (copied only for a subject's own job).
fn job_of<'i>(input: &'i AnalysisInput, c: &Candidate) -> Cow<'i, str> {
    let node = c.subject.node.as_str();
    if let Some(j) = &c.subject.job {
        return Cow::Owned(j.clone());
    }
    input
        .job_of(node)
        .map(|j| j.id.as_str())
        .or_else(|| {
            let n = input.node(node)?;
            n.steps.iter().rev().find_map(|s| s.job.as_deref())
        })
        .unwrap_or(CLUSTER_JOB)
        .into()
}

/// Adds a roll-up for every kind of [`ROLLUP_KINDS`] seen on at least [`MIN_NODES`] nodes of one job, and
/// makes the node-level candidates its consequences. Candidates that already name a cause are left alone.
pub fn roll_up(input: &AnalysisInput, cands: &mut Vec<Candidate>) {
    let ids: Vec<String> = cands.iter().map(Candidate::id).collect();
    roll_up_keyed(input, cands, &ids);
}

/// [`roll_up`] with each candidate's id ([`Candidate::id`]) given: `ids[i]` is `cands[i]`'s (the members'
/// ids are not formatted again).
pub(crate) fn roll_up_keyed(input: &AnalysisInput, cands: &mut Vec<Candidate>, ids: &[String]) {
    let mut groups: BTreeMap<(FindingKind, Cow<'_, str>), Vec<usize>> = BTreeMap::new();
    for (i, c) in cands.iter().enumerate() {
        if ROLLUP_KINDS.contains(&c.kind) && !c.subject.node.is_empty() && c.caused_by.is_none() {
            groups
                .entry((c.kind, job_of(input, c)))
                .or_default()
                .push(i);
        }
    }
    for ((kind, job), members) in groups {
        let nodes: BTreeSet<&str> = members
            .iter()
            .map(|&i| cands[i].subject.node.as_str())
            .collect();
        if nodes.len() < MIN_NODES {
            continue;
        }
        let roll = rollup_of(
            kind,
            &job,
            &members
                .iter()
                .map(|&i| (&cands[i], &ids[i]))
                .collect::<Vec<_>>(),
        );
        let id = roll.id();
        for &i in &members {
            cands[i].caused_by = Some(id.clone());
        }
        cands.push(roll);
    }
}

/// The job-level candidate over `members` (same kind, same job, at least one), each with its id.
fn rollup_of(kind: FindingKind, job: &str, keyed: &[(&Candidate, &String)]) -> Candidate {
    let members: Vec<&Candidate> = keyed.iter().map(|(c, _)| *c).collect();
    let severity = members
        .iter()
        .map(|c| c.severity)
        .max()
        .unwrap_or(Severity::Info);
    let mut c = Candidate::new(kind, severity, Subject::job(job));
    let nodes: Vec<String> = members
        .iter()
        .map(|m| m.subject.node.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .map(str::to_string)
        .collect();
    let mut figures: Vec<f64> = members.iter().map(|m| m.evidence.measured).collect();
    let lo = figures.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = figures.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let unit = members[0].evidence.unit.clone();
    let mut e = Evidence::new(r4(median(&mut figures).unwrap_or(lo)), unit.clone())
        .detail("nodes", nodes.clone())
        .detail("findings", members.len())
        .detail("min", r4(lo))
        .detail("max", r4(hi));
    let expected = members[0].evidence.expected;
    if members.iter().all(|m| m.evidence.expected == expected) {
        e.expected = expected;
    }
    e.over_steps = members.iter().filter_map(|m| m.evidence.over_steps).min();
    e.over_seconds = members
        .iter()
        .filter_map(|m| m.evidence.over_seconds)
        .reduce(f64::min);
    c.evidence = e;
    c.summary = summary(kind, job, &nodes, members.len(), range(lo, hi, &unit));
    // The members' advice: the worst member's (the first by id among equals).
    let mut ids: Vec<(&String, usize)> = keyed
        .iter()
        .enumerate()
        .map(|(i, (_, id))| (*id, i))
        .collect();
    let worst = ids
        .iter()
        .max_by(|(a, i), (b, k)| {
            members[*i]
                .severity
                .cmp(&members[*k].severity)
                .then(b.cmp(a))
        })
        .map_or(members[0], |(_, i)| members[*i]);
    c.action = worst.action.clone();
    ids.sort();
    c.consequences = ids.into_iter().map(|(id, _)| id.clone()).collect();
    // As cautious as its most cautious member.
    c.raise_after = members
        .iter()
        .map(|m| m.raise_after)
        .max()
        .unwrap_or(c.raise_after);
    c
}

/// `lo–hi` in the evidence's unit (one figure when both read the same).
fn range(lo: f64, hi: f64, unit: &str) -> String {
    let f = |v: f64| match unit {
        "bytes_per_second" => gbs(v),
        "ratio" => format!("{:.1}%", v * 100.0),
        _ => format!("{v:.4} {unit}"),
    };
    let (a, b) = (f(lo), f(hi));
    if a == b {
        a
    } else {
        format!("{a} to {b}")
    }
}

/// One sentence: the job, how many nodes (and findings), the figure's range, the nodes.
fn summary(
    kind: FindingKind,
    job: &str,
    nodes: &[String],
    findings: usize,
    range: String,
) -> String {
    let n = nodes.len();
    let mut names = nodes
        .iter()
        .take(NAMES_IN_SUMMARY)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if n > NAMES_IN_SUMMARY {
        names.push_str(&format!(" and {} more", n - NAMES_IN_SUMMARY));
    }
    let what = match kind {
        FindingKind::LinkUnderutilized => format!(
            "{findings} fabric links on {n} nodes achieve {range} during communication, far below their capacity"
        ),
        FindingKind::ExposedCommunication => format!(
            "{n} nodes spend {range} of the time in communication not hidden under compute"
        ),
        FindingKind::CpuBound => format!(
            "the GPUs of {n} nodes are idle {range} of the time while the host CPU is busy: the input pipeline is \
             the bottleneck, not the network"
        ),
        other => format!("{} on {n} nodes ({findings} findings), {range}", other.as_str()),
    };
    format!("Job {job}: {what} ({names}).")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(kind: FindingKind, node: &str, device: Option<&str>, measured: f64) -> Candidate {
        let mut s = Subject::node(node);
        s.device = device.map(str::to_string);
        s.port = device.map(|_| "1".to_string());
        let mut c = Candidate::new(kind, Severity::Warning, s);
        c.evidence = Evidence::new(measured, "ratio").expected(0.05).steps(9);
        c.action = "overlap".into();
        c
    }

    #[test]
    fn the_same_kind_on_many_nodes_becomes_one_job_level_finding() {
        let input = AnalysisInput::default();
        let mut cands = vec![
            cand(FindingKind::ExposedCommunication, "node-00", None, 0.454),
            cand(FindingKind::ExposedCommunication, "node-01", None, 0.523),
            cand(FindingKind::ExposedCommunication, "node-02", None, 0.50),
            cand(FindingKind::LinkErrors, "node-01", Some("mlx5_0"), 3.0),
        ];
        roll_up(&input, &mut cands);
        assert_eq!(cands.len(), 5);
        let r = &cands[4];
        assert_eq!(r.id(), "exposed_communication:job=cluster");
        assert!(is_rollup(r.kind, &r.subject));
        assert_eq!(r.severity, Severity::Warning);
        assert_eq!(r.evidence.measured, 0.5);
        assert_eq!(r.evidence.expected, Some(0.05));
        assert_eq!(r.evidence.over_steps, Some(9));
        assert_eq!(
            r.evidence.details["nodes"],
            serde_json::json!(["node-00", "node-01", "node-02"])
        );
        assert_eq!(r.evidence.details["min"], 0.454);
        assert_eq!(r.evidence.details["max"], 0.523);
        assert_eq!(r.evidence.details["findings"], 3);
        assert_eq!(
            r.summary,
            "Job cluster: 3 nodes spend 45.4% to 52.3% of the time in communication not hidden under \
             compute (node-00, node-01, node-02)."
        );
        assert_eq!(r.action, "overlap");
        assert_eq!(r.consequences.len(), 3);
        for m in &cands[..3] {
            assert_eq!(
                m.caused_by.as_deref(),
                Some("exposed_communication:job=cluster")
            );
            assert_eq!(m.severity, Severity::Warning);
        }
        // Link errors never roll up.
        assert_eq!(cands[3].caused_by, None);
        assert_eq!(cands[3].severity, Severity::Warning);
    }

    #[test]
    fn a_roll_up_waits_as_long_as_its_most_cautious_member() {
        let mut quick = cand(FindingKind::ExposedCommunication, "node-00", None, 0.06);
        quick.raise_after = 1;
        let mut two = cand(FindingKind::ExposedCommunication, "node-01", None, 0.06);
        two.raise_after = 2;
        let mut cands = vec![quick.clone(), two];
        roll_up(&AnalysisInput::default(), &mut cands);
        assert_eq!(cands.len(), 3);
        assert_eq!(cands[2].raise_after, 2);
        let mut cands = vec![quick.clone(), {
            let mut q = quick;
            q.subject.node = "node-02".into();
            q
        }];
        roll_up(&AnalysisInput::default(), &mut cands);
        assert_eq!(cands[2].raise_after, 1);
    }

    /// The management-NIC demo: the roll-ups over node-00…02 are filed under the setting on node-03 that
    /// throttles the job, their members under the roll-ups; nothing but the setting is a root cause.
    #[test]
    fn a_roll_up_is_filed_under_the_fault_that_throttles_its_job() {
        use super::super::causes::link_causes;
        use super::super::input::{JobInput, RankInput};
        let nodes = ["node-00", "node-01", "node-02", "node-03"];
        let input = AnalysisInput {
            jobs: vec![JobInput {
                id: "1001".into(),
                ranks: nodes
                    .iter()
                    .map(|n| RankInput {
                        node: n.to_string(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut nccl = Candidate::new(
            FindingKind::NcclMisconfiguration,
            Severity::Critical,
            Subject::node("node-03"),
        );
        nccl.subject.job = Some("1001".into());
        nccl.subject.setting = Some("NCCL_SOCKET_IFNAME".into());
        nccl.evidence = Evidence::new(1.0, "conflicts").detail("conflict", "management_interface");
        let mut cands = vec![nccl];
        for n in &nodes[..3] {
            cands.push(cand(FindingKind::ExposedCommunication, n, None, 0.17));
            cands.push(cand(
                FindingKind::LinkUnderutilized,
                n,
                Some("mlx5_0"),
                4.9e9,
            ));
        }
        roll_up(&input, &mut cands);
        link_causes(&input, &mut cands);
        let root = "nccl_misconfiguration:node-03:NCCL_SOCKET_IFNAME:job=1001";
        let roots: Vec<String> = cands
            .iter()
            .filter(|c| c.caused_by.is_none())
            .map(|c| c.id())
            .collect();
        assert_eq!(roots, [root]);
        for id in [
            "exposed_communication:job=1001",
            "link_underutilized:job=1001",
        ] {
            let r = cands.iter().find(|c| c.id() == id).expect(id);
            assert_eq!(r.caused_by.as_deref(), Some(root));
            assert_eq!(r.consequences.len(), 3);
        }
        assert_eq!(cands[0].consequences.len(), 2);
    }

    #[test]
    fn one_node_or_links_of_one_node_do_not_roll_up() {
        let input = AnalysisInput::default();
        let mut cands: Vec<Candidate> = (0..8)
            .map(|g| {
                let dev = format!("mlx5_{g}");
                cand(FindingKind::LinkUnderutilized, "node-00", Some(&dev), 1.2e9)
            })
            .collect();
        roll_up(&input, &mut cands);
        assert_eq!(cands.len(), 8);
        assert!(cands.iter().all(|c| c.caused_by.is_none()));
    }

    #[test]
    fn nodes_of_different_jobs_roll_up_apart() {
        let input = AnalysisInput::default();
        let mut a = cand(FindingKind::CpuBound, "node-00", None, 0.44);
        a.subject.job = Some("a".into());
        let mut b = cand(FindingKind::CpuBound, "node-01", None, 0.45);
        b.subject.job = Some("b".into());
        let mut cands = vec![a, b];
        roll_up(&input, &mut cands);
        assert_eq!(cands.len(), 2);
    }
}
