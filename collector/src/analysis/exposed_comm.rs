//! `exposed_communication`: links busy while the GPUs' SM activity is low — communication not overlapped with
//! compute.
//!
//! Per node over the window: `u` = share of time a kernel runs (`gpu_utilization_ratio`, NCCL's kernels
//! included), `s` = mean SM activity. Compute occupies `s ÷ `[`COMPUTE_SM_ACTIVITY`] of the time; kernel time
//! beyond that ran with low SM activity — communication kernels alone: exposed share ≈ `u − s ÷ 0.9`. It is
//! reported when it is at least [`EXPOSED_SHARE_ABOVE`] of the time and the node's fabric links carried traffic
//! in the window. The reference SM activity of dense training compute (0.9) is an assumption; a model whose
//! compute runs at lower SM activity reads as more exposed. Severity warning.

use super::input::AnalysisInput;
use super::{r4, Candidate, Evidence, FindingKind, Severity, Subject};

/// SM activity of GPUs busy with dense training compute.
pub const COMPUTE_SM_ACTIVITY: f64 = 0.9;
/// Exposed share of the time above which the finding is raised.
pub const EXPOSED_SHARE_ABOVE: f64 = 0.05;

/// Share of the time the node's GPUs compute: SM activity ÷ [`COMPUTE_SM_ACTIVITY`], at most 1 (NCCL's
/// kernels, at low SM activity, count little); `None` without SM activity.
pub fn compute_share(n: &super::input::NodeInput) -> Option<f64> {
    n.gpu_sm_activity()
        .map(|s| (s / COMPUTE_SM_ACTIVITY).min(1.0))
}

/// Exposed-communication share of the time for a node, from its GPU means; `None` without GPU data or link
/// traffic.
pub fn exposed_share(n: &super::input::NodeInput) -> Option<f64> {
    let u = n.gpu_busy_share()?;
    let s = n.gpu_sm_activity()?;
    let b = n.fabric_busy_share()?;
    if b <= 0.0 {
        return None;
    }
    Some((u - s / COMPUTE_SM_ACTIVITY).clamp(0.0, 1.0))
}

pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    let mut out = Vec::new();
    for n in &input.nodes {
        let Some(x) = exposed_share(n) else { continue };
        if x < EXPOSED_SHARE_ABOVE {
            continue;
        }
        let u = n.gpu_busy_share().unwrap_or(0.0);
        let s = n.gpu_sm_activity().unwrap_or(0.0);
        let mut subject = Subject::node(&n.name);
        subject.job = input.job_of(&n.name).map(|j| j.id.clone());
        let mut c = Candidate::new(
            FindingKind::ExposedCommunication,
            Severity::Warning,
            subject,
        );
        c.summary = format!(
            "{} spends {:.1}% of the time in communication not hidden under compute: kernels run {:.0}% of the time but SM activity is {:.0}%.",
            n.name,
            x * 100.0,
            u * 100.0,
            s * 100.0
        );
        c.evidence = Evidence::new(r4(x), "ratio")
            .expected(EXPOSED_SHARE_ABOVE)
            .detail("gpu_busy_share", r4(u))
            .detail("sm_activity", r4(s))
            .detail(
                "fabric_busy_share",
                r4(n.fabric_busy_share().unwrap_or(0.0)),
            );
        c.action = "Overlap the gradient AllReduce with backward compute (DDP bucketing: bucket_cap_mb, \
                    gradient_as_bucket_view; no blocking sync before the optimizer step); check a profile timeline \
                    (commwatch diagnose --trace) before tuning NCCL."
            .into();
        out.push(c);
    }
    out
}
