//! What each injected fault should raise, and on which subject.
//!
//! A fault is *found* when a finding of one of its kinds, about its subject, is active at warning or
//! critical: the port (`node` and `device`) for a port fault, the node for a node fault, the job (a job-level
//! finding, or one on a node of that job) for a fault the whole job shows.

use commwatch_collector::analysis::{Finding, FindingKind, Severity};
use commwatch_sim::{ClusterSpec, Scenario, Variant};

/// The subject a fault's finding must name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A port of a node: the finding's node and device.
    Port { node: String, device: String },
    /// A node (any device of it).
    Node(String),
    /// A job: a finding about the job, or about one of its nodes.
    Job { id: String, nodes: Vec<String> },
}

/// The fault a spec injects and what finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectation {
    /// The fault's name: the scenario's, or `flapping`.
    pub fault: &'static str,
    /// Kinds that count as finding it.
    pub kinds: &'static [FindingKind],
    pub target: Target,
}

/// The lowest severity that counts as an alarm.
pub const ALARM: Severity = Severity::Warning;

impl Expectation {
    /// The fault `spec` injects (`None` for a healthy spec).
    pub fn of(spec: &ClusterSpec) -> Option<Expectation> {
        let model_node = spec.resolved_fault_node();
        let node = commwatch_sim::model::node_name(model_node);
        let port = || Target::Port {
            node: node.clone(),
            device: format!("mlx5_{}", spec.fault_hca),
        };
        let job = || {
            let placement = spec.placement();
            let j = placement.job_of(model_node).unwrap_or(0);
            let p = &placement.jobs()[j];
            Target::Job {
                id: p.id.clone(),
                nodes: p
                    .nodes
                    .iter()
                    .map(|&n| commwatch_sim::model::node_name(n))
                    .collect(),
            }
        };
        use FindingKind as K;
        let (fault, kinds, target): (_, &'static [FindingKind], _) = match spec.scenario {
            Scenario::ManagementNic => (
                "management-nic",
                &[K::ManagementNetworkTraffic, K::NcclMisconfiguration],
                Target::Node(node.clone()),
            ),
            Scenario::DegradedLink => ("degraded-link", &[K::LinkDegraded], port()),
            Scenario::LinkErrors => ("link-errors", &[K::LinkErrors], port()),
            Scenario::Straggler => ("straggler", &[K::Straggler], Target::Node(node.clone())),
            Scenario::NoOverlap => ("no-overlap", &[K::ExposedCommunication], job()),
            Scenario::CpuBound => ("cpu-bound", &[K::CpuBound], job()),
            Scenario::Healthy | Scenario::Constant { .. } if spec.has(Variant::Flapping) => {
                ("flapping", &[K::LinkErrors, K::LinkDegraded], port())
            }
            Scenario::Healthy | Scenario::Constant { .. } => return None,
        };
        Some(Expectation {
            fault,
            kinds,
            target,
        })
    }

    /// Whether `f` is about this fault (any severity).
    pub fn matches(&self, f: &Finding) -> bool {
        if !self.kinds.contains(&f.kind) {
            return false;
        }
        let s = &f.subject;
        match &self.target {
            Target::Port { node, device } => &s.node == node && s.device.as_ref() == Some(device),
            Target::Node(node) => &s.node == node,
            Target::Job { id, nodes } => s.job.as_ref() == Some(id) || nodes.contains(&s.node),
        }
    }
}
