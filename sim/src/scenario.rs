//! The faults a simulated cluster can carry, by name.

use std::fmt;
use std::str::FromStr;

use crate::SimError;

/// What the simulated training job (or its hardware) gets wrong.
///
/// The faulty node, port and magnitudes are chosen in [`crate::ClusterSpec`]
/// (`fault_node`, `fault_hca`, `degraded_lanes`, `straggler_percent`, `cpu_bound_host_ms`);
/// [`crate::model::JobModel`] documents the numbers each scenario produces.
///
/// Names (for the CLI) are [`Scenario::NAMES`]; [`Scenario::Constant`] is written and parsed as
/// `constant:<tx_bytes_per_second>:<rx_bytes_per_second>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Every link works; each step is compute then a ring AllReduce over the HCAs.
    Healthy,
    /// The classic case: one node's NCCL traffic goes over its management NIC `eth0`
    /// (`NCCL_SOCKET_IFNAME` not bound to the fabric). Its HCAs carry only background traffic,
    /// its `eth0` carries all of its GPUs' share at the socket transport's speed, and the whole
    /// job's AllReduce burst stretches to that.
    ManagementNic,
    /// One HCA port trained at reduced width (`100 Gb/sec (2X HDR)` or `50 Gb/sec (1X HDR)`);
    /// its traffic is capped there and the job's burst stretches.
    DegradedLink,
    /// One HCA port's `symbol_error`, `link_error_recovery` and `port_rcv_errors` rise steadily
    /// and saturate at their PMA widths; traffic is unaffected.
    LinkErrors,
    /// One node's compute phase is longer (30% by default); every rank waits for it, so the
    /// AllReduce burst of every node starts late.
    Straggler,
    /// The AllReduce is not overlapped with backward compute: the burst starts only when compute
    /// ends, so the step is longer. Link counters otherwise look healthy; the GPU-side timeline
    /// (GPU idle during the burst) comes with the simulated GPU source.
    NoOverlap,
    /// A host-side (data loader / CPU) phase precedes compute every step, so the step is longer
    /// and the GPUs' busy share is low. Link counters otherwise look healthy; the GPU-side view
    /// comes with the simulated GPU source.
    CpuBound,
    /// Pipeline-test mode: every HCA port moves exactly `tx_bytes_per_second` out and
    /// `rx_bytes_per_second` in, continuously, with no background traffic; netdev counters stay
    /// still and error counters stay zero.
    Constant {
        /// Bytes per second each HCA port transmits (`port_xmit_data` grows by a quarter of this).
        tx_bytes_per_second: u64,
        /// Bytes per second each HCA port receives.
        rx_bytes_per_second: u64,
    },
}

impl Scenario {
    /// The CLI names of the named scenarios, in a stable order (`constant:TX:RX` is extra).
    pub const NAMES: [&'static str; 7] = [
        "healthy",
        "management-nic",
        "degraded-link",
        "link-errors",
        "straggler",
        "no-overlap",
        "cpu-bound",
    ];

    /// Every named scenario, in the order of [`Scenario::NAMES`].
    pub const ALL_NAMED: [Scenario; 7] = [
        Scenario::Healthy,
        Scenario::ManagementNic,
        Scenario::DegradedLink,
        Scenario::LinkErrors,
        Scenario::Straggler,
        Scenario::NoOverlap,
        Scenario::CpuBound,
    ];

    /// The scenario's name without parameters (`constant` for [`Scenario::Constant`]).
    pub fn name(&self) -> &'static str {
        match self {
            Scenario::Healthy => "healthy",
            Scenario::ManagementNic => "management-nic",
            Scenario::DegradedLink => "degraded-link",
            Scenario::LinkErrors => "link-errors",
            Scenario::Straggler => "straggler",
            Scenario::NoOverlap => "no-overlap",
            Scenario::CpuBound => "cpu-bound",
            Scenario::Constant { .. } => "constant",
        }
    }

    /// Whether the scenario injects a fault on one node (`fault_node` matters).
    pub fn has_fault_node(&self) -> bool {
        matches!(
            self,
            Scenario::ManagementNic
                | Scenario::DegradedLink
                | Scenario::LinkErrors
                | Scenario::Straggler
        )
    }

    fn expected() -> String {
        let mut s = Scenario::NAMES.join(", ");
        s.push_str(", constant:<tx_bytes_per_second>:<rx_bytes_per_second>");
        s
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scenario::Constant {
                tx_bytes_per_second,
                rx_bytes_per_second,
            } => write!(f, "constant:{tx_bytes_per_second}:{rx_bytes_per_second}"),
            other => f.write_str(other.name()),
        }
    }
}

impl FromStr for Scenario {
    type Err = SimError;

    /// Parses a name of [`Scenario::NAMES`] (ASCII case-insensitive, `_` accepted for `-`) or
    /// `constant:<tx_bytes_per_second>:<rx_bytes_per_second>`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let unknown = || SimError::UnknownScenario {
            name: s.to_string(),
            expected: Scenario::expected(),
        };
        let norm = s.trim().to_ascii_lowercase().replace('_', "-");
        if let Some(rest) = norm.strip_prefix("constant:") {
            let (tx, rx) = rest.split_once(':').ok_or_else(unknown)?;
            let tx = tx.parse::<u64>().map_err(|_| unknown())?;
            let rx = rx.parse::<u64>().map_err(|_| unknown())?;
            return Ok(Scenario::Constant {
                tx_bytes_per_second: tx,
                rx_bytes_per_second: rx,
            });
        }
        Scenario::ALL_NAMED
            .into_iter()
            .find(|sc| sc.name() == norm)
            .ok_or_else(unknown)
    }
}
