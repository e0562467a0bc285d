//! Root-cause linking: which finding explains which.
//!
//! A root cause explains symptoms in the same job:
//! - `nccl_misconfiguration` on node X explains `management_network_traffic` on X;
//! - `management_network_traffic` on X that causes it (`ring_role` `cause`) explains the same kind on a node of
//!   its job that is a ring neighbour (`ring_role` `neighbour`: it only moves X's traffic); a neighbour's
//!   explains nothing;
//! - a critical finding that throttles the job's communication on node X — `nccl_misconfiguration` that forces
//!   traffic off the fabric (conflict `management_interface` or `ib_disabled`), `management_network_traffic`,
//!   `link_degraded`, `link_errors`, `transmit_queue_backlog` or `tcp_retransmits` — explains
//!   `link_underutilized`, `exposed_communication` and `scaling_efficiency_drop` on every node of the job and
//!   about the job (the ring runs at its slowest link, the other nodes wait on it), a `straggler` on another
//!   node of the job (and, for `transmit_queue_backlog`, X's own `straggler` of a lagging fabric rate: the
//!   same link seen from its bytes), and `congestion` on X (not
//!   `nccl_misconfiguration`). The configuration is linked directly, not only through the management traffic it
//!   causes: the wire finding can miss an evaluation or clear while the setting stays, and the job's symptoms
//!   must not turn into root causes meanwhile;
//! - `straggler` on X explains `exposed_communication` and `scaling_efficiency_drop` in the job.
//!
//! A warning of those kinds (a PCIe link below its maximum, a few link errors, an NCCL setting that only
//! narrows the fabric) throttles nothing measurable and explains nothing: a symptom beside it stays a root
//! cause, as does every finding of a kind not listed, and any finding in another job.
//!
//! A job-level finding (a roll-up, a job's scaling) is in the job when the root cause's node runs that job (or,
//! for a job no rank lists, when the node runs no known job either).
//!
//! A consequence names its cause once, in `caused_by` (the first root cause by kind precedence, severity, then
//! id); the cause lists it in `consequences`. Once filed under an active cause (by the tracker), its severity
//! is [`consequence_severity`]: `info` (the operator acts on the cause), except `management_network_traffic`,
//! which keeps its own: it is what the operator sees on the wire.

use super::input::AnalysisInput;
use super::{Candidate, FindingKind, Severity};

/// Whether two nodes belong to the same job as far as the input knows: both in one job's ranks, or, when no
/// job lists either node, assumed (one collector watching one job's nodes is the common case).
fn same_job(input: &AnalysisInput, a: &str, b: &str) -> bool {
    let jobs_of = |n: &str| -> Vec<&str> {
        input
            .jobs
            .iter()
            .filter(|j| j.ranks.iter().any(|r| r.node == n))
            .map(|j| j.id.as_str())
            .collect()
    };
    let (ja, jb) = (jobs_of(a), jobs_of(b));
    if ja.is_empty() && jb.is_empty() {
        return true;
    }
    ja.iter().any(|j| jb.contains(j))
}

/// Whether `node` runs `job`: one of its ranks is on the node, or, for a job no rank lists (the scaling rule's
/// `cluster`, a job known only from its steps), the node runs no known job either.
fn in_job(input: &AnalysisInput, job: Option<&str>, node: &str) -> bool {
    match job.and_then(|j| input.jobs.iter().find(|x| x.id == j)) {
        Some(j) => j.ranks.iter().any(|r| r.node == node),
        None => input.job_of(node).is_none(),
    }
}

/// The kinds that can be a root cause, in precedence order (a configuration cause before its symptom).
fn precedence(k: FindingKind) -> Option<u8> {
    match k {
        FindingKind::NcclMisconfiguration => Some(0),
        FindingKind::ManagementNetworkTraffic => Some(1),
        FindingKind::LinkDegraded => Some(2),
        FindingKind::LinkErrors => Some(3),
        FindingKind::TransmitQueueBacklog => Some(4),
        FindingKind::TcpRetransmits => Some(5),
        FindingKind::Straggler => Some(6),
        _ => None,
    }
}

/// Whether `root` throttles its job's communication: a critical finding of a kind that slows the ring at
/// its node (an NCCL setting only when it forces traffic off the fabric).
fn throttles(root: &Candidate) -> bool {
    if root.severity < Severity::Critical {
        return false;
    }
    match root.kind {
        FindingKind::ManagementNetworkTraffic
        | FindingKind::LinkDegraded
        | FindingKind::LinkErrors
        | FindingKind::TransmitQueueBacklog
        | FindingKind::TcpRetransmits => true,
        FindingKind::NcclMisconfiguration => matches!(
            root.evidence
                .details
                .get("conflict")
                .and_then(|v| v.as_str()),
            Some("management_interface" | "ib_disabled")
        ),
        _ => false,
    }
}

/// Whether `c`, a `straggler` on the node of `root`, is the lagging fabric rate that `root`'s rate-limited
/// transmit queue makes (the same link's slowness seen from its bytes), not a compute or CPU straggler.
fn same_link_lag(root: &Candidate, c: &Candidate) -> bool {
    root.kind == FindingKind::TransmitQueueBacklog
        && c.evidence.details.get("signal").and_then(|s| s.as_str()) == Some("fabric_rate")
}

/// The management rule's `ring_role` of `c` (`cause` or `neighbour`), when it says one.
fn ring_role(c: &Candidate) -> Option<&str> {
    (c.kind == FindingKind::ManagementNetworkTraffic)
        .then(|| c.evidence.details.get(super::RING_ROLE)?.as_str())
        .flatten()
}

/// Whether the root cause `root` explains `c`.
fn explains(input: &AnalysisInput, root: &Candidate, c: &Candidate) -> bool {
    let root_node = root.subject.node.as_str();
    let related = || {
        if c.subject.node.is_empty() {
            in_job(input, c.subject.job.as_deref(), root_node)
        } else {
            same_job(input, root_node, &c.subject.node)
        }
    };
    if root.kind == FindingKind::NcclMisconfiguration
        && c.kind == FindingKind::ManagementNetworkTraffic
    {
        return c.subject.node == root_node;
    }
    // A ring neighbour's management traffic explains nothing; its cause's explains it.
    if ring_role(root) == Some(super::NEIGHBOUR) {
        return false;
    }
    if root.kind == FindingKind::ManagementNetworkTraffic
        && c.kind == FindingKind::ManagementNetworkTraffic
    {
        return ring_role(c) == Some(super::NEIGHBOUR) && c.subject.node != root_node && related();
    }
    if throttles(root) {
        return match c.kind {
            FindingKind::LinkUnderutilized
            | FindingKind::ExposedCommunication
            | FindingKind::ScalingEfficiencyDrop => related(),
            FindingKind::Straggler => {
                (c.subject.node != root_node || same_link_lag(root, c)) && related()
            }
            FindingKind::Congestion => {
                root.kind != FindingKind::NcclMisconfiguration && c.subject.node == root_node
            }
            _ => false,
        };
    }
    root.kind == FindingKind::Straggler
        && matches!(
            c.kind,
            FindingKind::ExposedCommunication | FindingKind::ScalingEfficiencyDrop
        )
        && related()
}

/// The severity of a finding of `kind` at `severity` (its rule's) once another finding explains it.
pub fn consequence_severity(kind: FindingKind, severity: Severity) -> Severity {
    match kind {
        FindingKind::ManagementNetworkTraffic => severity,
        _ => Severity::Info,
    }
}

/// Links each candidate that names no cause yet to the root cause that explains it (see the module
/// documentation). Candidates that already name one (a roll-up's members) keep it. Severities are left as the
/// rules gave them: the tracker lowers a consequence's once its cause is a finding.
pub fn link_causes(input: &AnalysisInput, cands: &mut [Candidate]) {
    let ids: Vec<String> = cands.iter().map(Candidate::id).collect();
    link_causes_keyed(input, cands, &ids);
}

/// [`link_causes`] with each candidate's id ([`Candidate::id`]) given: `ids[i]` is `cands[i]`'s.
pub(crate) fn link_causes_keyed(input: &AnalysisInput, cands: &mut [Candidate], ids: &[String]) {
    // (index, precedence, severity, id) of every candidate that can be a root cause, in the order they are
    // tried.
    let mut roots: Vec<(usize, u8, Severity, &str)> = cands
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((i, precedence(c.kind)?, c.severity, ids[i].as_str())))
        .collect();
    roots.sort_by(|a, b| a.1.cmp(&b.1).then(b.2.cmp(&a.2)).then(a.3.cmp(b.3)));
    let mut links: Vec<(usize, usize)> = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        if c.caused_by.is_some() {
            continue;
        }
        let root = roots
            .iter()
            .find(|(ri, ..)| *ri != i && explains(input, &cands[*ri], c));
        if let Some(&(ri, ..)) = root {
            links.push((ri, i));
        }
    }
    for (ri, i) in links {
        cands[i].caused_by = Some(ids[ri].clone());
        cands[ri].consequences.push(ids[i].clone());
    }
    for c in cands.iter_mut() {
        c.consequences.sort();
        c.consequences.dedup();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::input::{JobInput, RankInput};
    use super::super::Subject;
    use super::*;

    /// A job `id` with one rank on each of `nodes`.
    pub(crate) fn job(id: &str, nodes: &[&str]) -> JobInput {
        JobInput {
            id: id.into(),
            ranks: nodes
                .iter()
                .map(|n| RankInput {
                    node: n.to_string(),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    fn cand(kind: FindingKind, severity: Severity, node: &str, job: Option<&str>) -> Candidate {
        let mut s = if node.is_empty() {
            Subject::job(job.unwrap_or_default())
        } else {
            Subject::node(node)
        };
        if !node.is_empty() {
            s.job = job.map(str::to_string);
        }
        Candidate::new(kind, severity, s)
    }

    fn nccl(node: &str, conflict: &str, severity: Severity) -> Candidate {
        let mut c = cand(
            FindingKind::NcclMisconfiguration,
            severity,
            node,
            Some("1001"),
        );
        c.subject.setting = Some("NCCL_SOCKET_IFNAME".into());
        c.evidence = c.evidence.clone().detail("conflict", conflict);
        c
    }

    /// The management-NIC demo's job-level symptoms in an evaluation where the management traffic itself is
    /// missing: they stay under the setting that causes them, never root causes of their own.
    #[test]
    fn a_setting_that_forces_traffic_off_the_fabric_explains_the_jobs_symptoms() {
        let input = AnalysisInput {
            jobs: vec![
                job("1001", &["node-00", "node-01", "node-02", "node-03"]),
                job("2002", &["node-04", "node-05"]),
            ],
            ..Default::default()
        };
        let root = "nccl_misconfiguration:node-03:NCCL_SOCKET_IFNAME:job=1001";
        for with_wire in [false, true] {
            let mut cands = vec![
                nccl("node-03", "management_interface", Severity::Critical),
                cand(
                    FindingKind::ExposedCommunication,
                    Severity::Warning,
                    "",
                    Some("1001"),
                ),
                cand(
                    FindingKind::LinkUnderutilized,
                    Severity::Warning,
                    "",
                    Some("1001"),
                ),
                cand(
                    FindingKind::ScalingEfficiencyDrop,
                    Severity::Warning,
                    "",
                    Some("1001"),
                ),
                cand(FindingKind::Straggler, Severity::Warning, "node-01", None),
                cand(FindingKind::Straggler, Severity::Warning, "node-03", None),
                // Independent: another job's symptom, a host-side bottleneck.
                cand(
                    FindingKind::ExposedCommunication,
                    Severity::Warning,
                    "",
                    Some("2002"),
                ),
                cand(FindingKind::CpuBound, Severity::Warning, "", Some("1001")),
            ];
            if with_wire {
                let mut m = cand(
                    FindingKind::ManagementNetworkTraffic,
                    Severity::Critical,
                    "node-03",
                    Some("1001"),
                );
                m.subject.device = Some("eth0".into());
                cands.push(m);
            }
            link_causes(&input, &mut cands);
            for c in &cands[1..5] {
                assert_eq!(c.caused_by.as_deref(), Some(root), "{}", c.id());
            }
            // The slow node itself, the other job and the CPU stay root causes.
            for c in &cands[5..8] {
                assert_eq!(c.caused_by, None, "{}", c.id());
            }
            if with_wire {
                assert_eq!(cands[8].caused_by.as_deref(), Some(root));
            }
            assert_eq!(cands[0].caused_by, None);
            assert_eq!(cands[0].consequences.len(), 4 + usize::from(with_wire));
        }
    }

    #[test]
    fn only_a_critical_throttle_explains_the_jobs_symptoms() {
        let input = AnalysisInput {
            jobs: vec![job("1001", &["n1", "n2"])],
            ..Default::default()
        };
        let symptoms = || {
            vec![
                cand(
                    FindingKind::ExposedCommunication,
                    Severity::Warning,
                    "",
                    Some("1001"),
                ),
                cand(
                    FindingKind::LinkUnderutilized,
                    Severity::Warning,
                    "n1",
                    None,
                ),
            ]
        };
        // Warnings, and a setting that only narrows the fabric, explain nothing.
        let mut cands = vec![
            nccl("n2", "hca_excluded", Severity::Critical),
            cand(FindingKind::LinkErrors, Severity::Warning, "n2", None),
            cand(FindingKind::LinkDegraded, Severity::Warning, "n2", None),
        ];
        cands.extend(symptoms());
        link_causes(&input, &mut cands);
        assert!(cands.iter().all(|c| c.caused_by.is_none()), "{cands:#?}");
        // Critical link errors on a node of the job explain them.
        let mut cands = vec![cand(
            FindingKind::LinkErrors,
            Severity::Critical,
            "n2",
            None,
        )];
        cands.extend(symptoms());
        link_causes(&input, &mut cands);
        assert_eq!(cands[1].caused_by.as_deref(), Some("link_errors:n2"));
        assert_eq!(cands[2].caused_by.as_deref(), Some("link_errors:n2"));
    }

    #[test]
    fn a_root_explains_job_level_findings_of_its_own_job_only() {
        let input = AnalysisInput {
            jobs: vec![job("a", &["n1", "n2"]), job("b", &["n3", "n4"])],
            ..Default::default()
        };
        let mut cands = vec![
            Candidate::new(
                FindingKind::Straggler,
                Severity::Warning,
                Subject::node("n1"),
            ),
            Candidate::new(
                FindingKind::ScalingEfficiencyDrop,
                Severity::Critical,
                Subject::job("a"),
            ),
            Candidate::new(
                FindingKind::ScalingEfficiencyDrop,
                Severity::Critical,
                Subject::job("b"),
            ),
        ];
        link_causes(&input, &mut cands);
        assert_eq!(cands[1].caused_by.as_deref(), Some("straggler:n1"));
        assert_eq!(cands[2].caused_by, None);
        assert_eq!(cands[0].consequences, ["scaling_efficiency_drop:job=a"]);
        // The cause is named once: in `caused_by`, not in the summary.
        assert_eq!(cands[1].summary, "");
        assert_eq!(
            consequence_severity(FindingKind::ScalingEfficiencyDrop, Severity::Critical),
            Severity::Info
        );
        assert_eq!(
            consequence_severity(FindingKind::ManagementNetworkTraffic, Severity::Critical),
            Severity::Critical
        );
    }
}
