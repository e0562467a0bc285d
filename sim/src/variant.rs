//! The realistic traffic a simulated cluster can carry on top of its scenario, by name.
//!
//! A [`Scenario`](crate::Scenario) says what goes wrong; a variant says what a *real* cluster looks like
//! besides: storage traffic, overlapped gradient buckets, idle nodes, jitter, several jobs, eight rails,
//! the design's burst magnitudes, and one fault of its own (a flapping port). Variants compose with each other
//! and with every named scenario (not with `constant`, which has no steps). Each variant's numbers are in
//! one place of the model, named after it:
//!
//! | variant | module | what it does, with the defaults (8 × 8, 220 MB, 300 ms compute, HDR 200) |
//! |---|---|---|
//! | `storage` | `model::storage` | `eth0` of every job node reads 200–1000 MB/s in seeded chunks of 0.3–1.5 s with 0.1–1.1 s gaps (≈ 360 MB/s mean, a 16-chunk cycle of ≈ 24 s per node), and writes a 4 GB checkpoint at 1 GB/s every 200 steps (first at step 50); the other direction carries 2 % of each as requests and acks |
//! | `overlap` | `model::buckets` | the AllReduce is 4 gradient buckets over the second half of compute, each paced by backward to 9/10 of its 37.5 ms slot: the link is busy 135 ms of a 300 ms step (45 %) at 3.21 GB/s per HCA, nothing exposed |
//! | `idle-nodes` | `placement` | the last quarter of the nodes (at least one) run no job: no ranks in procfs, background traffic only, GPUs idle |
//! | `jitter` | `model::jitter` | every step boundary moves by a seeded ±2.5 % of the step (step time ±5 %), every burst's duration by a seeded ±1.5 % at both ends (rate ±3 %); no drift |
//! | `two-jobs` | `placement` | two jobs with an idle node between them (8 nodes: job 1001 on node-00..03, node-04 idle, job 1002 on node-05..07); the second trains half the AllReduce (110 MB) with 1.5× the compute (450 ms); each ring stays on its own nodes |
//! | `rails8` | `model::rails` | eight HCA rails per node whatever `gpus_per_node`; the node's inter-node bytes per step (GPUs × per-rank bytes) are split across them |
//! | `seed-scale` | `model::job` | the design's magnitudes whatever the simulated size: per-rank bytes of a 220 MB ring AllReduce on 64 ranks (433 125 000 B per HCA per step), one 19.6875 ms burst at 22 GB/s (shorter than one 50 ms sample) |
//! | `flapping` (fault) | `model::flap` | the fault port (`fault_node`, `fault_hca`) goes down for about 1 s every about 4 s, at step boundaries (13-step cycle, 3 steps down): `state` `1: DOWN`, `phys_state` `2: Polling`, its IPoIB netdev `down`, `link_downed` +1 per flap; its bytes reroute over the node's other rails, whose burst grows (22.5 ms) |

use std::fmt;
use std::str::FromStr;

use crate::SimError;

/// One realistic-traffic variant (see the module documentation for the numbers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    /// Storage reads and checkpoint writes on the management NIC: asymmetric, not step-periodic.
    Storage,
    /// Gradient buckets overlapped with backward: the AllReduce hidden under the second half of compute.
    Overlap,
    /// Some nodes run no job.
    IdleNodes,
    /// Seeded step-time and link-rate jitter.
    Jitter,
    /// Two jobs on the cluster with an idle node between them.
    TwoJobs,
    /// Eight HCA rails per node whatever the GPU count.
    Rails8,
    /// The design's magnitudes: a 220 MB AllReduce on 64 ranks in one short burst.
    SeedScale,
    /// A fault: one HCA port goes down and up every few seconds while traffic reroutes.
    Flapping,
}

impl Variant {
    /// Every variant, in a stable order.
    pub const ALL: [Variant; 8] = [
        Variant::Storage,
        Variant::Overlap,
        Variant::IdleNodes,
        Variant::Jitter,
        Variant::TwoJobs,
        Variant::Rails8,
        Variant::SeedScale,
        Variant::Flapping,
    ];

    /// The CLI names, in the order of [`Variant::ALL`].
    pub const NAMES: [&'static str; 8] = [
        "storage",
        "overlap",
        "idle-nodes",
        "jitter",
        "two-jobs",
        "rails8",
        "seed-scale",
        "flapping",
    ];

    /// The variant's CLI name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Storage => "storage",
            Variant::Overlap => "overlap",
            Variant::IdleNodes => "idle-nodes",
            Variant::Jitter => "jitter",
            Variant::TwoJobs => "two-jobs",
            Variant::Rails8 => "rails8",
            Variant::SeedScale => "seed-scale",
            Variant::Flapping => "flapping",
        }
    }

    /// Whether the variant injects a fault (a healthy cluster never carries one).
    pub fn is_fault(self) -> bool {
        matches!(self, Variant::Flapping)
    }

    /// One line for a help text: what the variant adds, with its main numbers.
    pub fn summary(self) -> &'static str {
        match self {
            Variant::Storage => {
                "storage reads (200-1000 MB/s chunks) and 4 GB checkpoints every 200 steps on eth0"
            }
            Variant::Overlap => "gradient buckets hidden under the second half of compute",
            Variant::IdleNodes => "the last quarter of the nodes run no job",
            Variant::Jitter => "seeded step time (±5 %) and link rate (±3 %) jitter",
            Variant::TwoJobs => "two jobs with an idle node between them",
            Variant::Rails8 => "eight HCA rails per node, the node's bytes split across them",
            Variant::SeedScale => {
                "a 220 MB AllReduce on 64 ranks: 4.33e8 B per HCA in a 19.7 ms burst"
            }
            Variant::Flapping => "fault: one HCA port down ~1 s every ~4 s, traffic rerouted",
        }
    }

    /// Parses a comma-separated list of names (empty items ignored), each as [`Variant::from_str`].
    pub fn parse_list(s: &str) -> Result<Vec<Variant>, SimError> {
        s.split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(str::parse)
            .collect()
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Variant {
    type Err = SimError;

    /// Parses a name of [`Variant::NAMES`] (ASCII case-insensitive, `_` accepted for `-`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let norm = s.trim().to_ascii_lowercase().replace('_', "-");
        Variant::ALL
            .into_iter()
            .find(|v| v.name() == norm)
            .ok_or_else(|| SimError::UnknownVariant {
                name: s.to_string(),
                expected: Variant::NAMES.join(", "),
            })
    }
}
