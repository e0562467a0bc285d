//! Communication against computation on one rank's GPU timeline: merged intervals, overlap, exposed
//! communication, idle time, per iteration, and the costly collectives.
//!
//! Whole-trace figures follow Holistic Trace Analysis (`get_comm_comp_overlap`, `get_temporal_breakdown`) so
//! the two agree on the same trace: when the trace has two or more `ProfilerStep`s, only GPU activities launched
//! before the last step started are counted (the last step is usually cut off by the end of the trace), and only
//! those whose launch is known; overlap = |communication ∩ computation| ÷ |communication| over merged intervals;
//! idle = span of all GPU activities − their union.

use std::collections::HashMap;

use serde::Serialize;

use crate::timeline::{
    busbw_factor, intersection, merge_intervals, total, GpuEvent, KernelClass, Timeline,
};

/// One iteration. Times in microseconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepStats {
    pub step: i64,
    /// Duration of the `ProfilerStep` range on the CPU.
    pub step_time_us: f64,
    pub comm_time_us: f64,
    pub compute_time_us: f64,
    /// GPU idle inside the span of this step's GPU activities.
    pub idle_time_us: f64,
    /// `None` when the step has no communication.
    pub overlap_ratio: Option<f64>,
    pub exposed_comm_us: f64,
    pub kernels: usize,
}

/// A collective (name, size, type, group) and what it cost on this rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CollectiveStats {
    pub collective: String,
    pub size_bytes: Option<u64>,
    pub dtype: Option<String>,
    pub group_size: Option<u32>,
    /// NCCL's protocol (`LL`, `LL128`, `SIMPLE`) where the kernel's name gives it.
    pub protocol: Option<String>,
    pub count: usize,
    pub total_time_us: f64,
    pub mean_time_us: f64,
    pub max_time_us: f64,
    /// Bus bandwidth in training, nccl-tests definition: size ÷ mean kernel time × the collective's factor.
    pub busbw_gbps: Option<f64>,
}

/// The analysis of one rank.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceAnalysis {
    pub rank: u32,
    pub world_size: Option<u32>,
    /// GPU activities in the trace, and how many of them the whole-trace figures count.
    pub gpu_events: usize,
    pub gpu_events_counted: usize,
    pub nccl_kernels: usize,
    pub comm_time_us: f64,
    pub compute_time_us: f64,
    pub memory_time_us: f64,
    pub idle_time_us: f64,
    pub span_us: f64,
    pub overlap_time_us: f64,
    /// `None` when the trace has no communication.
    pub overlap_ratio: Option<f64>,
    pub exposed_comm_us: f64,
    pub last_step_excluded: bool,
    pub steps: Vec<StepStats>,
    pub top_collectives: Vec<CollectiveStats>,
}

impl TraceAnalysis {
    /// Mean CPU step time, µs.
    pub fn mean_step_time_us(&self) -> Option<f64> {
        (!self.steps.is_empty()).then(|| {
            self.steps.iter().map(|s| s.step_time_us).sum::<f64>() / self.steps.len() as f64
        })
    }
}

/// How many collectives the report lists per rank.
pub const TOP_COLLECTIVES: usize = 10;

struct Breakdown {
    comm: f64,
    compute: f64,
    memory: f64,
    idle: f64,
    span: f64,
    overlap: f64,
}

fn breakdown<'a>(events: impl Iterator<Item = &'a GpuEvent>) -> Breakdown {
    let (mut comm, mut comp, mut mem, mut all) = (vec![], vec![], vec![], vec![]);
    for e in events {
        let iv = (e.start_us, e.end_us);
        all.push(iv);
        match e.class {
            KernelClass::Communication => comm.push(iv),
            KernelClass::Computation => comp.push(iv),
            KernelClass::Memory => mem.push(iv),
            KernelClass::Other => {}
        }
    }
    let (comm, comp, mem, all) = (
        merge_intervals(comm),
        merge_intervals(comp),
        merge_intervals(mem),
        merge_intervals(all),
    );
    let span = match (all.first(), all.last()) {
        (Some(f), Some(l)) => l.1 - f.0,
        _ => 0.0,
    };
    let busy = total(&all);
    Breakdown {
        comm: total(&comm),
        compute: total(&comp),
        memory: total(&mem),
        idle: (span - busy).max(0.0),
        span,
        overlap: intersection(&comm, &comp),
    }
}

fn ratio(overlap: f64, comm: f64) -> Option<f64> {
    (comm > 0.0).then(|| overlap / comm)
}

/// Step of an activity: the `ProfilerStep` window holding its launch (or, when the launch is unknown, its
/// start).
fn step_of(e: &GpuEvent, steps: &[crate::timeline::StepWindow]) -> Option<usize> {
    let t = e.launch_us.unwrap_or(e.start_us);
    steps.iter().position(|s| t >= s.start_us && t < s.end_us)
}

/// Analyses one rank's timeline.
pub fn analyze(tl: &Timeline, fallback_rank: u32) -> TraceAnalysis {
    let last_step_start = (tl.steps.len() >= 2).then(|| {
        tl.steps
            .iter()
            .map(|s| s.start_us)
            .fold(f64::NEG_INFINITY, f64::max)
    });
    let counted = |e: &&GpuEvent| match last_step_start {
        Some(last) => e.launch_us.is_some_and(|l| l < last),
        None => true,
    };
    let whole = breakdown(tl.events.iter().filter(counted));
    let counted_n = tl.events.iter().filter(counted).count();

    let mut per_step: Vec<Vec<&GpuEvent>> = vec![Vec::new(); tl.steps.len()];
    for e in &tl.events {
        if let Some(i) = step_of(e, &tl.steps) {
            per_step[i].push(e);
        }
    }
    let steps = tl
        .steps
        .iter()
        .zip(&per_step)
        .map(|(s, evs)| {
            let b = breakdown(evs.iter().copied());
            StepStats {
                step: s.step,
                step_time_us: s.end_us - s.start_us,
                comm_time_us: b.comm,
                compute_time_us: b.compute,
                idle_time_us: b.idle,
                overlap_ratio: ratio(b.overlap, b.comm),
                exposed_comm_us: b.comm - b.overlap,
                kernels: evs.len(),
            }
        })
        .collect();

    TraceAnalysis {
        rank: tl.rank.unwrap_or(fallback_rank),
        world_size: tl.world_size,
        gpu_events: tl.events.len(),
        gpu_events_counted: counted_n,
        nccl_kernels: tl
            .events
            .iter()
            .filter(|e| e.class == KernelClass::Communication)
            .count(),
        comm_time_us: whole.comm,
        compute_time_us: whole.compute,
        memory_time_us: whole.memory,
        idle_time_us: whole.idle,
        span_us: whole.span,
        overlap_time_us: whole.overlap,
        overlap_ratio: ratio(whole.overlap, whole.comm),
        exposed_comm_us: whole.comm - whole.overlap,
        last_step_excluded: last_step_start.is_some(),
        steps,
        top_collectives: top_collectives(tl),
    }
}

/// Collectives by total kernel time, largest first.
pub fn top_collectives(tl: &Timeline) -> Vec<CollectiveStats> {
    let mut by_key: HashMap<u32, (usize, f64, f64)> = HashMap::new();
    for e in &tl.events {
        if let Some(c) = e.collective {
            let d = e.end_us - e.start_us;
            let entry = by_key.entry(c).or_insert((0, 0.0, 0.0));
            entry.0 += 1;
            entry.1 += d;
            entry.2 = entry.2.max(d);
        }
    }
    let mut out: Vec<CollectiveStats> = by_key
        .into_iter()
        .filter_map(|(c, (count, sum, max))| {
            let key = tl.collectives.get(c as usize)?;
            let mean = sum / count as f64;
            let group = key.group_size.or(tl.world_size);
            let busbw = match (
                key.size_bytes,
                group.and_then(|g| busbw_factor(&key.name, g)),
            ) {
                (Some(size), Some(f)) if mean > 0.0 => Some(size as f64 / (mean * 1e3) * f),
                _ => None,
            };
            Some(CollectiveStats {
                collective: key.name.clone(),
                size_bytes: key.size_bytes,
                dtype: key.dtype.clone(),
                group_size: key.group_size,
                protocol: key.protocol.clone(),
                count,
                total_time_us: sum,
                mean_time_us: mean,
                max_time_us: max,
                busbw_gbps: busbw,
            })
        })
        .collect();
    out.sort_by(|a, b| {
        b.total_time_us
            .total_cmp(&a.total_time_us)
            .then_with(|| a.collective.cmp(&b.collective))
    });
    out.truncate(TOP_COLLECTIVES);
    out
}
