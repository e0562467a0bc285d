//! The pure model of a data-parallel training job: every counter the simulator writes is a
//! function of the spec and of the time `t` elapsed since the cluster was created.
//!
//! Where to find what: `job` (a job's size, per-rank bytes, the scenario's effect on its steps),
//! `clock` (step starts and bursts as functions of time), `timeline` ([`StepTimeline`]),
//! `buckets` (one burst, or the `overlap` variant's buckets), `jitter`, `flap` (the
//! `flapping` fault), `rails` (bytes per HCA rail, `rails8`), `storage` (the `storage` variant),
//! `rates` (link capacities), `node` (a node's links), `flow` ([`Flow`]: bytes of one
//! direction), `values` (every file's value at `t`), `describe`. Which node runs which job
//! (`idle-nodes`, `two-jobs`) is [`crate::placement`].
//!
//! # The job
//!
//! `N = nodes × gpus_per_node` ranks train data-parallel. Each step is
//!
//! 1. a host phase of `host` (0, or `cpu_bound_host_ms` in [`Scenario::CpuBound`](crate::Scenario::CpuBound)) with the GPUs
//!    idle;
//! 2. a compute phase (forward + backward) of `compute_ms` (`× (100 + straggler_percent)/100`
//!    on the straggler's node in [`Scenario::Straggler`](crate::Scenario::Straggler));
//! 3. a ring AllReduce of `S = allreduce_bytes`. It starts `overlap_ms` before the **last** rank
//!    finishes compute (its first gradient buckets are ready during backward; 0 in
//!    [`Scenario::NoOverlap`](crate::Scenario::NoOverlap)). In a ring every rank waits for the others, so the burst is the
//!    same interval on every node and lasts as long as the **slowest link** needs for its bytes.
//!
//! The step period is `max(host + max compute, burst start + burst duration)`; steps follow
//! each other without gap, the first starting at `t = 0`.
//!
//! # Bytes per link
//!
//! In a ring AllReduce each rank sends and receives `R = 2·(N−1)/N · S` bytes (integer floor).
//! The simulator counts that on the network: a node's inter-node bytes per step are
//! `gpus_per_node · R` each way, spread evenly over its HCAs, so each HCA (one per GPU, rail
//! aligned) transmits and receives exactly `R` per step. This is the accounting nccl-tests uses
//! for *bus bandwidth*, so the achieved bandwidth of one HCA during the burst equals the job's
//! bus bandwidth — the number the design compares with the link's rate. With a single node
//! nothing crosses the network and the burst is empty.
//!
//! A link moves its bytes at its *effective rate*: HCA capacity (`rate` file: 200 Gb/s → 25e9
//! B/s) × `ib_efficiency_permille` (22e9 B/s by default); `eth0` capacity (`speed` Mb/s × 125000
//! B/s) × `socket_efficiency_permille` (9.8e9 B/s by default). The burst lasts
//! `max over links of ceil(bytes / effective rate)`; within it every link's counter grows
//! linearly (integer floor), so links faster than the slowest run below their effective rate.
//!
//! With the defaults (8 × 8, 220 MB, 300 ms compute, 10 ms overlap, HDR 200):
//!
//! | scenario | burst bytes per HCA | burst | step period | per-HCA burst rate |
//! |---|---|---|---|---|
//! | healthy, link-errors | 433 125 000 B | 19.6875 ms | 309.6875 ms | 22.0e9 B/s |
//! | management-nic | 0 on node-03 (its eth0: 3 465 000 000 B at 9.8e9 B/s) | 353.571429 ms | 643.571429 ms | 1.225e9 B/s elsewhere |
//! | degraded-link (2X) | 433 125 000 B, mlx5_0 of node-03 capped at 11e9 B/s | 39.375 ms | 329.375 ms | 11.0e9 B/s |
//! | straggler | 433 125 000 B, burst starts at 380 ms | 19.6875 ms | 399.6875 ms | 22.0e9 B/s |
//! | no-overlap | as healthy, burst starts at 300 ms | 19.6875 ms | 319.6875 ms | 22.0e9 B/s |
//! | cpu-bound | as healthy, after a 250 ms host phase | 19.6875 ms | 559.6875 ms | 22.0e9 B/s |
//!
//! # Background and derived counters
//!
//! Every link also carries a small constant background (seeded per link): 16–32 kB/s on each HCA
//! port (256-byte packets), 2–10 kB/s on each IPoIB netdev (RDMA traffic never shows there), 1–5
//! MB/s on `eth0`. Burst packets are 4096 bytes on IB and 1514-byte frames on Ethernet. Each
//! port also sends and receives one multicast packet every 2 s. `port_xmit_wait` rises only
//! while the port bursts, at [`XMIT_WAIT_TICKS_PER_SECOND`] × a congestion share (2%; 40% on a
//! degraded port, the ring's bottleneck), saturating at 32 bits. The congestion hw counters
//! (`np_cnp_sent`, `rp_cnp_handled`, `np_ecn_marked_roce_packets`) are `port_xmit_wait / 4096`.
//! Data and packet counters start from seeded values (below 2^40) so readers never rely on a
//! zero start; error counters start at 0.
//!
//! [`Scenario::Constant`](crate::Scenario::Constant) has no step structure: every HCA port moves its given rates
//! continuously (4096-byte packets), nothing else moves.
//!
//! # Variants
//!
//! The [`Variant`](crate::Variant)s add realistic traffic on top (numbers in [`crate::variant`]);
//! with none, everything above holds exactly as written. With them, the model still computes the
//! exact bytes of every link in every step ([`JobModel::expected_step_bytes`],
//! [`JobModel::expected_link_bytes`]); several jobs each have their own timeline
//! ([`JobModel::jobs`], [`JobModel::node_timeline`]).

use std::time::Duration;

use crate::placement::Placement;
use crate::{ClusterSpec, SimError};

pub mod buckets;
pub(crate) mod clock;
mod describe;
pub mod flap;
pub mod flow;
pub(crate) mod jitter;
pub mod job;
pub(crate) mod node;
pub(crate) mod rails;
pub(crate) mod rates;
pub(crate) mod seed;
pub mod storage;
pub mod timeline;
mod values;

pub use flow::{Flow, LinkModel};
pub use job::Job;
pub use node::{HcaModel, NetdevModel};
pub(crate) use seed::seeded_u64;
pub use storage::StorageFlow;
pub use timeline::StepTimeline;

use clock::StepClock;
use job::{Fault, NodeTraffic};
use node::{NodeInputs, NodeModel};
use rates::Rates;

/// Payload bytes per InfiniBand data packet of the AllReduce (4096-byte IB MTU).
pub const IB_PACKET_BYTES: u64 = 4096;
/// Bytes per Ethernet frame of the socket transport (1500 MTU + 14 header).
pub const ETH_FRAME_BYTES: u64 = 1514;
/// Bytes per packet of background traffic on HCA ports and IPoIB netdevs.
pub const BACKGROUND_PACKET_BYTES: u64 = 256;
/// Bytes per packet of background traffic on `eth0` (mixed sizes).
pub const ETH_BACKGROUND_PACKET_BYTES: u64 = 800;
/// `port_xmit_wait` ticks per second of a port that waits all the time.
pub const XMIT_WAIT_TICKS_PER_SECOND: u64 = 250_000_000;
/// Congestion share of a healthy port during a burst, in parts per million.
pub const HEALTHY_WAIT_PPM: u64 = 20_000;
/// Congestion share of the ring's bottleneck port during a burst, in parts per million.
pub const BOTTLENECK_WAIT_PPM: u64 = 400_000;
/// One multicast packet is sent and received by every port this often (nanoseconds).
pub const MULTICAST_PERIOD_NS: u64 = 2_000_000_000;
/// [`Scenario::LinkErrors`](crate::Scenario::LinkErrors): one `symbol_error` every 25 ms (saturates 65535 after 1638.375 s).
pub const SYMBOL_ERROR_PERIOD_NS: u64 = 25_000_000;
/// [`Scenario::LinkErrors`](crate::Scenario::LinkErrors): one `link_error_recovery` every 5 s (saturates 255 after 1275 s).
pub const LINK_ERROR_RECOVERY_PERIOD_NS: u64 = 5_000_000_000;
/// [`Scenario::LinkErrors`](crate::Scenario::LinkErrors): one `port_rcv_errors` every 80 ms (saturates 65535 after 5242.8 s).
pub const PORT_RCV_ERRORS_PERIOD_NS: u64 = 80_000_000;

/// A link of a node, as the simulator lays them out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Link {
    /// HCA `mlx5_<g>`, port 1 (one per GPU `g`).
    Hca(usize),
    /// The management NIC `class/net/eth0`.
    Eth0,
    /// The IPoIB netdev `class/net/ib<g>` of HCA `mlx5_<g>`.
    Ipoib(usize),
}

impl Link {
    /// The device name: `mlx5_<g>`, `eth0` or `ib<g>`.
    pub fn device_name(self) -> String {
        match self {
            Link::Hca(g) => format!("mlx5_{g}"),
            Link::Eth0 => "eth0".to_string(),
            Link::Ipoib(g) => format!("ib{g}"),
        }
    }
}

/// Bytes a link has moved by some time: each direction's total and its burst part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkBytes {
    /// All bytes transmitted since t = 0.
    pub tx: u64,
    /// All bytes received since t = 0.
    pub rx: u64,
    /// Bytes transmitted by AllReduce bursts since t = 0.
    pub tx_burst: u64,
    /// Bytes received by AllReduce bursts since t = 0.
    pub rx_burst: u64,
}

/// What one link does in every step, for tests to assert against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkStep {
    /// Bytes transmitted by the burst per step.
    pub tx_bytes_per_step: u64,
    /// Bytes received by the burst per step.
    pub rx_bytes_per_step: u64,
    /// Transmit rate during the burst, bytes per second (0 without a burst).
    pub burst_tx_bytes_per_second: f64,
    /// Receive rate during the burst, bytes per second (0 without a burst).
    pub burst_rx_bytes_per_second: f64,
    /// Capacity as inventory reports it, bytes per second.
    pub capacity_bytes_per_second: u64,
    /// The effective rate the job could reach on this link, bytes per second.
    pub effective_bytes_per_second: u64,
}

/// The whole cluster: spec, jobs with their step timelines, and every link of every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobModel {
    spec: ClusterSpec,
    placement: Placement,
    jobs: Vec<Job>,
    nodes: Vec<NodeModel>,
}

impl JobModel {
    /// Builds the model; fails if the spec does not [validate](ClusterSpec::validate).
    pub fn new(spec: &ClusterSpec) -> Result<Self, SimError> {
        spec.validate()?;
        let placement = spec.placement();
        let rates = Rates::new(spec);
        let jobs: Vec<Job> = (0..placement.jobs().len())
            .map(|j| Job::plan(spec, &rates, &placement, j))
            .collect();
        let fault = Fault::of(spec);
        let nodes = (0..spec.nodes)
            .map(|node| {
                let job = placement.job_of(node).map(|j| &jobs[j]);
                let traffic = match job {
                    Some(j) => job::node_traffic(spec, &fault, j.per_rank_bytes_per_step, node),
                    None => NodeTraffic::idle(spec.hcas_per_node()),
                };
                NodeInputs {
                    spec,
                    rates: &rates,
                    fault,
                    timeline: &job.unwrap_or(&jobs[0]).timeline,
                    traffic,
                    in_job: job.is_some(),
                }
                .build(node, node_name(node))
            })
            .collect();
        Ok(JobModel {
            spec: spec.clone(),
            placement,
            jobs,
            nodes,
        })
    }

    /// The spec the model was built from.
    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    /// The step timeline of the first job (the only one without the `two-jobs` variant).
    pub fn timeline(&self) -> &StepTimeline {
        &self.jobs[0].timeline
    }

    /// The jobs on the cluster, in id order (one without the `two-jobs` variant).
    pub fn jobs(&self) -> &[Job] {
        &self.jobs
    }

    /// The job `node` runs (`None` for an idle node).
    pub fn job_of(&self, node: usize) -> Option<&Job> {
        self.placement.job_of(node).map(|j| &self.jobs[j])
    }

    /// The timeline of the job `node` runs (`None` for an idle node).
    pub fn node_timeline(&self, node: usize) -> Option<&StepTimeline> {
        self.job_of(node).map(|j| &j.timeline)
    }

    /// Which node runs which job.
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The step clock `node`'s links follow (the first job's for an idle node, which moves nothing).
    pub(crate) fn node_clock(&self, node: usize) -> &StepClock {
        self.node_timeline(node).unwrap_or(self.timeline()).clock()
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Bytes each rank of the first job sends (and receives) per step, `2·(N−1)/N · S` (0 with one
    /// node; see [`Job::per_rank_bytes_per_step`] for the others).
    pub fn per_rank_bytes_per_step(&self) -> u64 {
        self.jobs[0].per_rank_bytes_per_step
    }

    /// HCAs (rails) per node.
    pub fn hca_count(&self) -> usize {
        self.spec.hcas_per_node()
    }

    fn node(&self, node: usize) -> Result<&NodeModel, SimError> {
        self.nodes.get(node).ok_or(SimError::OutOfRange {
            what: "node",
            index: node,
            count: self.nodes.len(),
        })
    }

    fn gpu_err(&self, index: usize) -> SimError {
        SimError::OutOfRange {
            what: "gpu",
            index,
            count: self.spec.hcas_per_node(),
        }
    }

    /// The model of HCA `mlx5_<hca>` of `node`.
    pub fn hca(&self, node: usize, hca: usize) -> Result<&HcaModel, SimError> {
        self.node(node)?
            .hcas
            .get(hca)
            .ok_or_else(|| self.gpu_err(hca))
    }

    /// The model of netdev `eth0` or `ib<g>` of `node` (`Link::Hca` is not a netdev).
    pub fn netdev(&self, node: usize, link: Link) -> Result<&NetdevModel, SimError> {
        let n = self.node(node)?;
        match link {
            Link::Eth0 => Ok(&n.eth0),
            Link::Ipoib(g) => n.ipoib.get(g).ok_or_else(|| self.gpu_err(g)),
            Link::Hca(g) => Err(SimError::OutOfRange {
                what: "netdev (an HCA is not one)",
                index: g,
                count: self.spec.hcas_per_node() + 1,
            }),
        }
    }

    /// Traffic and capacity of any link of `node`.
    pub fn link(&self, node: usize, link: Link) -> Result<&LinkModel, SimError> {
        match link {
            Link::Hca(g) => Ok(&self.hca(node, g)?.link),
            other => Ok(&self.netdev(node, other)?.link),
        }
    }

    /// Bytes the link has moved between 0 and `t` (what its byte counters have grown by; the
    /// `port_*_data` files grow by a quarter of this, floor).
    pub fn expected_link_bytes(
        &self,
        node: usize,
        link: Link,
        t: Duration,
    ) -> Result<LinkBytes, SimError> {
        let l = self.link(node, link)?;
        Ok(LinkBytes {
            tx: l.tx.bytes_at(t),
            rx: l.rx.bytes_at(t),
            tx_burst: l.tx.burst_bytes_at(t),
            rx_burst: l.rx.burst_bytes_at(t),
        })
    }

    /// AllReduce bytes `(tx, rx)` the link moves in step `k` of its node's job (the step starting at
    /// [`StepTimeline::step_start`]); exact with every variant, e.g. 0 on the `flapping` port in a step
    /// where it is down and more on the node's other rails.
    pub fn expected_step_bytes(
        &self,
        node: usize,
        link: Link,
        k: u64,
    ) -> Result<(u64, u64), SimError> {
        let l = self.link(node, link)?;
        Ok((l.tx.step_bytes(k), l.rx.step_bytes(k)))
    }

    /// What the link does in every (normal) step.
    pub fn expected_step(&self, node: usize, link: Link) -> Result<LinkStep, SimError> {
        let l = self.link(node, link)?;
        Ok(LinkStep {
            tx_bytes_per_step: l.tx.burst_bytes_per_step,
            rx_bytes_per_step: l.rx.burst_bytes_per_step,
            burst_tx_bytes_per_second: l.tx.burst_rate_bytes_per_second(),
            burst_rx_bytes_per_second: l.rx.burst_rate_bytes_per_second(),
            capacity_bytes_per_second: l.capacity_bytes_per_second,
            effective_bytes_per_second: l.effective_bytes_per_second,
        })
    }

    /// The node's name, `node-00`, `node-01`, …
    pub fn node_name(&self, node: usize) -> Result<&str, SimError> {
        Ok(&self.node(node)?.name)
    }
}

/// The name of node `i`: `node-00`, `node-01`, … (at least two digits).
pub fn node_name(i: usize) -> String {
    format!("node-{i:02}")
}
