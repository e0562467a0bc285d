//! `straggler`: a node the rest of the job waits for, consistently.
//!
//! Two signals, each over the window and against the job's median (at least [`MIN_NODES`] nodes):
//! - compute: its GPUs compute a larger share of the time than the job's median by more than
//!   [`BUSY_EXCESS_ABOVE`] (absolute share) — in synchronous data-parallel training every other rank idles
//!   while it finishes, so it is the one that is late at every step's collective. The share of time computing
//!   is SM activity ÷ the SM activity of dense compute (`exposed_comm`'s reference) where every node reports
//!   SM activity, else the share of time a kernel runs (`gpu_utilization_ratio`). The first leaves out NCCL's
//!   kernels: when gradient buckets overlap backward, the other ranks run NCCL kernels while they wait for the
//!   straggler's buckets, so their kernel-running share is as high as its own;
//! - network: its fabric ports' achieved rate during communication below [`RATE_LAG_BELOW`] × the job's
//!   median (when no `link_degraded` explains it, root-cause linking happens in `causes.rs`). Measured rates
//!   only: confident steps or resolved bursts; a burst shorter than a few samples has no rate to compare.
//!
//! The window (20 s, tens of steps) and the tracker's hysteresis make it "consistent". Severity warning.

use super::exposed_comm::compute_share;
use super::input::{AnalysisInput, NodeInput};
use super::{gbs, median, r4, Candidate, Evidence, FindingKind, Severity, Subject};

/// Fewest nodes a median means something for.
pub const MIN_NODES: usize = 3;
/// GPU busy share above the job median by more than this: the node computes longer.
pub const BUSY_EXCESS_ABOVE: f64 = 0.05;
/// Fabric rate below this share of the job's median: the node's links lag.
pub const RATE_LAG_BELOW: f64 = 0.7;

/// The groups of nodes to compare: each job's nodes, or all nodes when no job is known.
pub(crate) fn groups(
    input: &AnalysisInput,
) -> Vec<(Option<String>, Vec<&super::input::NodeInput>)> {
    if input.jobs.is_empty() {
        return vec![(None, input.nodes.iter().collect())];
    }
    input
        .jobs
        .iter()
        .map(|j| {
            let nodes = j.nodes().filter_map(|n| input.node(n)).collect();
            (Some(j.id.clone()), nodes)
        })
        .collect()
}

/// How a group's nodes' compute is compared: the share of time computing from SM activity when every node
/// with GPU data reports it, else the kernel-running share. `(signal name, share of a node)`.
fn compute_signal(nodes: &[&NodeInput]) -> (&'static str, fn(&NodeInput) -> Option<f64>) {
    let sm = nodes
        .iter()
        .filter(|n| n.gpu_busy_share().is_some())
        .all(|n| n.gpu_sm_activity().is_some());
    if sm {
        ("gpu_compute_share", compute_share)
    } else {
        ("gpu_busy_share", NodeInput::gpu_busy_share)
    }
}

pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    let mut out = Vec::new();
    for (job, nodes) in groups(input) {
        if nodes.len() < MIN_NODES {
            continue;
        }
        let (signal, share) = compute_signal(&nodes);
        let mut busy: Vec<f64> = nodes.iter().filter_map(|n| share(n)).collect();
        let busy_median = median(&mut busy);
        let mut rates: Vec<f64> = nodes.iter().filter_map(|n| n.fabric_burst_rate()).collect();
        let rate_median = median(&mut rates);
        for n in &nodes {
            let mut subject = Subject::node(&n.name);
            subject.job = job.clone();
            if let (Some(b), Some(m)) = (share(n), busy_median) {
                if b - m > BUSY_EXCESS_ABOVE {
                    let mut c =
                        Candidate::new(FindingKind::Straggler, Severity::Warning, subject.clone());
                    c.summary = format!(
                        "{} computes {:.0}% of the time against the job's median {:.0}%: the other {} nodes wait for it every step.",
                        n.name,
                        b * 100.0,
                        m * 100.0,
                        nodes.len() - 1
                    );
                    c.evidence = Evidence::new(r4(b), "ratio")
                        .expected(r4(m))
                        .detail("signal", signal)
                        .detail("nodes", nodes.len() as u64);
                    c.action = format!(
                        "Look at {} itself: GPU clocks/thermals/power capping (nvidia-smi -q -d PERFORMANCE), a slower \
                         GPU model, other processes on its GPUs or CPUs, or an uneven data shard.",
                        n.name
                    );
                    out.push(c);
                    continue;
                }
            }
            if let (Some(r), Some(m)) = (n.fabric_burst_rate(), rate_median) {
                if r < RATE_LAG_BELOW * m {
                    let mut c = Candidate::new(FindingKind::Straggler, Severity::Warning, subject);
                    c.summary = format!(
                        "{}'s fabric ports achieve {} during communication against the job's median {}.",
                        n.name,
                        gbs(r),
                        gbs(m)
                    );
                    c.evidence = Evidence::new(r4(r), "bytes_per_second")
                        .expected(r4(m))
                        .detail("signal", "fabric_rate")
                        .detail("nodes", nodes.len() as u64);
                    c.action = format!(
                        "Check {}'s ports (rate, errors), its PCIe/NUMA affinity between GPUs and HCAs, and competing traffic.",
                        n.name
                    );
                    out.push(c);
                }
            }
        }
    }
    out
}
