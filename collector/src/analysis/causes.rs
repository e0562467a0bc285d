//! Root-cause linking: which finding explains which.
//!
//! A root cause explains symptoms in the same job:
//! - `nccl_misconfiguration` on node X explains `management_network_traffic` on X;
//! - `management_network_traffic` or `link_degraded` (of a fabric port) on node X explains
//!   `link_underutilized`, `exposed_communication` and `scaling_efficiency_drop` on every node of the job
//!   (the ring runs at its slowest link), and `congestion` on X;
//! - `straggler` on X explains `exposed_communication` and `scaling_efficiency_drop` in the job.
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
            .filter(|j| j.nodes().any(|x| x == n))
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
        Some(j) => j.nodes().any(|n| n == node),
        None => input.job_of(node).is_none(),
    }
}

/// The kinds that can be a root cause, in precedence order (a configuration cause before its symptom).
fn precedence(k: FindingKind) -> Option<u8> {
    match k {
        FindingKind::NcclMisconfiguration => Some(0),
        FindingKind::ManagementNetworkTraffic => Some(1),
        FindingKind::LinkDegraded => Some(2),
        FindingKind::Straggler => Some(3),
        _ => None,
    }
}

/// Whether a root cause of kind `root` on `root_node` explains `c`.
fn explains(input: &AnalysisInput, root: FindingKind, root_node: &str, c: &Candidate) -> bool {
    let related = || {
        if c.subject.node.is_empty() {
            in_job(input, c.subject.job.as_deref(), root_node)
        } else {
            same_job(input, root_node, &c.subject.node)
        }
    };
    match (root, c.kind) {
        (FindingKind::NcclMisconfiguration, FindingKind::ManagementNetworkTraffic) => {
            c.subject.node == root_node
        }
        (
            FindingKind::ManagementNetworkTraffic | FindingKind::LinkDegraded,
            FindingKind::LinkUnderutilized
            | FindingKind::ExposedCommunication
            | FindingKind::ScalingEfficiencyDrop,
        ) => related(),
        (
            FindingKind::ManagementNetworkTraffic | FindingKind::LinkDegraded,
            FindingKind::Congestion,
        ) => c.subject.node == root_node,
        (
            FindingKind::Straggler,
            FindingKind::ExposedCommunication | FindingKind::ScalingEfficiencyDrop,
        ) => related(),
        _ => false,
    }
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
    // (index, precedence, node, severity, id) of every candidate that can be a root cause, in the order they
    // are tried.
    let mut roots: Vec<(usize, u8, String, Severity, String)> = cands
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let p = precedence(c.kind)?;
            Some((i, p, c.subject.node.clone(), c.severity, c.id()))
        })
        .collect();
    roots.sort_by(|a, b| a.1.cmp(&b.1).then(b.3.cmp(&a.3)).then(a.4.cmp(&b.4)));
    let mut links: Vec<(usize, usize)> = Vec::new();
    for (i, c) in cands.iter().enumerate() {
        if c.caused_by.is_some() {
            continue;
        }
        let root = roots.iter().find(|(ri, _, node, _, _)| {
            let k = cands[*ri].kind;
            *ri != i && explains(input, k, node, c)
        });
        if let Some(&(ri, ..)) = root {
            links.push((ri, i));
        }
    }
    for (ri, i) in links {
        let root_id = cands[ri].id();
        let cid = cands[i].id();
        cands[i].caused_by = Some(root_id);
        cands[ri].consequences.push(cid);
    }
    for c in cands.iter_mut() {
        c.consequences.sort();
        c.consequences.dedup();
    }
}

#[cfg(test)]
mod tests {
    use super::super::input::{JobInput, RankInput};
    use super::super::Subject;
    use super::*;

    fn job(id: &str, nodes: &[&str]) -> JobInput {
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
