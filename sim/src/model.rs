//! The pure model of a data-parallel training job: every counter the simulator writes is a
//! function of the spec and of the time `t` elapsed since the cluster was created.
//!
//! # The job
//!
//! `N = nodes × gpus_per_node` ranks train data-parallel. Each step is
//!
//! 1. a host phase of `host` (0, or `cpu_bound_host_ms` in [`Scenario::CpuBound`]) with the GPUs
//!    idle;
//! 2. a compute phase (forward + backward) of `compute_ms` (`× (100 + straggler_percent)/100`
//!    on the straggler's node in [`Scenario::Straggler`]);
//! 3. a ring AllReduce of `S = allreduce_bytes`. It starts `overlap_ms` before the **last** rank
//!    finishes compute (its first gradient buckets are ready during backward; 0 in
//!    [`Scenario::NoOverlap`]). In a ring every rank waits for the others, so the burst is the
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
//! [`Scenario::Constant`] has no step structure: every HCA port moves its given rates
//! continuously (4096-byte packets), nothing else moves.

use std::time::Duration;

use crate::counters::{saturating_events, HwCounter, NetStat, PortCounter};
use crate::spec::lanes_name;
use crate::{ClusterSpec, Scenario, SimError};

const NS_PER_S: u128 = 1_000_000_000;
const NS_PER_MS: u64 = 1_000_000;

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
/// [`Scenario::LinkErrors`]: one `symbol_error` every 25 ms (saturates 65535 after 1638.375 s).
pub const SYMBOL_ERROR_PERIOD_NS: u64 = 25_000_000;
/// [`Scenario::LinkErrors`]: one `link_error_recovery` every 5 s (saturates 255 after 1275 s).
pub const LINK_ERROR_RECOVERY_PERIOD_NS: u64 = 5_000_000_000;
/// [`Scenario::LinkErrors`]: one `port_rcv_errors` every 80 ms (saturates 65535 after 5242.8 s).
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

/// When, within every step, the AllReduce burst happens (all in nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BurstTiming {
    period_ns: u64,
    start_ns: u64,
    duration_ns: u64,
}

/// One direction of a link: a burst of bytes every step plus a constant background.
///
/// All functions are pure in `t`, non-decreasing in `t`, and exact integers:
/// `burst_bytes_at(t) = k·B + floor(B · clamp(τ − start, 0, d) / d)` where `k = floor(t / period)`,
/// `τ = t − k·period`, `B` the burst bytes per step and `d` the burst duration;
/// `background_bytes_at(t) = floor(r · t)` for background rate `r` in B/s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Bytes moved by the AllReduce burst in every step.
    pub burst_bytes_per_step: u64,
    /// Constant background traffic, in bytes per second.
    pub background_bytes_per_second: u64,
    /// Bytes per packet of the burst traffic.
    pub burst_packet_bytes: u64,
    /// Bytes per packet of the background traffic.
    pub background_packet_bytes: u64,
    timing: BurstTiming,
}

impl Flow {
    /// Bytes moved by the bursts between 0 and `t`.
    pub fn burst_bytes_at(&self, t: Duration) -> u64 {
        let b = u128::from(self.burst_bytes_per_step);
        if b == 0 {
            return 0;
        }
        let tm = self.timing;
        let t = t.as_nanos();
        let period = u128::from(tm.period_ns.max(1));
        let k = t / period;
        let tau = t % period;
        let start = u128::from(tm.start_ns);
        let d = u128::from(tm.duration_ns);
        let in_step = if tau < start {
            0
        } else if d == 0 || tau >= start + d {
            b
        } else {
            b * (tau - start) / d
        };
        u64::try_from(k * b + in_step).unwrap_or(u64::MAX)
    }

    /// Time (nanoseconds) this flow spent in bursts between 0 and `t`; 0 if it has no burst.
    pub fn burst_active_ns_at(&self, t: Duration) -> u128 {
        if self.burst_bytes_per_step == 0 {
            return 0;
        }
        let tm = self.timing;
        let t = t.as_nanos();
        let period = u128::from(tm.period_ns.max(1));
        let (k, tau) = (t / period, t % period);
        let d = u128::from(tm.duration_ns);
        k * d + tau.saturating_sub(u128::from(tm.start_ns)).min(d)
    }

    /// Background bytes moved between 0 and `t`: `floor(rate · t)`.
    pub fn background_bytes_at(&self, t: Duration) -> u64 {
        let v = u128::from(self.background_bytes_per_second) * t.as_nanos() / NS_PER_S;
        u64::try_from(v).unwrap_or(u64::MAX)
    }

    /// All bytes moved between 0 and `t` (burst + background).
    pub fn bytes_at(&self, t: Duration) -> u64 {
        self.burst_bytes_at(t)
            .saturating_add(self.background_bytes_at(t))
    }

    /// Packets moved between 0 and `t`: `floor(burst bytes / burst packet size) +
    /// floor(background bytes / background packet size)`.
    pub fn packets_at(&self, t: Duration) -> u64 {
        self.burst_bytes_at(t) / self.burst_packet_bytes.max(1)
            + self.background_bytes_at(t) / self.background_packet_bytes.max(1)
    }

    /// The burst's achieved rate, bytes per second: burst bytes / burst duration (0 without a
    /// burst). Background traffic is not included.
    pub fn burst_rate_bytes_per_second(&self) -> f64 {
        if self.burst_bytes_per_step == 0 || self.timing.duration_ns == 0 {
            return 0.0;
        }
        self.burst_bytes_per_step as f64 * 1e9 / self.timing.duration_ns as f64
    }
}

/// Both directions of one link and what it can carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkModel {
    /// Transmit direction (`port_xmit_data`·4, `tx_bytes`).
    pub tx: Flow,
    /// Receive direction (`port_rcv_data`·4, `rx_bytes`).
    pub rx: Flow,
    /// Capacity as inventory reports it, bytes per second (`rate` Gb/s × 125e6, `speed` Mb/s
    /// × 125e3; 0 for an IPoIB netdev, whose bytes are bounded by its HCA).
    pub capacity_bytes_per_second: u64,
    /// The most the job's traffic achieves on it, bytes per second (capacity × efficiency).
    pub effective_bytes_per_second: u64,
}

/// The model of one HCA port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaModel {
    /// Traffic and capacity.
    pub link: LinkModel,
    /// Active lanes (4, or `degraded_lanes` on the degraded port).
    pub lanes: u32,
    /// Content of `ports/1/rate` without the newline, e.g. `200 Gb/sec (4X HDR)`.
    pub rate_text: String,
    /// Congestion share during bursts, parts per million (drives `port_xmit_wait`).
    pub wait_ppm: u64,
    /// Whether `symbol_error`, `link_error_recovery`, `port_rcv_errors` rise on this port.
    pub errors: bool,
    /// Whether multicast packets are counted (not in [`Scenario::Constant`]).
    pub multicast: bool,
    base: [u64; 6],
}

/// The model of one netdev (`eth0` or `ib<g>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetdevModel {
    /// Traffic and capacity.
    pub link: LinkModel,
    /// Content of `speed`, in Mb/s.
    pub speed_mbps: i64,
    base: [u64; 8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeModel {
    name: String,
    hcas: Vec<HcaModel>,
    ipoib: Vec<NetdevModel>,
    eth0: NetdevModel,
}

/// The shape of every step, shared by all nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepTimeline {
    /// Length of a step.
    pub period: Duration,
    /// Host phase at the start of each step, GPUs idle.
    pub host: Duration,
    /// GPU compute per node, starting after `host`.
    pub compute: Vec<Duration>,
    /// Offset of the AllReduce burst from the start of the step (same on every node).
    pub burst_start: Duration,
    /// Length of the burst, set by the slowest link of the ring.
    pub burst_duration: Duration,
}

impl StepTimeline {
    /// Communication not hidden under compute: `period − (host + max compute)`.
    pub fn exposed_comm(&self) -> Duration {
        let ready = self.host + self.compute.iter().copied().max().unwrap_or_default();
        self.period.saturating_sub(ready)
    }

    /// Share of the step `node`'s GPUs compute (0 for an unknown node).
    pub fn gpu_busy_share(&self, node: usize) -> f64 {
        match self.compute.get(node) {
            Some(c) if !self.period.is_zero() => c.as_secs_f64() / self.period.as_secs_f64(),
            _ => 0.0,
        }
    }

    /// The interval `[start, end)` of the burst of step `k`, from t = 0.
    pub fn burst_of_step(&self, k: u64) -> (Duration, Duration) {
        let start = self.period_ns() * u128::from(k) + self.burst_start.as_nanos();
        let end = start + self.burst_duration.as_nanos();
        (nanos(start), nanos(end))
    }

    fn period_ns(&self) -> u128 {
        self.period.as_nanos()
    }
}

fn nanos(ns: u128) -> Duration {
    let secs = u64::try_from(ns / NS_PER_S).unwrap_or(u64::MAX);
    Duration::new(secs, (ns % NS_PER_S) as u32)
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

/// The whole job: spec, step timeline and every link of every node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobModel {
    spec: ClusterSpec,
    timeline: StepTimeline,
    nodes: Vec<NodeModel>,
}

/// splitmix64: a deterministic mix of the seed with a key.
fn mix(seed: u64, key: u64) -> u64 {
    let mut z = seed ^ key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A seeded value in `[lo, lo + span)`.
fn seeded(seed: u64, node: usize, dev: u64, what: u64, lo: u64, span: u64) -> u64 {
    let key = ((node as u64) << 32) ^ (dev << 16) ^ what;
    lo + mix(seed, key) % span.max(1)
}

/// Seeded, deterministic values that differ per node and device (GUIDs, addresses).
pub(crate) fn seeded_u64(seed: u64, node: usize, dev: u64, what: u64) -> u64 {
    mix(seed, ((node as u64) << 32) ^ (dev << 16) ^ what)
}

const DEV_ETH0: u64 = 0xfff;

fn ceil_div(a: u128, b: u128) -> u128 {
    a.div_ceil(b.max(1))
}

impl JobModel {
    /// Builds the model; fails if the spec does not [validate](ClusterSpec::validate).
    pub fn new(spec: &ClusterSpec) -> Result<Self, SimError> {
        spec.validate()?;
        let ranks = (spec.nodes * spec.gpus_per_node) as u128;
        let g = spec.gpus_per_node;
        let fault = spec.resolved_fault_node();
        let sc = spec.scenario;
        let constant = matches!(sc, Scenario::Constant { .. });

        // Bytes each rank sends (and receives) per step: R = 2(N-1)/N · S, none with one node.
        let per_rank: u64 = if spec.nodes > 1 {
            (2 * (ranks - 1) * u128::from(spec.allreduce_bytes) / ranks) as u64
        } else {
            0
        };
        let per_lane = spec.ib_rate_gbps / 4;
        let gen = lanes_name(per_lane).unwrap_or("HDR");
        let lanes_of = |node: usize, hca: usize| -> u32 {
            if sc == Scenario::DegradedLink && node == fault && hca == spec.fault_hca {
                spec.degraded_lanes
            } else {
                4
            }
        };
        let hca_capacity = |lanes: u32| u64::from(per_lane * lanes) * 125_000_000;
        let eff = |cap: u64, permille: u32| cap / 1000 * u64::from(permille);
        let eth_capacity = u64::from(spec.eth_speed_mbps) * 125_000;
        let eth_effective = eff(eth_capacity, spec.socket_efficiency_permille);
        let mgmt = |node: usize| sc == Scenario::ManagementNic && node == fault;

        // Burst duration: the slowest link of the ring.
        let mut burst_ns: u128 = 0;
        for node in 0..spec.nodes {
            if constant || per_rank == 0 {
                break;
            }
            if mgmt(node) {
                let bytes = u128::from(per_rank) * g as u128;
                burst_ns = burst_ns.max(ceil_div(bytes * NS_PER_S, u128::from(eth_effective)));
            } else {
                for hca in 0..g {
                    let rate = eff(
                        hca_capacity(lanes_of(node, hca)),
                        spec.ib_efficiency_permille,
                    );
                    burst_ns =
                        burst_ns.max(ceil_div(u128::from(per_rank) * NS_PER_S, u128::from(rate)));
                }
            }
        }
        let burst_ns = u64::try_from(burst_ns).unwrap_or(u64::MAX);

        let ms = |v: u64| v * NS_PER_MS;
        let host_ns = if sc == Scenario::CpuBound {
            ms(spec.cpu_bound_host_ms)
        } else {
            0
        };
        let compute_ns: Vec<u64> = (0..spec.nodes)
            .map(|node| {
                let c = ms(spec.compute_ms);
                if sc == Scenario::Straggler && node == fault {
                    c / 100 * (100 + u64::from(spec.straggler_percent))
                } else {
                    c
                }
            })
            .collect();
        let ready = host_ns + compute_ns.iter().copied().max().unwrap_or(0);
        let overlap = if sc == Scenario::NoOverlap {
            0
        } else {
            ms(spec.overlap_ms)
        };
        let timing = if constant {
            BurstTiming {
                period_ns: NS_PER_S as u64,
                start_ns: 0,
                duration_ns: 0,
            }
        } else {
            let start = ready - overlap;
            BurstTiming {
                period_ns: ready.max(start.saturating_add(burst_ns)),
                start_ns: start,
                duration_ns: burst_ns,
            }
        };
        let timeline = StepTimeline {
            period: Duration::from_nanos(timing.period_ns),
            host: Duration::from_nanos(if constant { 0 } else { host_ns }),
            compute: compute_ns
                .iter()
                .map(|&c| Duration::from_nanos(if constant { timing.period_ns } else { c }))
                .collect(),
            burst_start: Duration::from_nanos(timing.start_ns),
            burst_duration: Duration::from_nanos(timing.duration_ns),
        };

        let flow = |burst: u64, bg: u64, burst_pkt: u64, bg_pkt: u64| Flow {
            burst_bytes_per_step: burst,
            background_bytes_per_second: bg,
            burst_packet_bytes: burst_pkt,
            background_packet_bytes: bg_pkt,
            timing,
        };
        let seed = spec.seed;
        let mut nodes = Vec::with_capacity(spec.nodes);
        for node in 0..spec.nodes {
            let mut hcas = Vec::with_capacity(g);
            let mut ipoib = Vec::with_capacity(g);
            for hca in 0..g {
                let dev = hca as u64;
                let lanes = lanes_of(node, hca);
                let capacity = hca_capacity(lanes);
                let (tx, rx) = if let Scenario::Constant {
                    tx_bytes_per_second,
                    rx_bytes_per_second,
                } = sc
                {
                    (
                        flow(0, tx_bytes_per_second, IB_PACKET_BYTES, IB_PACKET_BYTES),
                        flow(0, rx_bytes_per_second, IB_PACKET_BYTES, IB_PACKET_BYTES),
                    )
                } else {
                    let burst = if mgmt(node) { 0 } else { per_rank };
                    let bg_tx = seeded(seed, node, dev, 1, 16_000, 16_000);
                    let bg_rx = seeded(seed, node, dev, 2, 16_000, 16_000);
                    (
                        flow(burst, bg_tx, IB_PACKET_BYTES, BACKGROUND_PACKET_BYTES),
                        flow(burst, bg_rx, IB_PACKET_BYTES, BACKGROUND_PACKET_BYTES),
                    )
                };
                let wait_ppm = if constant {
                    0
                } else if lanes < 4 {
                    BOTTLENECK_WAIT_PPM
                } else {
                    HEALTHY_WAIT_PPM
                };
                let base = if constant {
                    [
                        seeded(seed, node, dev, 10, 0, 1 << 40),
                        seeded(seed, node, dev, 11, 0, 1 << 40),
                        seeded(seed, node, dev, 12, 0, 1 << 32),
                        seeded(seed, node, dev, 13, 0, 1 << 32),
                        0,
                        0,
                    ]
                } else {
                    [
                        seeded(seed, node, dev, 10, 0, 1 << 40),
                        seeded(seed, node, dev, 11, 0, 1 << 40),
                        seeded(seed, node, dev, 12, 0, 1 << 32),
                        seeded(seed, node, dev, 13, 0, 1 << 32),
                        seeded(seed, node, dev, 14, 0, 1 << 16),
                        seeded(seed, node, dev, 15, 0, 1 << 16),
                    ]
                };
                hcas.push(HcaModel {
                    link: LinkModel {
                        tx,
                        rx,
                        capacity_bytes_per_second: capacity,
                        effective_bytes_per_second: eff(capacity, spec.ib_efficiency_permille),
                    },
                    lanes,
                    rate_text: format!("{} Gb/sec ({lanes}X {gen})", per_lane * lanes),
                    wait_ppm,
                    errors: sc == Scenario::LinkErrors && node == fault && hca == spec.fault_hca,
                    multicast: !constant,
                    base,
                });
                let (bg_tx, bg_rx) = if constant {
                    (0, 0)
                } else {
                    (
                        seeded(seed, node, dev, 3, 2_000, 8_000),
                        seeded(seed, node, dev, 4, 2_000, 8_000),
                    )
                };
                ipoib.push(NetdevModel {
                    link: LinkModel {
                        tx: flow(0, bg_tx, BACKGROUND_PACKET_BYTES, BACKGROUND_PACKET_BYTES),
                        rx: flow(0, bg_rx, BACKGROUND_PACKET_BYTES, BACKGROUND_PACKET_BYTES),
                        capacity_bytes_per_second: 0,
                        effective_bytes_per_second: 0,
                    },
                    speed_mbps: i64::from(per_lane * lanes) * 1000,
                    base: netdev_base(seed, node, 0x100 + dev),
                });
            }
            let eth_burst = if mgmt(node) { per_rank * g as u64 } else { 0 };
            let (bg_tx, bg_rx) = if constant {
                (0, 0)
            } else {
                (
                    seeded(seed, node, DEV_ETH0, 5, 1_000_000, 4_000_000),
                    seeded(seed, node, DEV_ETH0, 6, 1_000_000, 4_000_000),
                )
            };
            let eth0 = NetdevModel {
                link: LinkModel {
                    tx: flow(
                        eth_burst,
                        bg_tx,
                        ETH_FRAME_BYTES,
                        ETH_BACKGROUND_PACKET_BYTES,
                    ),
                    rx: flow(
                        eth_burst,
                        bg_rx,
                        ETH_FRAME_BYTES,
                        ETH_BACKGROUND_PACKET_BYTES,
                    ),
                    capacity_bytes_per_second: eth_capacity,
                    effective_bytes_per_second: eth_effective,
                },
                speed_mbps: i64::from(spec.eth_speed_mbps),
                base: netdev_base(seed, node, DEV_ETH0),
            };
            nodes.push(NodeModel {
                name: node_name(node),
                hcas,
                ipoib,
                eth0,
            });
        }
        Ok(JobModel {
            spec: spec.clone(),
            timeline,
            nodes,
        })
    }

    /// The spec the model was built from.
    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    /// The step timeline shared by all nodes.
    pub fn timeline(&self) -> &StepTimeline {
        &self.timeline
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Bytes each rank sends (and receives) per step, `2·(N−1)/N · S` (0 with one node).
    pub fn per_rank_bytes_per_step(&self) -> u64 {
        let n = (self.spec.nodes * self.spec.gpus_per_node) as u128;
        if self.spec.nodes > 1 {
            (2 * (n - 1) * u128::from(self.spec.allreduce_bytes) / n) as u64
        } else {
            0
        }
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
            count: self.spec.gpus_per_node,
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
                count: self.spec.gpus_per_node + 1,
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

    /// What the link does in every step.
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

    /// The value of `ports/1/counters/<counter>` of `mlx5_<hca>` on `node` at `t`.
    pub fn port_counter(
        &self,
        node: usize,
        hca: usize,
        counter: PortCounter,
        t: Duration,
    ) -> Result<u64, SimError> {
        let h = self.hca(node, hca)?;
        let t_ns = t.as_nanos();
        let multicast = if h.multicast {
            (t_ns / u128::from(MULTICAST_PERIOD_NS)) as u64
        } else {
            0
        };
        let errs = |period: u64| {
            if h.errors {
                saturating_events(t_ns, u128::from(period), counter.width_bits())
            } else {
                0
            }
        };
        let [xd, rd, ux, ur, mx, mr] = h.base;
        let v = match counter {
            PortCounter::PortXmitData => xd.saturating_add(h.link.tx.bytes_at(t) / 4),
            PortCounter::PortRcvData => rd.saturating_add(h.link.rx.bytes_at(t) / 4),
            PortCounter::UnicastXmitPackets => ux.saturating_add(h.link.tx.packets_at(t)),
            PortCounter::UnicastRcvPackets => ur.saturating_add(h.link.rx.packets_at(t)),
            PortCounter::MulticastXmitPackets => mx.saturating_add(multicast),
            PortCounter::MulticastRcvPackets => mr.saturating_add(multicast),
            PortCounter::PortXmitPackets => ux
                .saturating_add(h.link.tx.packets_at(t))
                .saturating_add(mx)
                .saturating_add(multicast),
            PortCounter::PortRcvPackets => ur
                .saturating_add(h.link.rx.packets_at(t))
                .saturating_add(mr)
                .saturating_add(multicast),
            PortCounter::SymbolError => errs(SYMBOL_ERROR_PERIOD_NS),
            PortCounter::LinkErrorRecovery => errs(LINK_ERROR_RECOVERY_PERIOD_NS),
            PortCounter::PortRcvErrors => errs(PORT_RCV_ERRORS_PERIOD_NS),
            PortCounter::PortXmitWait => xmit_wait_ticks(h, t).min(counter.max_value()),
            PortCounter::LinkDowned
            | PortCounter::PortRcvRemotePhysicalErrors
            | PortCounter::PortRcvSwitchRelayErrors
            | PortCounter::PortXmitDiscards
            | PortCounter::PortXmitConstraintErrors
            | PortCounter::PortRcvConstraintErrors
            | PortCounter::LocalLinkIntegrityErrors
            | PortCounter::ExcessiveBufferOverrunErrors
            | PortCounter::Vl15Dropped => 0,
        };
        Ok(v)
    }

    /// The value of `ports/1/hw_counters/<counter>` of `mlx5_<hca>` on `node` at `t`.
    pub fn hw_counter(
        &self,
        node: usize,
        hca: usize,
        counter: HwCounter,
        t: Duration,
    ) -> Result<u64, SimError> {
        let h = self.hca(node, hca)?;
        Ok(match counter {
            HwCounter::NpCnpSent | HwCounter::RpCnpHandled | HwCounter::NpEcnMarkedRocePackets => {
                xmit_wait_ticks(h, t) / 4096
            }
            HwCounter::OutOfSequence => {
                if h.errors {
                    (t.as_nanos() / u128::from(PORT_RCV_ERRORS_PERIOD_NS)) as u64
                } else {
                    0
                }
            }
            HwCounter::RnrNakRetryErr => 0,
        })
    }

    /// The value of `class/net/<dev>/statistics/<stat>` of `node` at `t` (`link` is
    /// [`Link::Eth0`] or [`Link::Ipoib`]). Errors and drops keep their seeded initial values.
    pub fn net_stat(
        &self,
        node: usize,
        link: Link,
        stat: NetStat,
        t: Duration,
    ) -> Result<u64, SimError> {
        let d = self.netdev(node, link)?;
        let b = &d.base;
        Ok(match stat {
            NetStat::TxBytes => b[0].saturating_add(d.link.tx.bytes_at(t)),
            NetStat::RxBytes => b[1].saturating_add(d.link.rx.bytes_at(t)),
            NetStat::TxPackets => b[2].saturating_add(d.link.tx.packets_at(t)),
            NetStat::RxPackets => b[3].saturating_add(d.link.rx.packets_at(t)),
            NetStat::TxErrors => b[4],
            NetStat::RxErrors => b[5],
            NetStat::TxDropped => b[6],
            NetStat::RxDropped => b[7],
        })
    }

    /// The node's name, `node-00`, `node-01`, …
    pub fn node_name(&self, node: usize) -> Result<&str, SimError> {
        Ok(&self.node(node)?.name)
    }

    /// A short human summary: the job, the faulty node or port, and the symptoms to expect.
    pub fn describe(&self) -> String {
        let s = &self.spec;
        let t = &self.timeline;
        let fault = s.resolved_fault_node();
        let fname = node_name(fault);
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let gbs = |v: f64| v / 1e9;
        let mut out = format!(
            "scenario {}: {} nodes x {} GPUs ({} ranks), ring AllReduce of {} B per step; \
             each HCA moves {} B per step each way\n",
            s.scenario,
            s.nodes,
            s.gpus_per_node,
            s.nodes * s.gpus_per_node,
            s.allreduce_bytes,
            self.per_rank_bytes_per_step(),
        );
        out.push_str(&format!(
            "step {:.3} ms (host {:.0} ms, compute {:.0} ms, burst at +{:.3} ms for {:.3} ms, exposed comm {:.3} ms)\n",
            ms(t.period),
            ms(t.host),
            ms(t.compute.iter().copied().max().unwrap_or_default()),
            ms(t.burst_start),
            ms(t.burst_duration),
            ms(t.exposed_comm()),
        ));
        let healthy = ClusterSpec {
            scenario: Scenario::Healthy,
            ..s.clone()
        };
        let healthy_burst = JobModel::new(&healthy)
            .map(|m| ms(m.timeline.burst_duration))
            .unwrap_or(0.0);
        let hca_rate = self
            .hca(0, 0)
            .map(|h| gbs(h.link.tx.burst_rate_bytes_per_second()))
            .unwrap_or(0.0);
        let line = match s.scenario {
            Scenario::Healthy => format!(
                "healthy: every HCA bursts at {hca_rate:.2} GB/s; eth0 and ib netdevs carry background only"
            ),
            Scenario::ManagementNic => {
                let eth = self.nodes[fault].eth0.link.tx;
                let other = (0..s.nodes).find(|&n| n != fault).unwrap_or(0);
                let other_rate = self
                    .hca(other, 0)
                    .map(|h| gbs(h.link.tx.burst_rate_bytes_per_second()))
                    .unwrap_or(0.0);
                format!(
                    "fault: {fname} sends its NCCL traffic over eth0 (management, {} Mb/s) instead of its HCAs. \
                     expect: {fname} mlx5_* idle (background only); {fname} eth0 moves {} B per step each way at {:.2} GB/s; \
                     the job's burst stretches from {healthy_burst:.3} ms to {:.3} ms, other nodes' HCAs burst at only {other_rate:.2} GB/s",
                    s.eth_speed_mbps,
                    eth.burst_bytes_per_step,
                    gbs(eth.burst_rate_bytes_per_second()),
                    ms(t.burst_duration),
                )
            }
            Scenario::DegradedLink => {
                let h = &self.nodes[fault].hcas[s.fault_hca];
                format!(
                    "fault: {fname} mlx5_{} trained at {} (capacity {:.2} GB/s, effective {:.2} GB/s). \
                     expect: its rate file says so, its port_xmit_wait rises fast; the job's burst stretches from \
                     {healthy_burst:.3} ms to {:.3} ms on every link",
                    s.fault_hca,
                    h.rate_text,
                    gbs(h.link.capacity_bytes_per_second as f64),
                    gbs(h.link.effective_bytes_per_second as f64),
                    ms(t.burst_duration),
                )
            }
            Scenario::LinkErrors => format!(
                "fault: {fname} mlx5_{} port 1 has a bad cable. expect: symbol_error +1 every {} ms \
                 (saturates at 65535), link_error_recovery +1 every {} s (saturates at 255), port_rcv_errors +1 every {} ms \
                 (saturates at 65535); traffic unaffected",
                s.fault_hca,
                SYMBOL_ERROR_PERIOD_NS / NS_PER_MS,
                LINK_ERROR_RECOVERY_PERIOD_NS / NS_PER_S as u64,
                PORT_RCV_ERRORS_PERIOD_NS / NS_PER_MS,
            ),
            Scenario::Straggler => format!(
                "fault: {fname} computes {}% longer ({:.0} ms). expect: every node's burst starts at +{:.3} ms \
                 instead of +{:.3} ms; links look healthy, the step is longer",
                s.straggler_percent,
                ms(t.compute.get(fault).copied().unwrap_or_default()),
                ms(t.burst_start),
                (s.compute_ms - s.overlap_ms) as f64,
            ),
            Scenario::NoOverlap => "fault: the AllReduce is not overlapped with backward. expect: the burst starts when \
                 compute ends, the step is longer by the overlap; links look healthy (GPU timeline comes with the GPU source)"
                .to_string(),
            Scenario::CpuBound => format!(
                "fault: a {} ms host phase (data loader / CPU) precedes compute each step. expect: long steps, GPU busy \
                 share {:.0}%, healthy links (GPU view comes with the GPU source)",
                s.cpu_bound_host_ms,
                t.gpu_busy_share(0) * 100.0,
            ),
            Scenario::Constant {
                tx_bytes_per_second,
                rx_bytes_per_second,
            } => format!(
                "constant: every HCA port transmits {tx_bytes_per_second} B/s and receives {rx_bytes_per_second} B/s; \
                 netdevs still, no errors"
            ),
        };
        out.push_str(&line);
        out
    }
}

fn xmit_wait_ticks(h: &HcaModel, t: Duration) -> u64 {
    let active = h.link.tx.burst_active_ns_at(t);
    let v = active * u128::from(h.wait_ppm) * u128::from(XMIT_WAIT_TICKS_PER_SECOND)
        / (1_000_000 * NS_PER_S);
    u64::try_from(v).unwrap_or(u64::MAX)
}

fn netdev_base(seed: u64, node: usize, dev: u64) -> [u64; 8] {
    [
        seeded(seed, node, dev, 20, 0, 1 << 36),
        seeded(seed, node, dev, 21, 0, 1 << 36),
        seeded(seed, node, dev, 22, 0, 1 << 28),
        seeded(seed, node, dev, 23, 0, 1 << 28),
        0,
        seeded(seed, node, dev, 24, 0, 4),
        0,
        seeded(seed, node, dev, 25, 0, 64),
    ]
}

/// The name of node `i`: `node-00`, `node-01`, … (at least two digits).
pub fn node_name(i: usize) -> String {
    format!("node-{i:02}")
}
