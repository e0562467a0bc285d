//! `cpu_bound`: GPUs idle between steps while the host CPU is busy — the input pipeline (data loader,
//! augmentation) is the bottleneck, so nobody should tune NCCL for it.
//!
//! Per node over the window: GPU idle share `1 − u` (no kernel running) at least [`GPU_IDLE_ABOVE`], host CPU
//! utilisation at least [`CPU_COVERS_IDLE`] × that idle share (the CPU is saturated while the GPUs wait; a CPU
//! at 100% during the idle part of each step averages about the idle share), and communication does not explain
//! the idle time (exposed communication below half of it). Severity warning.

use super::exposed_comm::exposed_share;
use super::input::AnalysisInput;
use super::{r4, Candidate, Evidence, FindingKind, Severity, Subject};

/// GPU idle share above which the node is examined.
pub const GPU_IDLE_ABOVE: f64 = 0.2;
/// CPU utilisation must reach this share of the GPU idle share.
pub const CPU_COVERS_IDLE: f64 = 0.8;

pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    let mut out = Vec::new();
    for n in &input.nodes {
        let (Some(u), Some(cpu)) = (n.gpu_busy_share(), n.cpu_utilization) else {
            continue;
        };
        let idle = 1.0 - u;
        if idle < GPU_IDLE_ABOVE || cpu < CPU_COVERS_IDLE * idle {
            continue;
        }
        let exposed = exposed_share(n).unwrap_or(0.0);
        if exposed >= 0.5 * idle {
            continue;
        }
        let mut subject = Subject::node(&n.name);
        subject.job = input.job_of(&n.name).map(|j| j.id.clone());
        let mut c = Candidate::new(FindingKind::CpuBound, Severity::Warning, subject);
        c.summary = format!(
            "{}'s GPUs are idle {:.0}% of the time while the host CPU is {:.0}% busy and communication explains only {:.1}%: the input pipeline is the bottleneck, not the network.",
            n.name,
            idle * 100.0,
            cpu * 100.0,
            exposed * 100.0
        );
        c.evidence = Evidence::new(r4(idle), "ratio")
            .expected(GPU_IDLE_ABOVE)
            .detail("cpu_utilization", r4(cpu))
            .detail("exposed_communication_share", r4(exposed));
        c.action = "Speed up the input pipeline: more DataLoader workers, pin_memory and prefetching, faster \
                    decoding or pre-processed data, fewer host-side syncs; do not tune NCCL for this."
            .into();
        out.push(c);
    }
    out
}
