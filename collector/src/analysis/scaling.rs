//! `scaling_efficiency_drop`, and the per-job figures behind `commwatch_scaling_efficiency_ratio` and
//! `/api/v1/jobs` (step time, throughput, efficiency).
//!
//! Methods, in order of preference (the figure says which was used):
//! 1. `throughput_per_gpu` — from step markers with `samples`: samples/s per GPU now ÷ the job's baseline per
//!    GPU at a smaller scale (an operator's baseline first, else the history of the same job name at the
//!    largest smaller scale seen). Linear scaling is 1.0.
//! 2. `exposed_communication` — without a usable baseline but with GPU data: 1 − the largest exposed-communication
//!    share among the job's nodes (a synchronous job waits for its slowest rank).
//! 3. `communication_share` — links only, where bursts are resolved: 1 − the largest share of time a fabric
//!    port is busy. An upper bound on the exposure (overlap cannot be seen without GPU data), so a lower bound
//!    on efficiency.
//!
//! Without jobs known, all nodes form one job named [`CLUSTER_JOB`]. Warning below [`WARNING_BELOW`], critical
//! below [`CRITICAL_BELOW`].

use commwatch_model::LinkRole;
use serde::Serialize;

use super::exposed_comm::exposed_share;
use super::input::{AnalysisInput, ThroughputBaseline};
use super::straggler::groups;
use super::{median, r4, Candidate, Evidence, FindingKind, Severity, Subject};
use crate::steps::StepSource;

/// The job name used when no job is known.
pub const CLUSTER_JOB: &str = "cluster";
pub const WARNING_BELOW: f64 = 0.8;
pub const CRITICAL_BELOW: f64 = 0.6;
/// Marker steps with samples needed for the throughput method.
pub const MIN_MARKER_STEPS: usize = 5;

/// One job's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobFigures {
    pub job: String,
    /// Median step duration, seconds (steps, else the fabric bursts' period).
    pub step_time_s: Option<f64>,
    /// Samples per second of the whole job (markers with samples).
    pub throughput_samples_per_second: Option<f64>,
    pub gpus: Option<u32>,
    pub samples_per_second_per_gpu: Option<f64>,
    /// Efficiency 0..1 (above 1 possible with a super-linear baseline).
    pub scaling_efficiency: Option<f64>,
    /// `throughput_per_gpu`, `exposed_communication` or `communication_share`.
    pub method: Option<String>,
    pub baseline: Option<ThroughputBaseline>,
    /// Steps (or bursts) the figures rest on.
    pub steps: usize,
}

/// Figures of every job in the input.
pub fn job_figures(input: &AnalysisInput) -> Vec<JobFigures> {
    let mut out = Vec::new();
    for (job, nodes) in groups(input) {
        if nodes.is_empty() {
            continue;
        }
        let name = job.clone().unwrap_or_else(|| CLUSTER_JOB.to_string());
        let gpus: Option<u32> = match input.jobs.iter().find(|j| Some(&j.id) == job.as_ref()) {
            Some(j) if j.gpus() > 0 => u32::try_from(j.gpus()).ok(),
            _ => {
                let g: usize = nodes.iter().map(|n| n.gpus.len()).sum();
                (g > 0).then(|| u32::try_from(g).unwrap_or(u32::MAX))
            }
        };
        let mut durations: Vec<f64> = nodes
            .iter()
            .flat_map(|n| n.steps.iter())
            .map(|s| s.duration_s())
            .filter(|d| *d > 0.0)
            .collect();
        let mut steps = durations.len();
        let step_time = median(&mut durations).or_else(|| {
            let mut p: Vec<f64> = nodes
                .iter()
                .flat_map(|n| n.links.iter())
                .filter_map(|l| l.activity.as_ref()?.period_s)
                .collect();
            median(&mut p)
        });
        // Throughput from markers with samples: per node samples ÷ time, summed over nodes.
        let mut throughput = 0.0;
        let mut marker_steps = 0usize;
        for n in &nodes {
            let with: Vec<_> = n
                .steps
                .iter()
                .filter(|s| s.source == StepSource::Markers && s.samples.is_some())
                .collect();
            let t: f64 = with.iter().map(|s| s.duration_s()).sum();
            let samples: u64 = with.iter().filter_map(|s| s.samples).sum();
            if t > 0.0 {
                throughput += samples as f64 / t;
                marker_steps = marker_steps.max(with.len());
            }
        }
        let throughput = (marker_steps >= MIN_MARKER_STEPS).then_some(throughput);
        let per_gpu = match (throughput, gpus) {
            (Some(t), Some(g)) if g > 0 => Some(t / f64::from(g)),
            _ => None,
        };
        let baseline = match (per_gpu, gpus) {
            (Some(_), Some(g)) => {
                let mut c: Vec<&ThroughputBaseline> = input
                    .throughput_baselines
                    .iter()
                    .filter(|b| b.job == name && b.gpus < g && b.samples_per_second_per_gpu > 0.0)
                    .collect();
                c.sort_by_key(|b| (b.source == "operator", b.gpus));
                c.last().map(|b| (*b).clone())
            }
            _ => None,
        };
        let (eff, method) = if let (Some(p), Some(b)) = (per_gpu, &baseline) {
            steps = marker_steps;
            (
                Some(p / b.samples_per_second_per_gpu),
                Some("throughput_per_gpu"),
            )
        } else if let Some(x) = nodes
            .iter()
            .filter_map(|n| exposed_share(n))
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
        {
            (Some(1.0 - x), Some("exposed_communication"))
        } else {
            let resolved: Vec<(f64, usize)> = nodes
                .iter()
                .flat_map(|n| n.links.iter())
                .filter(|l| l.link.role == LinkRole::Fabric && l.link.key.class.is_rdma())
                .filter_map(|l| {
                    let a = l.activity.as_ref()?;
                    (a.resolved && a.complete_bursts() >= MIN_MARKER_STEPS)
                        .then(|| (a.busy_share(), a.complete_bursts()))
                })
                .collect();
            match resolved
                .iter()
                .map(|r| r.0)
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
            {
                Some(b) => {
                    steps = resolved.iter().map(|r| r.1).max().unwrap_or(0);
                    (Some(1.0 - b), Some("communication_share"))
                }
                None => (None, None),
            }
        };
        out.push(JobFigures {
            job: name,
            step_time_s: step_time.map(r4),
            throughput_samples_per_second: throughput.map(r4),
            gpus,
            samples_per_second_per_gpu: per_gpu.map(r4),
            scaling_efficiency: eff.map(r4),
            method: method.map(str::to_string),
            baseline,
            steps,
        });
    }
    out
}

pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    job_figures(input)
        .into_iter()
        .filter_map(|f| {
            let eff = f.scaling_efficiency?;
            if eff >= WARNING_BELOW {
                return None;
            }
            let sev = if eff < CRITICAL_BELOW { Severity::Critical } else { Severity::Warning };
            let method = f.method.clone().unwrap_or_default();
            let mut c = Candidate::new(FindingKind::ScalingEfficiencyDrop, sev, Subject::job(&f.job));
            let how = match (method.as_str(), &f.baseline) {
                ("throughput_per_gpu", Some(b)) => format!(
                    "{:.1} samples/s per GPU at {} GPUs against {:.1} at {} GPUs ({} baseline)",
                    f.samples_per_second_per_gpu.unwrap_or(0.0),
                    f.gpus.unwrap_or(0),
                    b.samples_per_second_per_gpu,
                    b.gpus,
                    b.source
                ),
                ("exposed_communication", _) => format!(
                    "{:.0}% of the step is communication not hidden under compute",
                    (1.0 - eff) * 100.0
                ),
                _ => format!(
                    "the fabric is busy {:.0}% of the step (links only: an upper bound on exposed communication)",
                    (1.0 - eff) * 100.0
                ),
            };
            c.summary = format!(
                "Job {} runs at {:.0}% scaling efficiency ({method}): {how}.",
                f.job,
                eff * 100.0
            );
            let mut e = Evidence::new(eff, "ratio")
                .expected(1.0)
                .steps(f.steps)
                .detail("method", method.clone());
            if let Some(t) = f.step_time_s {
                e = e.detail("step_time_s", t);
            }
            if let Some(g) = f.gpus {
                e = e.detail("gpus", u64::from(g));
            }
            if let Some(b) = &f.baseline {
                e = e
                    .detail("baseline_samples_per_second_per_gpu", b.samples_per_second_per_gpu)
                    .detail("baseline_gpus", u64::from(b.gpus));
            }
            c.evidence = e;
            c.action = "Follow the four steps: baselines at 1 GPU / 1 node / N nodes, then whether communication \
                        is exposed on the timeline, which collective costs most, and the link and NCCL algorithm; \
                        see the other findings of this job for the cause."
                .into();
            Some(c)
        })
        .collect()
}
