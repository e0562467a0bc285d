//! What every link can carry: HCA port width and rate (with the `degraded-link` fault), the management NIC,
//! and the share of each the job's traffic achieves.

use crate::spec::lanes_name;
use crate::{ClusterSpec, Scenario};

/// The spec's link rates, with the fault node's port faults applied.
#[derive(Debug, Clone)]
pub(crate) struct Rates {
    per_lane_gbps: u32,
    generation: &'static str,
    ib_permille: u32,
    /// `eth0` capacity, bytes per second (`speed` Mb/s × 125 000).
    pub(crate) eth_capacity: u64,
    /// What the NCCL socket transport achieves on `eth0`, bytes per second.
    pub(crate) eth_effective: u64,
    degraded: Option<(usize, usize, u32)>,
}

/// `cap × permille / 1000`, rounded as the model always has (`cap / 1000 × permille`).
pub(crate) fn effective(cap: u64, permille: u32) -> u64 {
    cap / 1000 * u64::from(permille)
}

impl Rates {
    pub(crate) fn new(spec: &ClusterSpec) -> Rates {
        let per_lane_gbps = spec.ib_rate_gbps / 4;
        let eth_capacity = u64::from(spec.eth_speed_mbps) * 125_000;
        Rates {
            per_lane_gbps,
            generation: lanes_name(per_lane_gbps).unwrap_or("HDR"),
            ib_permille: spec.ib_efficiency_permille,
            eth_capacity,
            eth_effective: effective(eth_capacity, spec.socket_efficiency_permille),
            degraded: (spec.scenario == Scenario::DegradedLink).then_some((
                spec.resolved_fault_node(),
                spec.fault_hca,
                spec.degraded_lanes,
            )),
        }
    }

    /// Active lanes of `mlx5_<hca>` on `node`: 4, or `degraded_lanes` on the degraded port.
    pub(crate) fn lanes(&self, node: usize, hca: usize) -> u32 {
        match self.degraded {
            Some((n, h, lanes)) if n == node && h == hca => lanes,
            _ => 4,
        }
    }

    /// Capacity of a port with `lanes` lanes, bytes per second.
    pub(crate) fn hca_capacity(&self, lanes: u32) -> u64 {
        u64::from(self.per_lane_gbps * lanes) * 125_000_000
    }

    /// What the job's traffic achieves on `mlx5_<hca>` of `node`, bytes per second.
    pub(crate) fn hca_effective(&self, node: usize, hca: usize) -> u64 {
        effective(self.hca_capacity(self.lanes(node, hca)), self.ib_permille)
    }

    /// The `rate` file of a port with `lanes` lanes, e.g. `200 Gb/sec (4X HDR)`.
    pub(crate) fn rate_text(&self, lanes: u32) -> String {
        format!(
            "{} Gb/sec ({lanes}X {})",
            self.per_lane_gbps * lanes,
            self.generation
        )
    }

    /// The IPoIB netdev's `speed`, Mb/s, for a port with `lanes` lanes.
    pub(crate) fn ipoib_speed_mbps(&self, lanes: u32) -> i64 {
        i64::from(self.per_lane_gbps * lanes) * 1000
    }
}
