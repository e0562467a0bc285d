//! One training job: its size, its ranks' bytes per step, the scenario's effect on its steps, and the step
//! clock that follows from them.
//!
//! - **Size.** Job 0 trains with the spec's `allreduce_bytes` and `compute_ms`; a second job
//!   (`two-jobs`) with half the AllReduce and 1.5× the compute (defaults: 110 MB, 450 ms).
//! - **Per-rank bytes.** `R = 2·(N−1)/N · S` for the job's `N` ranks, 0 on a one-node job. The `seed-scale`
//!   variant takes the design's `N = 64`, `S = 220 MB` whatever the simulated size (433 125 000 B).
//! - **Faults** touch only the job that runs on the fault node: its host phase (`cpu-bound`), its overlap
//!   (`no-overlap`), the fault node's compute (`straggler`), the fault node's links (`management-nic`,
//!   `degraded-link`, `flapping`).
//! - **Bursts** last as long as the job's slowest link needs (`slowest_link_ns`), laid out by
//!   `BurstLayout` (see `buckets`), jittered by `Jitter` (see `jitter`).

use crate::model::buckets::{BurstLayout, StepPhases};
use crate::model::clock::StepClock;
use crate::model::flap::{self, FlapCycle};
use crate::model::jitter::{self, Jitter};
use crate::model::rails;
use crate::model::rates::Rates;
use crate::model::timeline::StepTimeline;
use crate::placement::Placement;
use crate::variant::Variant;
use crate::{ClusterSpec, Scenario};

const NS_PER_S: u128 = 1_000_000_000;
const NS_PER_MS: u64 = 1_000_000;

/// Ranks of the design's job (`seed-scale`).
pub const SEED_SCALE_RANKS: u64 = 64;
/// AllReduce size of the design's job (`seed-scale`), bytes.
pub const SEED_SCALE_ALLREDUCE_BYTES: u64 = 220_000_000;

/// One training job on the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The job's id (`SLURM_JOB_ID` of its ranks): `1001`, `1002`, …
    pub id: String,
    /// Its nodes, ascending.
    pub nodes: Vec<usize>,
    /// Its ranks: nodes × GPUs per node.
    pub ranks: usize,
    /// Size S of its gradient AllReduce, bytes.
    pub allreduce_bytes: u64,
    /// Bytes each rank sends (and receives) per step.
    pub per_rank_bytes_per_step: u64,
    /// Its steps.
    pub timeline: StepTimeline,
}

/// The AllReduce bytes per step of one node of a job, per link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeTraffic {
    /// Per HCA rail, in a normal step.
    pub(crate) rails: Vec<u64>,
    /// Per HCA rail, in a step where the flapping port is down.
    pub(crate) flapped_rails: Vec<u64>,
    /// On `eth0` (the management-nic fault), every step.
    pub(crate) eth0: u64,
}

impl NodeTraffic {
    /// A node that moves no AllReduce bytes.
    pub(crate) fn idle(rails: usize) -> NodeTraffic {
        NodeTraffic {
            rails: vec![0; rails],
            flapped_rails: vec![0; rails],
            eth0: 0,
        }
    }
}

/// The fault node and what it carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fault {
    pub(crate) node: usize,
    pub(crate) hca: usize,
    scenario: Scenario,
    flapping: bool,
}

impl Fault {
    pub(crate) fn of(spec: &ClusterSpec) -> Fault {
        Fault {
            node: spec.resolved_fault_node(),
            hca: spec.fault_hca,
            scenario: spec.scenario,
            flapping: spec.has(Variant::Flapping),
        }
    }

    /// Whether `node` sends its NCCL traffic over `eth0` (`management-nic`).
    pub(crate) fn over_eth0(&self, node: usize) -> bool {
        self.scenario == Scenario::ManagementNic && node == self.node
    }

    /// Whether `mlx5_<hca>` of `node` flaps.
    pub(crate) fn flaps(&self, node: usize, hca: usize) -> bool {
        self.flapping && node == self.node && hca == self.hca
    }

    /// Whether `mlx5_<hca>` of `node` shows link errors (`link-errors`).
    pub(crate) fn has_link_errors(&self, node: usize, hca: usize) -> bool {
        self.scenario == Scenario::LinkErrors && node == self.node && hca == self.hca
    }
}

/// `(allreduce_bytes, compute_ms)` of job `j`.
fn job_size(spec: &ClusterSpec, j: usize) -> (u64, u64) {
    if j == 0 {
        (spec.allreduce_bytes, spec.compute_ms)
    } else {
        (spec.allreduce_bytes / 2, spec.compute_ms * 3 / 2)
    }
}

/// `2·(N−1)/N · S` (integer floor), 0 when the job has one node.
fn per_rank_bytes(spec: &ClusterSpec, ranks: usize, allreduce: u64, nodes: usize) -> u64 {
    if nodes < 2 {
        return 0;
    }
    let (n, s) = if spec.has(Variant::SeedScale) {
        (u128::from(SEED_SCALE_RANKS), SEED_SCALE_ALLREDUCE_BYTES)
    } else {
        (ranks as u128, allreduce)
    };
    (2 * (n - 1) * u128::from(s) / n) as u64
}

/// The AllReduce bytes per step of `node`'s links in a job whose ranks move `per_rank` each.
pub(crate) fn node_traffic(
    spec: &ClusterSpec,
    fault: &Fault,
    per_rank: u64,
    node: usize,
) -> NodeTraffic {
    let share = per_rank * spec.gpus_per_node as u64;
    let rails = spec.hcas_per_node();
    if fault.over_eth0(node) {
        return NodeTraffic {
            eth0: share,
            ..NodeTraffic::idle(rails)
        };
    }
    let split = rails::split(share, rails);
    let flapped = match (0..rails).find(|&h| fault.flaps(node, h)) {
        Some(h) => flap::reroute(&split, h),
        None => split.clone(),
    };
    NodeTraffic {
        rails: split,
        flapped_rails: flapped,
        eth0: 0,
    }
}

fn ceil_div(a: u128, b: u128) -> u128 {
    a.div_ceil(b.max(1))
}

/// Nanoseconds the slowest link of `nodes` needs for one step's bytes (normal or flapped).
fn slowest_link_ns(rates: &Rates, traffic: &[(usize, NodeTraffic)], flapped: bool) -> u64 {
    let mut worst: u128 = 0;
    for (node, t) in traffic {
        if t.eth0 > 0 {
            worst = worst.max(ceil_div(
                u128::from(t.eth0) * NS_PER_S,
                u128::from(rates.eth_effective),
            ));
        }
        let rails = if flapped { &t.flapped_rails } else { &t.rails };
        for (hca, &bytes) in rails.iter().enumerate() {
            if bytes > 0 {
                let rate = rates.hca_effective(*node, hca);
                worst = worst.max(ceil_div(u128::from(bytes) * NS_PER_S, u128::from(rate)));
            }
        }
    }
    u64::try_from(worst).unwrap_or(u64::MAX)
}

impl Job {
    /// Plans job `j` of `placement`.
    pub(crate) fn plan(spec: &ClusterSpec, rates: &Rates, placement: &Placement, j: usize) -> Job {
        let p = &placement.jobs()[j];
        let (allreduce, compute_ms) = job_size(spec, j);
        let ranks = p.nodes.len() * spec.gpus_per_node;
        let per_rank = per_rank_bytes(spec, ranks, allreduce, p.nodes.len());
        let fault = Fault::of(spec);
        let timeline = if matches!(spec.scenario, Scenario::Constant { .. }) {
            constant_timeline(spec.nodes)
        } else {
            let traffic: Vec<(usize, NodeTraffic)> = p
                .nodes
                .iter()
                .map(|&n| (n, node_traffic(spec, &fault, per_rank, n)))
                .collect();
            let has_fault = placement.job_of(fault.node) == Some(j);
            step_timeline(spec, rates, j, &p.nodes, compute_ms, has_fault, &traffic)
        };
        Job {
            id: p.id.clone(),
            nodes: p.nodes.clone(),
            ranks,
            allreduce_bytes: allreduce,
            per_rank_bytes_per_step: per_rank,
            timeline,
        }
    }
}

/// `constant` has no steps: one 1 s "step" of compute on every node and no burst.
fn constant_timeline(nodes: usize) -> StepTimeline {
    let clock = StepClock::single(NS_PER_S as u64, 0, 0);
    StepTimeline::new(clock, 0, vec![NS_PER_S as u64; nodes], 0)
}

/// The steps of a job on `nodes` computing `compute_ms`, with the scenario's fault if `has_fault`.
fn step_timeline(
    spec: &ClusterSpec,
    rates: &Rates,
    j: usize,
    nodes: &[usize],
    compute_ms: u64,
    has_fault: bool,
    traffic: &[(usize, NodeTraffic)],
) -> StepTimeline {
    let fault = spec.resolved_fault_node();
    let sc = spec.scenario;
    let host_ns = if has_fault && sc == Scenario::CpuBound {
        spec.cpu_bound_host_ms * NS_PER_MS
    } else {
        0
    };
    let mut compute_ns = vec![0u64; spec.nodes];
    for &n in nodes {
        let c = compute_ms * NS_PER_MS;
        compute_ns[n] = if sc == Scenario::Straggler && n == fault {
            c / 100 * (100 + u64::from(spec.straggler_percent))
        } else {
            c
        };
    }
    let slowest = nodes.iter().map(|&n| compute_ns[n]).max().unwrap_or(0);
    let fastest = nodes.iter().map(|&n| compute_ns[n]).min().unwrap_or(0);
    let phases = StepPhases {
        ready_ns: host_ns + slowest,
        compute_ns: slowest,
        overlap_ns: if has_fault && sc == Scenario::NoOverlap {
            0
        } else {
            spec.overlap_ms * NS_PER_MS
        },
        link_ns: slowest_link_ns(rates, traffic, false),
        flapped_link_ns: slowest_link_ns(rates, traffic, true),
    };
    let jittered = spec.has(Variant::Jitter);
    let lay = |margin| {
        if spec.has(Variant::Overlap) {
            BurstLayout::overlapped(&phases, margin)
        } else {
            BurstLayout::single(&phases)
        }
    };
    let shortest = lay(0).bucket_ns.min(lay(0).flapped_bucket_ns);
    let burst_amp = if jittered {
        jitter::burst_amplitude_ns(shortest)
    } else {
        0
    };
    let layout = lay(2 * burst_amp);
    let period = layout.period_ns(phases.ready_ns, 2 * burst_amp);
    let clock = StepClock {
        jitter: jittered.then(|| {
            let step_amp = jitter::step_amplitude_ns(period, fastest, layout.first_ns);
            Jitter::new(spec.seed, j, step_amp, burst_amp)
        }),
        flap: (has_fault && spec.has(Variant::Flapping)).then(|| FlapCycle::for_period(period)),
        first_ns: layout.first_ns,
        buckets: layout.buckets,
        spacing_ns: layout.spacing_ns,
        bucket_ns: layout.bucket_ns,
        flapped_bucket_ns: layout.flapped_bucket_ns,
        ..StepClock::single(period, 0, 0)
    };
    StepTimeline::new(clock, host_ns, compute_ns, layout.span_ns())
}
