//! The store's families: their names, help texts and types ([`FAMILIES`]), which family each of a node's or a
//! link's series goes to ([`Ix`]), and their descriptors ([`StoreDescs`]) for the registry.

use std::collections::HashMap;

use commwatch_model::SeriesKind;
use prometheus::core::{Collector, Desc};
use prometheus::proto::{MetricFamily, MetricType};

use crate::export::names::{self, link_counter_family, LinkCounterFamily};
use crate::store::SeriesSnapshot;

/// One family the store's samples are written to.
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: MetricType,
}

/// Every family of the store, in no particular order (the exposition sorts them by name).
pub const FAMILIES: &[Family] = &[
    Family {
        name: names::LINK_TRANSMIT_BYTES_TOTAL,
        help: "Bytes transmitted on the link, raw counter as read by the agent.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::LINK_RECEIVE_BYTES_TOTAL,
        help: "Bytes received on the link, raw counter as read by the agent.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::LINK_TRANSMIT_BYTES_PER_SECOND,
        help: "Transmit rate over the last second of samples (resets and saturation handled).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::LINK_RECEIVE_BYTES_PER_SECOND,
        help: "Receive rate over the last second of samples (resets and saturation handled).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::LINK_CAPACITY_BYTES_PER_SECOND,
        help: "Link capacity per direction.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::LINK_UP,
        help: "1 when the link state is up/active, else 0; the state text is in the state label.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::LINK_TRANSMIT_PACKETS_TOTAL,
        help: "Packets transmitted on the link.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::LINK_RECEIVE_PACKETS_TOTAL,
        help: "Packets received on the link.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::LINK_ERRORS_TOTAL,
        help:
            "Error counters of the link, summed (counter_detail=family) or by agent counter name.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::LINK_CONGESTION_TOTAL,
        help: "Congestion counters of the link (CNP, ECN, out of sequence).",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::LINK_XMIT_WAIT_TICKS_TOTAL,
        help: "Ticks the port had data to send but no credits.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::LINK_EVENTS_TOTAL,
        help:
            "Other counters of the link, summed (counter_detail=family) or by agent counter name.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::NODE_UP,
        help: "1 while the node's agent stream is open, else 0.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::NODE_LAST_SEEN_TIMESTAMP_SECONDS,
        help: "Time of the last message from the node's agent.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::NODE_CPU_UTILIZATION_RATIO,
        help: "CPU utilisation (0..1); per core with the cpu label (cpu_detail=core).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::NODE_MEMORY_USED_BYTES,
        help: "Memory used on the node.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::NODE_MEMORY_TOTAL_BYTES,
        help: "Memory installed on the node.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::NODE_AGENT_DROPPED_BATCHES_TOTAL,
        help: "Batches the agent dropped because its resend buffer overflowed.",
        kind: MetricType::COUNTER,
    },
    // GPU series of the agent's nvml source (`names::gpu_family`); labels `node`, `gpu`.
    Family {
        name: names::GPU_UTILIZATION_RATIO,
        help: "GPU utilisation: share of time a kernel was running (0..1).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_MEMORY_UTILIZATION_RATIO,
        help: "GPU memory controller utilisation (0..1).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_SM_ACTIVITY_RATIO,
        help: "Share of SMs active (0..1).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_MEMORY_USED_BYTES,
        help: "GPU memory in use.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_TRANSMIT_BYTES_PER_SECOND,
        help: "PCIe transmit rate of the GPU.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_RECEIVE_BYTES_PER_SECOND,
        help: "PCIe receive rate of the GPU.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_NVLINK_TRANSMIT_BYTES_PER_SECOND,
        help: "NVLink transmit rate of the GPU, all links (GPM; gpu_detail=full).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_NVLINK_RECEIVE_BYTES_PER_SECOND,
        help: "NVLink receive rate of the GPU, all links (GPM; gpu_detail=full).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_LINK_GENERATION,
        help: "Current PCIe link generation of the GPU; its maximum in the max label (gpu_detail=summary).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_LINK_GENERATION_MAX,
        help: "Maximum PCIe link generation of the GPU (gpu_detail=full).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_LINK_WIDTH,
        help: "Current PCIe link width of the GPU (lanes); its maximum in the max label (gpu_detail=summary).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_LINK_WIDTH_MAX,
        help: "Maximum PCIe link width of the GPU (lanes; gpu_detail=full).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_REPLAY_ERRORS_TOTAL,
        help: "PCIe replay errors of the GPU.",
        kind: MetricType::COUNTER,
    },
    Family {
        name: names::GPU_POWER_WATTS,
        help: "GPU power draw.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_SM_CLOCK_HERTZ,
        help: "GPU SM clock.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_NVLINKS_UP,
        help: "NVLinks of the GPU that are up.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_NVLINKS,
        help: "NVLinks of the GPU.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::COLLECTOR_NODES,
        help: "Nodes held by the store.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::COLLECTOR_SERIES,
        help: "Series held by the store.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::COLLECTOR_STORE_SAMPLES,
        help: "Samples held in the store's windows.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::COLLECTOR_STORE_BYTES,
        help: "The store's own estimate of its memory use.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::COLLECTOR_STORE_SAMPLE_BYTES,
        help: "Bytes of raw samples in the store (its series' rings, the nodes' tick timestamps and newest ticks), part of commwatch_collector_store_bytes.",
        kind: MetricType::GAUGE,
    },
];

/// Index of the store family `name` in [`FAMILIES`].
pub(super) fn family_index(name: &str) -> Option<usize> {
    FAMILIES.iter().position(|f| f.name == name)
}

/// The store families' descriptors, registered in the health registry so that it refuses another collector's
/// family of the same name. `collect` yields nothing: [`super::Exposition::render`] writes these families itself.
pub struct StoreDescs {
    descs: Vec<Desc>,
}

impl StoreDescs {
    pub fn new() -> Result<StoreDescs, prometheus::Error> {
        let descs = FAMILIES
            .iter()
            .map(|f| {
                Desc::new(
                    f.name.to_string(),
                    f.help.to_string(),
                    vec![],
                    HashMap::new(),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(StoreDescs { descs })
    }
}

impl Collector for StoreDescs {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        Vec::new()
    }
}

/// Index in [`FAMILIES`] of every family a sample may go to, resolved once per render.
pub(super) struct Ix {
    pub(super) node_up: usize,
    pub(super) last_seen: usize,
    pub(super) dropped: usize,
    pub(super) cpu: usize,
    pub(super) memory_used: usize,
    pub(super) memory_total: usize,
    pub(super) tx_total: usize,
    pub(super) rx_total: usize,
    pub(super) tx_rate: usize,
    pub(super) rx_rate: usize,
    pub(super) capacity: usize,
    pub(super) up: usize,
    pub(super) tx_packets: usize,
    pub(super) rx_packets: usize,
    pub(super) xmit_wait: usize,
    pub(super) errors: usize,
    pub(super) congestion: usize,
    pub(super) events: usize,
    /// Every family by name (GPU series).
    by_name: HashMap<&'static str, usize>,
}

impl Ix {
    pub(super) fn new() -> Option<Ix> {
        let by_name: HashMap<&'static str, usize> = FAMILIES
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name, i))
            .collect();
        let ix = |name: &str| by_name.get(name).copied();
        Some(Ix {
            node_up: ix(names::NODE_UP)?,
            last_seen: ix(names::NODE_LAST_SEEN_TIMESTAMP_SECONDS)?,
            dropped: ix(names::NODE_AGENT_DROPPED_BATCHES_TOTAL)?,
            cpu: ix(names::NODE_CPU_UTILIZATION_RATIO)?,
            memory_used: ix(names::NODE_MEMORY_USED_BYTES)?,
            memory_total: ix(names::NODE_MEMORY_TOTAL_BYTES)?,
            tx_total: ix(names::LINK_TRANSMIT_BYTES_TOTAL)?,
            rx_total: ix(names::LINK_RECEIVE_BYTES_TOTAL)?,
            tx_rate: ix(names::LINK_TRANSMIT_BYTES_PER_SECOND)?,
            rx_rate: ix(names::LINK_RECEIVE_BYTES_PER_SECOND)?,
            capacity: ix(names::LINK_CAPACITY_BYTES_PER_SECOND)?,
            up: ix(names::LINK_UP)?,
            tx_packets: ix(names::LINK_TRANSMIT_PACKETS_TOTAL)?,
            rx_packets: ix(names::LINK_RECEIVE_PACKETS_TOTAL)?,
            xmit_wait: ix(names::LINK_XMIT_WAIT_TICKS_TOTAL)?,
            errors: ix(names::LINK_ERRORS_TOTAL)?,
            congestion: ix(names::LINK_CONGESTION_TOTAL)?,
            events: ix(names::LINK_EVENTS_TOTAL)?,
            by_name,
        })
    }

    /// The family of a node-level series, if it is exported.
    pub(super) fn node_series(&self, s: &SeriesSnapshot) -> Option<usize> {
        match (s.key.metric.as_str(), s.kind) {
            ("cpu_utilization_ratio", SeriesKind::Gauge) => Some(self.cpu),
            ("memory_used_bytes", SeriesKind::Gauge) => Some(self.memory_used),
            ("memory_total_bytes", SeriesKind::Gauge) => Some(self.memory_total),
            // GPU series; other node series are kept in the store for the analysis but not exported.
            (m, _) => names::gpu_family(m).and_then(|f| self.by_name.get(f).copied()),
        }
    }

    /// The family of a link series and whether it carries the `counter` label; `None`: not exported (link
    /// gauges stay in the store for the analysis). A series named after its family is a link's counters of
    /// the family summed ([`super::apply_counter_detail`]): no `counter` label.
    pub(super) fn link_series(&self, s: &SeriesSnapshot) -> Option<(usize, bool)> {
        if !matches!(s.kind, SeriesKind::Counter { .. }) {
            return None;
        }
        if let Some(family) = names::summed_counter_family(&s.key.metric) {
            return self.by_name.get(family).map(|&i| (i, false));
        }
        Some(match link_counter_family(&s.key.metric) {
            LinkCounterFamily::TransmitPackets => (self.tx_packets, false),
            LinkCounterFamily::ReceivePackets => (self.rx_packets, false),
            LinkCounterFamily::XmitWait => (self.xmit_wait, false),
            LinkCounterFamily::Errors => (self.errors, true),
            LinkCounterFamily::Congestion => (self.congestion, true),
            LinkCounterFamily::TransmitBytes
            | LinkCounterFamily::ReceiveBytes
            | LinkCounterFamily::Other => (self.events, true),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_gpu_family_is_registered() {
        // An unregistered family is dropped silently.
        for n in names::ALL
            .iter()
            .filter(|n| n.starts_with("commwatch_gpu_"))
        {
            assert!(FAMILIES.iter().any(|f| f.name == *n), "{n} not in FAMILIES");
        }
        assert!(Ix::new().is_some(), "a family of Ix is not in FAMILIES");
    }
}
