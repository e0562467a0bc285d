//! One node's links as the model has them: its HCA ports, their IPoIB netdevs and the management NIC, each
//! with its traffic, capacity and seeded initial counter values.
//!
//! Background (seeded per link): 16–32 kB/s on each HCA port (256-byte packets), 2–10 kB/s on each IPoIB
//! netdev, 1–5 MB/s on `eth0` (800-byte packets). AllReduce bytes go in 4096-byte packets on IB and
//! 1514-byte frames on `eth0`. A node that runs no job carries the background only.

use crate::model::flow::{Flow, LinkModel};
use crate::model::job::{Fault, NodeTraffic};
use crate::model::rates::{effective, Rates};
use crate::model::seed::seeded;
use crate::model::storage::{StorageDirection, StorageFlow};
use crate::model::timeline::StepTimeline;
use crate::model::{
    BACKGROUND_PACKET_BYTES, BOTTLENECK_WAIT_PPM, ETH_BACKGROUND_PACKET_BYTES, ETH_FRAME_BYTES,
    HEALTHY_WAIT_PPM, IB_PACKET_BYTES,
};
use crate::variant::Variant;
use crate::{ClusterSpec, Scenario};

/// Device key of `eth0` in seeded values (HCA `g` is `g`, its IPoIB netdev `0x100 + g`).
pub(crate) const DEV_ETH0: u64 = 0xfff;

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
    /// Whether the port goes down and up (`flapping` variant).
    pub flapping: bool,
    pub(crate) base: [u64; 6],
}

/// The model of one netdev (`eth0` or `ib<g>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetdevModel {
    /// Traffic and capacity.
    pub link: LinkModel,
    /// Content of `speed`, in Mb/s.
    pub speed_mbps: i64,
    /// Whether the netdev goes down with its flapping HCA port.
    pub flapping: bool,
    pub(crate) base: [u64; 8],
}

/// One node's links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeModel {
    pub(crate) name: String,
    pub(crate) hcas: Vec<HcaModel>,
    pub(crate) ipoib: Vec<NetdevModel>,
    pub(crate) eth0: NetdevModel,
}

/// What building one node needs.
pub(crate) struct NodeInputs<'a> {
    pub(crate) spec: &'a ClusterSpec,
    pub(crate) rates: &'a Rates,
    pub(crate) fault: Fault,
    /// The timeline of the node's job (job 0's for an idle node: it moves nothing on it).
    pub(crate) timeline: &'a StepTimeline,
    /// The node's AllReduce bytes per link.
    pub(crate) traffic: NodeTraffic,
    /// Whether the node runs a job.
    pub(crate) in_job: bool,
}

/// The seeded initial values of a netdev's statistics.
pub(crate) fn netdev_base(seed: u64, node: usize, dev: u64) -> [u64; 8] {
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

fn hca_base(seed: u64, node: usize, dev: u64, constant: bool) -> [u64; 6] {
    let mc = |what| {
        if constant {
            0
        } else {
            seeded(seed, node, dev, what, 0, 1 << 16)
        }
    };
    [
        seeded(seed, node, dev, 10, 0, 1 << 40),
        seeded(seed, node, dev, 11, 0, 1 << 40),
        seeded(seed, node, dev, 12, 0, 1 << 32),
        seeded(seed, node, dev, 13, 0, 1 << 32),
        mc(14),
        mc(15),
    ]
}

impl NodeInputs<'_> {
    fn constant_rates(&self) -> Option<(u64, u64)> {
        match self.spec.scenario {
            Scenario::Constant {
                tx_bytes_per_second,
                rx_bytes_per_second,
            } => Some((tx_bytes_per_second, rx_bytes_per_second)),
            _ => None,
        }
    }

    fn hca(&self, node: usize, hca: usize) -> HcaModel {
        let (spec, seed, dev) = (self.spec, self.spec.seed, hca as u64);
        let clock = *self.timeline.clock();
        let lanes = self.rates.lanes(node, hca);
        let capacity = self.rates.hca_capacity(lanes);
        let constant = self.constant_rates();
        let (tx, rx) = match constant {
            Some((tx, rx)) => (
                Flow::new(clock, (0, 0), tx, (IB_PACKET_BYTES, IB_PACKET_BYTES)),
                Flow::new(clock, (0, 0), rx, (IB_PACKET_BYTES, IB_PACKET_BYTES)),
            ),
            None => {
                let burst = (self.traffic.rails[hca], self.traffic.flapped_rails[hca]);
                let packets = (IB_PACKET_BYTES, BACKGROUND_PACKET_BYTES);
                (
                    Flow::new(
                        clock,
                        burst,
                        seeded(seed, node, dev, 1, 16_000, 16_000),
                        packets,
                    ),
                    Flow::new(
                        clock,
                        burst,
                        seeded(seed, node, dev, 2, 16_000, 16_000),
                        packets,
                    ),
                )
            }
        };
        HcaModel {
            link: LinkModel {
                tx,
                rx,
                capacity_bytes_per_second: capacity,
                effective_bytes_per_second: effective(capacity, spec.ib_efficiency_permille),
            },
            lanes,
            rate_text: self.rates.rate_text(lanes),
            wait_ppm: match (constant, lanes) {
                (Some(_), _) => 0,
                (None, l) if l < 4 => BOTTLENECK_WAIT_PPM,
                _ => HEALTHY_WAIT_PPM,
            },
            errors: self.fault.has_link_errors(node, hca),
            multicast: constant.is_none(),
            flapping: self.fault.flaps(node, hca),
            base: hca_base(seed, node, dev, constant.is_some()),
        }
    }

    fn ipoib(&self, node: usize, hca: usize) -> NetdevModel {
        let (seed, dev) = (self.spec.seed, hca as u64);
        let (bg_tx, bg_rx) = match self.constant_rates() {
            Some(_) => (0, 0),
            None => (
                seeded(seed, node, dev, 3, 2_000, 8_000),
                seeded(seed, node, dev, 4, 2_000, 8_000),
            ),
        };
        let clock = *self.timeline.clock();
        let packets = (BACKGROUND_PACKET_BYTES, BACKGROUND_PACKET_BYTES);
        NetdevModel {
            link: LinkModel {
                tx: Flow::new(clock, (0, 0), bg_tx, packets),
                rx: Flow::new(clock, (0, 0), bg_rx, packets),
                capacity_bytes_per_second: 0,
                effective_bytes_per_second: 0,
            },
            speed_mbps: self.rates.ipoib_speed_mbps(self.rates.lanes(node, hca)),
            flapping: self.fault.flaps(node, hca),
            base: netdev_base(seed, node, 0x100 + dev),
        }
    }

    fn eth0(&self, node: usize) -> NetdevModel {
        let seed = self.spec.seed;
        let (bg_tx, bg_rx) = match self.constant_rates() {
            Some(_) => (0, 0),
            None => (
                seeded(seed, node, DEV_ETH0, 5, 1_000_000, 4_000_000),
                seeded(seed, node, DEV_ETH0, 6, 1_000_000, 4_000_000),
            ),
        };
        let clock = *self.timeline.clock();
        let burst = (self.traffic.eth0, self.traffic.eth0);
        let packets = (ETH_FRAME_BYTES, ETH_BACKGROUND_PACKET_BYTES);
        let mut tx = Flow::new(clock, burst, bg_tx, packets);
        let mut rx = Flow::new(clock, burst, bg_rx, packets);
        if self.in_job && self.spec.has(Variant::Storage) {
            let period = clock.period_ns;
            tx.storage = Some(StorageFlow::new(seed, node, StorageDirection::Tx, period));
            rx.storage = Some(StorageFlow::new(seed, node, StorageDirection::Rx, period));
        }
        NetdevModel {
            link: LinkModel {
                tx,
                rx,
                capacity_bytes_per_second: self.rates.eth_capacity,
                effective_bytes_per_second: self.rates.eth_effective,
            },
            speed_mbps: i64::from(self.spec.eth_speed_mbps),
            flapping: false,
            base: netdev_base(seed, node, DEV_ETH0),
        }
    }

    /// Builds node `node`.
    pub(crate) fn build(&self, node: usize, name: String) -> NodeModel {
        let rails = self.spec.hcas_per_node();
        NodeModel {
            name,
            hcas: (0..rails).map(|h| self.hca(node, h)).collect(),
            ipoib: (0..rails).map(|h| self.ipoib(node, h)).collect(),
            eth0: self.eth0(node),
        }
    }
}
