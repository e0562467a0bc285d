//! `scaling_efficiency_drop`, and the per-job figures behind `commwatch_scaling_efficiency_ratio` and
//! `/api/v1/jobs` (step time, throughput, efficiency).
//!
//! Figures, in order of preference (the figure says which method was used):
//! 1. `throughput_per_gpu` — from step markers with `samples`: samples/s per GPU now ÷ the job's baseline per
//!    GPU at a smaller scale (an operator's baseline first, else the history of the same job name at the
//!    largest smaller scale seen). Linear scaling is 1.0. A measurement.
//! 2. `exposed_communication` — without a usable baseline but with GPU data: 1 − the largest exposed-communication
//!    share among the job's nodes (a synchronous job waits for its slowest rank). A measurement.
//! 3. `communication_share` — links only, where bursts are resolved: 1 − the largest share of time a fabric
//!    port is busy. An upper bound on the exposure (overlap cannot be seen without GPU data), so only a lower
//!    bound on efficiency: a job whose gradient buckets hide under backward compute is busy half the step and
//!    loses nothing.
//!
//! The finding rests on measurements only. Warning below [`WARNING_BELOW`], critical below [`CRITICAL_BELOW`],
//! from a measured figure (1 or 2), or from a *drop* against the job's own recent history ([`super::trend`]):
//! its throughput per GPU, or else its step time, now against the median of the last minutes — relative
//! efficiency `reference step time ÷ step time now` (or `throughput now ÷ reference`) below the same
//! thresholds. A bound (3) below [`WARNING_BELOW`] is reported as a bound, at info.
//!
//! Without jobs known, all nodes form one job named [`CLUSTER_JOB`].

use serde::Serialize;

use super::input::{AnalysisInput, JobReference, NodeInput, ThroughputBaseline};
use super::straggler::groups;
use super::{median_select, r4, Candidate, Evidence, FindingKind, Severity, Subject};
use crate::steps::StepSource;

/// The job name used when no job is known.
pub const CLUSTER_JOB: &str = "cluster";
pub const WARNING_BELOW: f64 = 0.8;
pub const CRITICAL_BELOW: f64 = 0.6;
/// Marker steps with samples needed for the throughput method.
pub const MIN_MARKER_STEPS: usize = 5;
/// The method whose figure is a bound, not a measurement.
pub const BOUND_METHOD: &str = "communication_share";
/// The method of a drop against the job's own history.
pub const HISTORY_METHOD: &str = "own_history";
/// Seconds of a node's steps needed for its fabric bytes per second.
pub const MIN_RATE_SPAN_S: f64 = 5.0;

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
    /// Where the steps come from (`markers` or `inferred`); `None` when the step time is the bursts' period.
    pub step_source: Option<StepSource>,
    /// Work per unit time read from the links: the median over the job's nodes of the bytes their fabric
    /// ports moved (max of tx and rx, summed over ports) during their steps ÷ those steps' time, bytes/s.
    /// Unlike the step time, it does not change when the step engine finds a step of several bursts.
    /// `None` below [`MIN_RATE_SPAN_S`] of steps on every node.
    pub fabric_bytes_per_second: Option<f64>,
    /// What runs of the job are compared by when its own history is too short ([`super::trend`]): its ranks
    /// and nodes, `"8 ranks on 2 nodes"`; `None` for a job no rank lists.
    #[serde(skip)]
    pub shape: Option<String>,
}

impl JobFigures {
    /// Whether the efficiency is only a bound (`communication_share`), not a measurement.
    pub fn is_bound(&self) -> bool {
        self.method.as_deref() == Some(BOUND_METHOD)
    }
}

/// The job's GPUs: from its ranks, else the GPUs its nodes report.
fn gpus_of(input: &AnalysisInput, job: Option<&String>, nodes: &[&NodeInput]) -> Option<u32> {
    match input.jobs.iter().find(|j| Some(&j.id) == job) {
        Some(j) if j.gpus() > 0 => u32::try_from(j.gpus()).ok(),
        _ => {
            let g: usize = nodes.iter().map(|n| n.gpus.len()).sum();
            (g > 0).then(|| u32::try_from(g).unwrap_or(u32::MAX))
        }
    }
}

/// The job's step duration and the steps it rests on: the median over the nodes of each node's median step
/// (every node of a synchronous job runs the same steps: one vote each, so a node whose steps were cut wrong
/// cannot decide it by their number), else the period of their fabric ports' bursts (a management NIC's
/// storage traffic has a period of its own).
pub(crate) fn step_time(nodes: &[&NodeInput]) -> (Option<f64>, usize) {
    let mut steps = 0;
    let mut per_node: Vec<f64> = nodes
        .iter()
        .filter_map(|n| {
            let mut d: Vec<f64> = n
                .steps
                .iter()
                .map(|s| s.duration_s())
                .filter(|d| *d > 0.0)
                .collect();
            steps += d.len();
            median_select(&mut d)
        })
        .collect();
    if let Some(t) = median_select(&mut per_node) {
        return (Some(t), steps);
    }
    let mut p: Vec<f64> = nodes
        .iter()
        .flat_map(|n| n.fabric_links())
        .filter_map(|l| l.activity.as_ref()?.period_s)
        .collect();
    (median_select(&mut p), steps)
}

/// The source of the job's steps: the one most of its steps come from (`None` without steps).
fn step_source(nodes: &[&NodeInput]) -> Option<StepSource> {
    let (mut markers, mut inferred) = (0usize, 0usize);
    for s in nodes.iter().flat_map(|n| n.steps.iter()) {
        match s.source {
            StepSource::Markers => markers += 1,
            StepSource::Inferred => inferred += 1,
        }
    }
    match (markers, inferred) {
        (0, 0) => None,
        (m, i) if m >= i => Some(StepSource::Markers),
        _ => Some(StepSource::Inferred),
    }
}

/// The median over the nodes of their fabric ports' bytes per second during their steps (see
/// [`JobFigures::fabric_bytes_per_second`]).
fn fabric_rate(nodes: &[&NodeInput]) -> Option<f64> {
    let mut rates: Vec<f64> = nodes
        .iter()
        .filter_map(|n| {
            let fd = n.fabric_data();
            let t: f64 = n.steps.iter().map(|s| s.duration_s().max(0.0)).sum();
            // Each step's fabric figures in brief: every link that carries fabric data is among them.
            let bytes: u64 = n
                .steps
                .iter()
                .flat_map(|s| s.fabric())
                .filter(|l| fd.carries_link(&l.link))
                .map(|l| l.bytes)
                .fold(0u64, u64::saturating_add);
            (t >= MIN_RATE_SPAN_S && bytes > 0).then(|| bytes as f64 / t)
        })
        .collect();
    median_select(&mut rates)
}

/// Samples per second of the job from markers with samples (per node samples ÷ time, summed over nodes), and
/// the marker steps it rests on; `None` below [`MIN_MARKER_STEPS`].
fn throughput(nodes: &[&NodeInput]) -> (Option<f64>, usize) {
    let mut total = 0.0;
    let mut marker_steps = 0usize;
    for n in nodes {
        let with: Vec<_> = n
            .steps
            .iter()
            .filter(|s| s.source == StepSource::Markers && s.samples.is_some())
            .collect();
        let t: f64 = with.iter().map(|s| s.duration_s()).sum();
        let samples: u64 = with.iter().filter_map(|s| s.samples).sum();
        if t > 0.0 {
            total += samples as f64 / t;
            marker_steps = marker_steps.max(with.len());
        }
    }
    (
        (marker_steps >= MIN_MARKER_STEPS).then_some(total),
        marker_steps,
    )
}

/// The baseline per GPU at a smaller scale: an operator's first, else the largest smaller scale.
fn baseline(input: &AnalysisInput, job: &str, gpus: u32) -> Option<ThroughputBaseline> {
    let mut c: Vec<&ThroughputBaseline> = input
        .throughput_baselines
        .iter()
        .filter(|b| b.job == job && b.gpus < gpus && b.samples_per_second_per_gpu > 0.0)
        .collect();
    c.sort_by_key(|b| (b.source == "operator", b.gpus));
    c.last().map(|b| (*b).clone())
}

/// The bound from links only: 1 − the busiest resolved fabric port's busy share, with the bursts it rests on.
fn communication_share(nodes: &[&NodeInput]) -> Option<(f64, usize)> {
    nodes
        .iter()
        .flat_map(|n| n.fabric_links())
        .filter_map(|l| {
            let a = l.activity.as_ref()?;
            (a.resolved && a.complete_bursts() >= MIN_MARKER_STEPS)
                .then(|| (a.busy_share(), a.complete_bursts()))
        })
        .fold(None, |m: Option<(f64, usize)>, (b, n)| match m {
            Some((mb, mn)) => Some((mb.max(b), mn.max(n))),
            None => Some((b, n)),
        })
        .map(|(b, n)| (1.0 - b, n))
}

/// Figures of every job in the input.
pub fn job_figures(input: &AnalysisInput) -> Vec<JobFigures> {
    job_figures_with(input, &super::NodeFigures::new(input))
}

/// [`job_figures`], each node's fabric busy share read from `node_figures` (shared with the rules that read
/// it).
pub(crate) fn job_figures_with(
    input: &AnalysisInput,
    node_figures: &super::NodeFigures<'_>,
) -> Vec<JobFigures> {
    let mut out = Vec::new();
    for (job, nodes) in groups(input) {
        if nodes.is_empty() {
            continue;
        }
        let name = job.clone().unwrap_or_else(|| CLUSTER_JOB.to_string());
        let gpus = gpus_of(input, job.as_ref(), &nodes);
        let (step_time, mut steps) = step_time(&nodes);
        let (throughput, marker_steps) = throughput(&nodes);
        let per_gpu = match (throughput, gpus) {
            (Some(t), Some(g)) if g > 0 => Some(t / f64::from(g)),
            _ => None,
        };
        let baseline = match (per_gpu, gpus) {
            (Some(_), Some(g)) => baseline(input, &name, g),
            _ => None,
        };
        let exposed = nodes
            .iter()
            .filter_map(|n| node_figures.exposed_share(n))
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        let (eff, method) = if let (Some(p), Some(b)) = (per_gpu, &baseline) {
            steps = marker_steps;
            (
                Some(p / b.samples_per_second_per_gpu),
                Some("throughput_per_gpu"),
            )
        } else if let Some(x) = exposed {
            (Some(1.0 - x), Some("exposed_communication"))
        } else if let Some((e, n)) = communication_share(&nodes) {
            steps = n;
            (Some(e), Some(BOUND_METHOD))
        } else {
            (None, None)
        };
        let shape = input
            .jobs
            .iter()
            .find(|j| Some(&j.id) == job.as_ref())
            .filter(|j| !j.ranks.is_empty())
            .map(|j| format!("{} ranks on {} nodes", j.ranks.len(), nodes.len()));
        out.push(JobFigures {
            shape,
            job: name,
            step_time_s: step_time.map(r4),
            throughput_samples_per_second: throughput.map(r4),
            gpus,
            samples_per_second_per_gpu: per_gpu.map(r4),
            scaling_efficiency: eff.map(r4),
            method: method.map(str::to_string),
            baseline,
            steps,
            step_source: step_source(&nodes),
            fabric_bytes_per_second: fabric_rate(&nodes).map(r4),
        });
    }
    out
}

/// The severity a measured efficiency (or relative efficiency) calls for.
fn severity(eff: f64) -> Option<Severity> {
    if eff < CRITICAL_BELOW {
        Some(Severity::Critical)
    } else if eff < WARNING_BELOW {
        Some(Severity::Warning)
    } else {
        None
    }
}

/// A job's efficiency now against its own recent history: `(relative efficiency, what it compares)`.
#[derive(Debug, Clone, PartialEq)]
struct HistoryDrop {
    relative: f64,
    /// `throughput_per_gpu`, `step_time` (marker steps) or `fabric_bytes_per_second` (inferred steps).
    compares: &'static str,
    now: f64,
    reference: f64,
    over_seconds: f64,
    /// The earlier run of the same shape compared against (`None`: the job's own earlier steps).
    earlier_run: Option<String>,
}

/// The drop of `f` against `reference`, like against like: throughput per GPU when both have it; else, on
/// marker steps of the same segment (or without steps, the bursts' period), step time; else the fabric
/// bytes per second — never the duration of inferred steps, which changes when the step engine reads several
/// bursts as one step.
fn drop_against(f: &JobFigures, reference: &JobReference) -> Option<HistoryDrop> {
    if f.step_source != reference.step_source {
        return None;
    }
    // Marker steps, or no steps at all (the fabric bursts' period: no step engine reading to change).
    let markers = f.step_source != Some(StepSource::Inferred);
    let (relative, compares, now, then) = match (
        f.samples_per_second_per_gpu,
        reference.samples_per_second_per_gpu,
    ) {
        (Some(now), Some(then)) if then > 0.0 => (now / then, "throughput_per_gpu", now, then),
        _ => match (f.step_time_s, reference.step_time_s) {
            (Some(now), Some(then)) if markers && now > 0.0 => (then / now, "step_time", now, then),
            _ => match (f.fabric_bytes_per_second, reference.fabric_bytes_per_second) {
                (Some(now), Some(then)) if then > 0.0 => {
                    (now / then, "fabric_bytes_per_second", now, then)
                }
                _ => return None,
            },
        },
    };
    Some(HistoryDrop {
        relative,
        compares,
        now,
        reference: then,
        over_seconds: reference.over_seconds,
        earlier_run: reference.earlier_run.clone(),
    })
}

pub fn evaluate(input: &AnalysisInput) -> Vec<Candidate> {
    evaluate_with(input, &job_figures(input))
}

/// [`evaluate`] on the input's [`job_figures`] worked out already (an evaluation reports them too).
pub(crate) fn evaluate_with(input: &AnalysisInput, figures: &[JobFigures]) -> Vec<Candidate> {
    figures
        .iter()
        .filter_map(|f| {
            let drop = input
                .job_references
                .iter()
                .find(|r| r.job == f.job)
                .and_then(|r| drop_against(f, r));
            candidate(f, drop.as_ref())
        })
        .collect()
}

/// The candidate for one job's figures and its drop, if either calls for one.
fn candidate(f: &JobFigures, drop: Option<&HistoryDrop>) -> Option<Candidate> {
    let eff = f.scaling_efficiency;
    let measured = eff.filter(|_| !f.is_bound()).and_then(severity);
    let dropped = drop.and_then(|d| severity(d.relative));
    let bound = eff.filter(|e| f.is_bound() && *e < WARNING_BELOW);
    let (sev, by_drop) = match (measured, dropped) {
        (Some(m), Some(d)) if d > m => (d, true),
        (Some(m), _) => (m, false),
        (None, Some(d)) => (d, true),
        (None, None) if bound.is_some() => (Severity::Info, false),
        (None, None) => return None,
    };
    let mut c = Candidate::new(
        FindingKind::ScalingEfficiencyDrop,
        sev,
        Subject::job(&f.job),
    );
    let figure = eff.map(|e| describe(f, e)).unwrap_or_default();
    c.summary = match drop.filter(|_| by_drop) {
        Some(d) => format!(
            "Job {} runs at {:.0}% of its own recent throughput: {}{}.",
            f.job,
            d.relative * 100.0,
            describe_drop(d),
            if figure.is_empty() {
                String::new()
            } else {
                format!("; {figure}")
            }
        ),
        None => format!("Job {}: {figure}.", f.job),
    };
    c.evidence = evidence(f, drop, by_drop);
    c.action = if f.is_bound() && !by_drop {
        "Links alone cannot tell hidden from exposed communication: send step markers with samples \
         (commwatch_steps) or run the GPU source to measure the efficiency; compare with a smaller-scale run \
         (POST /api/v1/baselines)."
            .into()
    } else {
        "Follow the four steps: baselines at 1 GPU / 1 node / N nodes, then whether communication \
         is exposed on the timeline, which collective costs most, and the link and NCCL algorithm; \
         see the other findings of this job for the cause."
            .into()
    };
    Some(c)
}

/// The job's efficiency figure in words, with its method.
fn describe(f: &JobFigures, eff: f64) -> String {
    let method = f.method.as_deref().unwrap_or_default();
    match (method, &f.baseline) {
        ("throughput_per_gpu", Some(b)) => format!(
            "{:.0}% scaling efficiency (throughput_per_gpu): {:.1} samples/s per GPU at {} GPUs against {:.1} at {} GPUs ({} baseline)",
            eff * 100.0,
            f.samples_per_second_per_gpu.unwrap_or(0.0),
            f.gpus.unwrap_or(0),
            b.samples_per_second_per_gpu,
            b.gpus,
            b.source
        ),
        ("exposed_communication", _) => format!(
            "{:.0}% scaling efficiency (exposed_communication): {:.0}% of the step is communication not hidden under compute",
            eff * 100.0,
            (1.0 - eff) * 100.0
        ),
        _ => format!(
            "scaling efficiency at least {:.0}% (communication_share, a bound): the fabric is busy up to {:.0}% of the step, and links alone cannot tell how much of that is hidden under compute",
            eff * 100.0,
            (1.0 - eff) * 100.0
        ),
    }
}

fn describe_drop(d: &HistoryDrop) -> String {
    let then = match &d.earlier_run {
        Some(run) => format!(
            "in its earlier run of the same shape ({run}, {:.0} s)",
            d.over_seconds
        ),
        None => format!("over the previous {:.0} s", d.over_seconds),
    };
    match d.compares {
        "throughput_per_gpu" => format!(
            "{:.1} samples/s per GPU against {:.1} {then}",
            d.now, d.reference
        ),
        "fabric_bytes_per_second" => format!(
            "its fabric ports move {:.3e} B/s against {:.3e} B/s {then}",
            d.now, d.reference
        ),
        _ => format!(
            "steps take {:.3} s against {:.3} s {then}",
            d.now, d.reference
        ),
    }
}

/// The evidence: the figure that set the severity (the drop's relative efficiency when it did), the other one
/// in the details, and `bound: true` when the efficiency is only a bound.
fn evidence(f: &JobFigures, drop: Option<&HistoryDrop>, by_drop: bool) -> Evidence {
    let method = f.method.clone().unwrap_or_default();
    let mut e = match (drop, by_drop) {
        (Some(d), true) => Evidence::new(r4(d.relative), "ratio")
            .expected(1.0)
            .seconds(r4(d.over_seconds))
            .detail("method", HISTORY_METHOD),
        _ => Evidence::new(f.scaling_efficiency.unwrap_or(0.0), "ratio")
            .expected(1.0)
            .detail("method", method.clone()),
    }
    .steps(f.steps);
    if let Some(eff) = f.scaling_efficiency {
        e = e
            .detail("scaling_efficiency", eff)
            .detail("efficiency_method", method);
    }
    if f.is_bound() {
        e = e.detail("bound", true);
    }
    if let Some(d) = drop {
        e = e
            .detail("relative_to_history", r4(d.relative))
            .detail("history_compares", d.compares)
            .detail("history_reference", r4(d.reference))
            .detail("history_seconds", r4(d.over_seconds));
        if let Some(run) = &d.earlier_run {
            e = e.detail("earlier_run", run.clone());
        }
    }
    if let Some(t) = f.step_time_s {
        e = e.detail("step_time_s", t);
    }
    if let Some(g) = f.gpus {
        e = e.detail("gpus", u64::from(g));
    }
    if let Some(b) = &f.baseline {
        e = e
            .detail(
                "baseline_samples_per_second_per_gpu",
                b.samples_per_second_per_gpu,
            )
            .detail("baseline_gpus", u64::from(b.gpus));
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn figures(eff: f64, method: &str) -> JobFigures {
        JobFigures {
            job: "j".into(),
            step_time_s: Some(0.31),
            throughput_samples_per_second: None,
            gpus: Some(64),
            samples_per_second_per_gpu: None,
            scaling_efficiency: Some(eff),
            method: Some(method.into()),
            baseline: None,
            steps: 60,
            step_source: Some(StepSource::Markers),
            fabric_bytes_per_second: None,
            shape: None,
        }
    }

    fn history(step_time_s: f64) -> HistoryDrop {
        drop_against(
            &figures(1.0, "exposed_communication"),
            &JobReference {
                job: "j".into(),
                step_time_s: Some(step_time_s),
                samples_per_second_per_gpu: None,
                over_seconds: 300.0,
                step_source: Some(StepSource::Markers),
                fabric_bytes_per_second: None,
                earlier_run: None,
            },
        )
        .expect("drop")
    }

    #[test]
    fn a_bound_is_info_at_most_and_says_so() {
        // Overlapped buckets: the fabric busy 45 % of the step, nothing exposed.
        let c = candidate(&figures(0.55, BOUND_METHOD), None).expect("candidate");
        assert_eq!(c.severity, Severity::Info);
        assert_eq!(c.evidence.details["bound"], true);
        assert_eq!(c.evidence.details["method"], BOUND_METHOD);
        assert!(c.summary.contains("at least 55%"), "{}", c.summary);
        // A bound above the warning line: nothing to say.
        assert_eq!(candidate(&figures(0.85, BOUND_METHOD), None), None);
    }

    #[test]
    fn measured_figures_set_warning_and_critical() {
        let c = candidate(&figures(0.7, "exposed_communication"), None).expect("candidate");
        assert_eq!(c.severity, Severity::Warning);
        let c = candidate(&figures(0.5, "throughput_per_gpu"), None).expect("candidate");
        assert_eq!(c.severity, Severity::Critical);
        assert_eq!(
            candidate(&figures(0.9, "exposed_communication"), None),
            None
        );
    }

    #[test]
    fn a_drop_against_the_job_s_own_history_is_measured() {
        // Steps took 0.2 s, now 0.31 s: 65 % of the job's own throughput, whatever the bound says.
        let d = history(0.2);
        assert!((d.relative - 0.2 / 0.31).abs() < 1e-12);
        let c = candidate(&figures(0.55, BOUND_METHOD), Some(&d)).expect("candidate");
        assert_eq!(c.severity, Severity::Warning);
        assert_eq!(c.evidence.details["method"], HISTORY_METHOD);
        assert_eq!(c.evidence.measured, r4(0.2 / 0.31));
        assert_eq!(c.evidence.details["bound"], true);
        assert!(
            c.summary.contains("65% of its own recent throughput"),
            "{}",
            c.summary
        );
        // No drop: the bound alone stays info.
        let c = candidate(&figures(0.55, BOUND_METHOD), Some(&history(0.31))).expect("candidate");
        assert_eq!(c.severity, Severity::Info);
    }

    /// Two nodes whose inferred steps last `period_s` from `from_s` to `to_s`, each moving
    /// `bytes_per_s × period_s` bytes on its fabric port.
    fn inferred(period_s: f64, bytes_per_s: f64, from_s: f64, to_s: f64) -> AnalysisInput {
        use crate::analysis::test_support::{hca_step, HcaFigures};
        let node = |name: &str| {
            let mut n = NodeInput {
                name: name.into(),
                ..NodeInput::default()
            };
            let mut t = from_s;
            while t + period_s <= to_s + 1e-9 {
                let bytes = (bytes_per_s * period_s) as u64;
                let span = ((t * 1e9) as i64, ((t + period_s) * 1e9) as i64);
                let figures = HcaFigures {
                    bytes,
                    active_s: 0.05,
                    achieved: None,
                    average: bytes_per_s,
                    capacity: None,
                    confident: false,
                };
                n.steps.push(Arc::new(hca_step(
                    name,
                    n.steps.len() as u64,
                    span,
                    figures,
                )));
                t += period_s;
            }
            n
        };
        AnalysisInput {
            now_unix_ns: (to_s * 1e9) as i64,
            nodes: vec![node("node-00"), node("node-01")],
            ..AnalysisInput::default()
        }
    }

    /// Observes a job every second over `[from_s, to_s)`, each evaluation seeing the last 20 s of steps,
    /// and returns the candidates of the evaluation at `to_s` against its own history.
    fn run(
        trends: &mut super::super::trend::JobTrends,
        period_s: f64,
        bytes_per_s: f64,
        from_s: u32,
        to_s: u32,
    ) -> Vec<Candidate> {
        let mut last = Vec::new();
        for now in from_s..=to_s {
            let now = f64::from(now);
            let mut input = inferred(period_s, bytes_per_s, (now - 20.0).max(0.0), now);
            input.job_references = trends.references(now);
            last = evaluate(&input);
            trends.observe(&job_figures(&input), now);
        }
        last
    }

    #[test]
    fn inferred_steps_that_merge_bursts_are_no_slowdown() {
        // The step engine finds 3 s steps, then reads the same traffic as 5 s steps (several bursts each):
        // the job moves the same bytes per second, and its own history raises nothing.
        let mut t = super::super::trend::JobTrends::new();
        assert!(run(&mut t, 3.0, 4e8, 0, 200).is_empty());
        let c = run(&mut t, 5.0, 4e8, 201, 400);
        assert!(c.is_empty(), "{c:?}");
        // The old rule compared those step durations: 3 s against 5 s, a "critical" 60 %.
        let f = &job_figures(&inferred(5.0, 4e8, 380.0, 400.0))[0];
        assert_eq!(f.step_source, Some(StepSource::Inferred));
        assert_eq!(f.step_time_s, Some(5.0));
        assert!((f.fabric_bytes_per_second.expect("rate") - 4e8).abs() < 1.0);
    }

    #[test]
    fn a_real_drop_on_inferred_steps_is_found() {
        // Same period, 30 % less work per second (e.g. the same bytes moved in longer steps elsewhere):
        // relative 70 %, a warning from the job's own history.
        let mut t = super::super::trend::JobTrends::new();
        assert!(run(&mut t, 3.0, 4e8, 0, 200).is_empty());
        let c = run(&mut t, 3.0, 2.8e8, 201, 240);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].severity, Severity::Warning);
        assert_eq!(c[0].evidence.details["method"], HISTORY_METHOD);
        assert_eq!(
            c[0].evidence.details["history_compares"],
            "fabric_bytes_per_second"
        );
        assert!((c[0].evidence.measured - 0.7).abs() < 0.01, "{c:?}");
        // And a slower step of the same bytes (4.3 s instead of 3 s) is a drop too.
        let mut t = super::super::trend::JobTrends::new();
        run(&mut t, 3.0, 4e8, 0, 200);
        let c = run(&mut t, 4.3, 4e8 * 3.0 / 4.3, 201, 240);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].severity, Severity::Warning);
    }

    #[test]
    fn a_new_step_source_starts_a_new_history() {
        let markers = figures(1.0, "exposed_communication");
        let reference = JobReference {
            job: "j".into(),
            step_time_s: Some(0.2),
            samples_per_second_per_gpu: None,
            over_seconds: 300.0,
            step_source: Some(StepSource::Inferred),
            fabric_bytes_per_second: Some(1e9),
            earlier_run: None,
        };
        assert_eq!(drop_against(&markers, &reference), None);
    }

    #[test]
    fn a_drop_against_an_earlier_run_names_it() {
        let mut now = figures(1.0, "exposed_communication");
        now.step_source = Some(StepSource::Inferred);
        now.fabric_bytes_per_second = Some(1e8);
        let reference = JobReference {
            job: "j".into(),
            step_time_s: None,
            samples_per_second_per_gpu: None,
            over_seconds: 40.0,
            step_source: Some(StepSource::Inferred),
            fabric_bytes_per_second: Some(4e8),
            earlier_run: Some("run-1".into()),
        };
        let d = drop_against(&now, &reference).expect("drop");
        let c = candidate(&now, Some(&d)).expect("candidate");
        assert_eq!(c.severity, Severity::Critical);
        assert!(
            c.summary
                .contains("in its earlier run of the same shape (run-1, 40 s)"),
            "{}",
            c.summary
        );
        assert_eq!(c.evidence.details["earlier_run"], "run-1");
    }
}
