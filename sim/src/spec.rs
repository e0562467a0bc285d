//! The shape of a simulated cluster and its job, with defaults in one place.

use crate::placement::Placement;
use crate::variant::Variant;
use crate::{Scenario, SimError};

/// Everything that determines a simulated cluster. Two clusters built from equal specs write
/// byte-identical trees and counter values at every instant.
///
/// `Default` is the **healthy** 8 nodes × 8 GPUs job of the classic case (220 MB AllReduce,
/// 300 ms compute, 200 Gb/s HDR); the demo uses [`ClusterSpec::demo`], the same job under
/// [`Scenario::ManagementNic`]. With no [`variants`](ClusterSpec::variants) (the default) every node runs the
/// one job and the traffic is the square wave of the scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSpec {
    /// Number of nodes (`node-00`, `node-01`, …). At least 1.
    pub nodes: usize,
    /// GPUs per node; each GPU `g` has its own HCA `mlx5_<g>` and IPoIB netdev `ib<g>`. At least 1.
    pub gpus_per_node: usize,
    /// The fault injected, if any.
    pub scenario: Scenario,
    /// Size S of the gradient AllReduce at the end of every step, in bytes (default 220 MB).
    pub allreduce_bytes: u64,
    /// GPU compute (forward + backward) per step, in milliseconds (default 300).
    pub compute_ms: u64,
    /// How long before the end of compute the AllReduce may start (its first gradient buckets
    /// are ready during backward), in milliseconds (default 10; 0 in [`Scenario::NoOverlap`]).
    pub overlap_ms: u64,
    /// Signalling rate of every HCA port at full width (4X), in Gb/s: 40 (QDR), 56 (FDR),
    /// 100 (EDR), 200 (HDR, default), 400 (NDR) or 800 (XDR).
    pub ib_rate_gbps: u32,
    /// Share of an HCA port's capacity a ring AllReduce achieves, in permille
    /// (default 880: 22 GB/s on a 25 GB/s HDR port).
    pub ib_efficiency_permille: u32,
    /// Speed of the management NIC `eth0`, in Mb/s as its `speed` file says (default 100000).
    pub eth_speed_mbps: u32,
    /// Share of `eth0`'s capacity the NCCL socket transport achieves, in permille
    /// (default 784: 9.8 GB/s on 100 GbE, as in the classic case).
    pub socket_efficiency_permille: u32,
    /// The node that carries the fault; `None` means node 3, or the last node if there are
    /// fewer than 4.
    pub fault_node: Option<usize>,
    /// The HCA (= GPU index) that carries a port fault (`degraded-link`, `link-errors`); default 0.
    pub fault_hca: usize,
    /// Active lanes of the degraded port in [`Scenario::DegradedLink`]: 2 (`2X`, default) or 1.
    pub degraded_lanes: u32,
    /// How much longer the straggler's compute is, in percent (default 30).
    pub straggler_percent: u32,
    /// Host-side phase per step in [`Scenario::CpuBound`] during which the GPUs idle, in
    /// milliseconds (default 250).
    pub cpu_bound_host_ms: u64,
    /// Seed for everything that varies between links and nodes: initial counter values,
    /// background traffic rates, GUIDs and addresses; with variants also jitter and storage traffic.
    pub seed: u64,
    /// Realistic traffic on top of the scenario ([`Variant`]), in any order; default none.
    pub variants: Vec<Variant>,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        ClusterSpec {
            nodes: 8,
            gpus_per_node: 8,
            scenario: Scenario::Healthy,
            allreduce_bytes: 220_000_000,
            compute_ms: 300,
            overlap_ms: 10,
            ib_rate_gbps: 200,
            ib_efficiency_permille: 880,
            eth_speed_mbps: 100_000,
            socket_efficiency_permille: 784,
            fault_node: None,
            fault_hca: 0,
            degraded_lanes: 2,
            straggler_percent: 30,
            cpu_bound_host_ms: 250,
            seed: 1,
            variants: Vec::new(),
        }
    }
}

impl ClusterSpec {
    /// The demo's cluster: [`ClusterSpec::default`] under [`Scenario::ManagementNic`].
    pub fn demo() -> Self {
        ClusterSpec {
            scenario: Scenario::ManagementNic,
            ..ClusterSpec::default()
        }
    }

    /// The default spec with another scenario.
    pub fn with_scenario(scenario: Scenario) -> Self {
        ClusterSpec {
            scenario,
            ..ClusterSpec::default()
        }
    }

    /// The default spec with `variants` on top of `scenario`.
    pub fn with_variants(scenario: Scenario, variants: &[Variant]) -> Self {
        ClusterSpec {
            scenario,
            variants: variants.to_vec(),
            ..ClusterSpec::default()
        }
    }

    /// Whether the spec carries `variant`.
    pub fn has(&self, variant: Variant) -> bool {
        self.variants.contains(&variant)
    }

    /// HCAs (rails) per node: one per GPU, or eight with [`Variant::Rails8`].
    pub fn hcas_per_node(&self) -> usize {
        if self.has(Variant::Rails8) {
            8
        } else {
            self.gpus_per_node
        }
    }

    /// Which node runs which job ([`Placement`]).
    pub fn placement(&self) -> Placement {
        Placement::new(self.nodes, &self.variants)
    }

    /// The node index that carries the fault (see [`ClusterSpec::fault_node`]; when none is named and
    /// node 3 does not run the first job, [`Placement::default_fault_node`]).
    pub fn resolved_fault_node(&self) -> usize {
        match self.fault_node {
            Some(n) => n,
            None if self.variants.is_empty() => {
                if self.nodes > 3 {
                    3
                } else {
                    self.nodes.saturating_sub(1)
                }
            }
            None => self.placement().default_fault_node(),
        }
    }

    /// Whether anything is injected on the fault node (a scenario other than healthy, or a fault variant).
    fn injects_fault(&self) -> bool {
        !matches!(self.scenario, Scenario::Healthy | Scenario::Constant { .. })
            || self.variants.iter().any(|v| v.is_fault())
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), SimError> {
        if self.nodes == 0 || self.nodes > 4096 {
            return Err(SimError::spec("nodes", "must be between 1 and 4096"));
        }
        if self.gpus_per_node == 0 || self.gpus_per_node > 64 {
            return Err(SimError::spec("gpus_per_node", "must be between 1 and 64"));
        }
        if self.allreduce_bytes > 1 << 40 {
            return Err(SimError::spec("allreduce_bytes", "must be at most 1 TiB"));
        }
        if self.compute_ms == 0 || self.compute_ms > 3_600_000 {
            return Err(SimError::spec(
                "compute_ms",
                "must be between 1 and 3600000",
            ));
        }
        if self.overlap_ms > self.compute_ms {
            return Err(SimError::spec("overlap_ms", "must not exceed compute_ms"));
        }
        if lanes_name(self.ib_rate_gbps / 4).is_none()
            || self.ib_rate_gbps / 4 * 4 != self.ib_rate_gbps
        {
            return Err(SimError::spec(
                "ib_rate_gbps",
                format!(
                    "{} is not a 4X rate (40, 56, 100, 200, 400, 800)",
                    self.ib_rate_gbps
                ),
            ));
        }
        for (field, v) in [
            ("ib_efficiency_permille", self.ib_efficiency_permille),
            (
                "socket_efficiency_permille",
                self.socket_efficiency_permille,
            ),
        ] {
            if v == 0 || v > 1000 {
                return Err(SimError::spec(field, "must be between 1 and 1000"));
            }
        }
        if self.eth_speed_mbps == 0 || self.eth_speed_mbps > 1_600_000 {
            return Err(SimError::spec(
                "eth_speed_mbps",
                "must be between 1 and 1600000",
            ));
        }
        if let Some(n) = self.fault_node {
            if n >= self.nodes {
                return Err(SimError::spec(
                    "fault_node",
                    format!("{n} is not below nodes ({})", self.nodes),
                ));
            }
        }
        if self.fault_hca >= self.hcas_per_node() {
            return Err(SimError::spec(
                "fault_hca",
                format!(
                    "{} is not below the HCAs per node ({})",
                    self.fault_hca,
                    self.hcas_per_node()
                ),
            ));
        }
        if !matches!(self.degraded_lanes, 1 | 2) {
            return Err(SimError::spec("degraded_lanes", "must be 1 or 2"));
        }
        if self.straggler_percent > 1000 {
            return Err(SimError::spec("straggler_percent", "must be at most 1000"));
        }
        if self.cpu_bound_host_ms > 3_600_000 {
            return Err(SimError::spec(
                "cpu_bound_host_ms",
                "must be at most 3600000",
            ));
        }
        if let Scenario::Constant {
            tx_bytes_per_second,
            rx_bytes_per_second,
        } = self.scenario
        {
            if tx_bytes_per_second > 1 << 40 || rx_bytes_per_second > 1 << 40 {
                return Err(SimError::spec(
                    "scenario",
                    "constant rates must be at most 1 TiB/s",
                ));
            }
        }
        self.validate_variants()
    }

    /// The variants' own conditions: no duplicates, none with `constant`, every job with a node, the fault on
    /// a node that runs a job, a second rail to reroute a flapping port to.
    fn validate_variants(&self) -> Result<(), SimError> {
        if self.variants.is_empty() {
            return Ok(());
        }
        for (i, v) in self.variants.iter().enumerate() {
            if self.variants[..i].contains(v) {
                return Err(SimError::spec("variants", format!("{v} is given twice")));
            }
        }
        if matches!(self.scenario, Scenario::Constant { .. }) {
            return Err(SimError::spec(
                "variants",
                "the constant scenario has no steps: no variant applies",
            ));
        }
        let placement = self.placement();
        if placement.jobs().len() < Placement::expected_jobs(&self.variants) {
            return Err(SimError::spec(
                "variants",
                format!(
                    "{} nodes are too few for {}",
                    self.nodes,
                    self.variants
                        .iter()
                        .map(|v| v.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        let fault = self.resolved_fault_node();
        if self.injects_fault() && placement.job_of(fault).is_none() {
            return Err(SimError::spec(
                "fault_node",
                format!("node {fault} runs no job, so it cannot carry the fault"),
            ));
        }
        if self.has(Variant::Flapping) && self.hcas_per_node() < 2 {
            return Err(SimError::spec(
                "variants",
                "flapping needs at least two HCAs per node to reroute over",
            ));
        }
        Ok(())
    }
}

/// The InfiniBand generation name for a per-lane rate in Gb/s, as the kernel's `rate` file
/// spells it (`QDR` for 10, `FDR` for 14, `EDR` 25, `HDR` 50, `NDR` 100, `XDR` 200).
pub(crate) fn lanes_name(per_lane_gbps: u32) -> Option<&'static str> {
    Some(match per_lane_gbps {
        10 => "QDR",
        14 => "FDR",
        25 => "EDR",
        50 => "HDR",
        100 => "NDR",
        200 => "XDR",
        _ => return None,
    })
}
