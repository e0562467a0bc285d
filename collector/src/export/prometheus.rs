//! `/metrics`: a custom `prometheus::core::Collector` that renders from the store at scrape time (bounded work
//! per scrape, nothing per sample on the ingest path). Each node is copied under its own lock
//! ([`Store::snapshot`]) and formatted outside it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use prometheus::core::{Collector, Desc};
use prometheus::proto::{Counter, Gauge, LabelPair, Metric, MetricFamily, MetricType};
use prometheus::{Encoder, TextEncoder};

use super::health::Health;
use super::names::{self, link_counter_family, LinkCounterFamily};
use crate::ingest::domain::{LinkClass, SeriesKind};
use crate::store::{now_unix_ns, LinkSnapshot, NodeSnapshot, Store};

/// Link labels, in exposition order (NVLink adds `gpu` and `link`).
const LINK_LABELS: &[&str] = &["node", "class", "device", "port", "role"];

struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
}

const FAMILIES: &[Family] = &[
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
        help: "Error counters of the link, by agent counter name.",
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
        help: "Other counters of the link, by agent counter name.",
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
        help: "CPU utilisation (0..1); per core with the cpu label.",
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
        help: "NVLink transmit rate of the GPU, all links.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_NVLINK_RECEIVE_BYTES_PER_SECOND,
        help: "NVLink receive rate of the GPU, all links.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_LINK_GENERATION,
        help: "Current PCIe link generation of the GPU.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_LINK_GENERATION_MAX,
        help: "Maximum PCIe link generation of the GPU.",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_LINK_WIDTH,
        help: "Current PCIe link width of the GPU (lanes).",
        kind: MetricType::GAUGE,
    },
    Family {
        name: names::GPU_PCIE_LINK_WIDTH_MAX,
        help: "Maximum PCIe link width of the GPU (lanes).",
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
];

/// Renders the store's nodes as metric families at scrape time.
pub struct StoreCollector {
    store: Arc<Store>,
    descs: Vec<Desc>,
}

impl StoreCollector {
    pub fn new(store: Arc<Store>) -> Result<StoreCollector, prometheus::Error> {
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
        Ok(StoreCollector { store, descs })
    }
}

fn label(name: &str, value: &str) -> LabelPair {
    let mut l = LabelPair::default();
    l.set_name(name.to_string());
    l.set_value(value.to_string());
    l
}

/// Families being built, keyed by name.
struct Builder {
    fams: HashMap<&'static str, MetricFamily>,
}

impl Builder {
    fn new() -> Builder {
        let fams = FAMILIES
            .iter()
            .map(|f| {
                let mut mf = MetricFamily::default();
                mf.set_name(f.name.to_string());
                mf.set_help(f.help.to_string());
                mf.set_field_type(f.kind);
                (f.name, mf)
            })
            .collect();
        Builder { fams }
    }

    fn add(&mut self, name: &'static str, labels: Vec<LabelPair>, value: f64) {
        let Some(mf) = self.fams.get_mut(name) else {
            return;
        };
        let mut m = Metric::default();
        m.set_label(labels);
        if mf.get_field_type() == MetricType::COUNTER {
            let mut c = Counter::default();
            c.set_value(value);
            m.set_counter(c);
        } else {
            let mut g = Gauge::default();
            g.set_value(value);
            m.set_gauge(g);
        }
        mf.mut_metric().push(m);
    }

    fn finish(self) -> Vec<MetricFamily> {
        self.fams
            .into_values()
            .filter(|f| !f.get_metric().is_empty())
            .collect()
    }
}

fn link_labels(node: &str, l: &LinkSnapshot) -> Vec<LabelPair> {
    let mut v: Vec<LabelPair> = LINK_LABELS
        .iter()
        .zip([node, l.class.as_str(), &l.device, &l.port, l.role.as_str()])
        .map(|(n, v)| label(n, v))
        .collect();
    if l.class == LinkClass::Nvlink {
        v.push(label("gpu", l.gpu.as_deref().unwrap_or("")));
        v.push(label("link", l.link.as_deref().unwrap_or("")));
    }
    v
}

fn is_up(state: &str) -> bool {
    let s = state.to_ascii_lowercase();
    (s.contains("active") && !s.contains("inactive")) || s == "up" || s.contains("linkup")
}

/// (family, counter label, agent labels) already exported for a link.
type SeenKey<'a> = (&'static str, &'a str, &'a [(String, String)]);

/// Appends one node's metrics.
fn add_node(b: &mut Builder, n: &NodeSnapshot) {
    let node = [label("node", &n.name)];
    b.add(
        names::NODE_UP,
        node.to_vec(),
        if n.connected { 1.0 } else { 0.0 },
    );
    b.add(
        names::NODE_LAST_SEEN_TIMESTAMP_SECONDS,
        node.to_vec(),
        n.last_seen_unix_ns as f64 / 1e9,
    );
    b.add(
        names::NODE_AGENT_DROPPED_BATCHES_TOTAL,
        node.to_vec(),
        n.agent_dropped_batches_total as f64,
    );
    let mut seen: HashSet<(&'static str, Vec<(String, String)>)> = HashSet::new();
    for s in &n.series {
        let fam = match (s.key.metric.as_str(), s.kind) {
            ("cpu_utilization_ratio", SeriesKind::Gauge) => names::NODE_CPU_UTILIZATION_RATIO,
            ("memory_used_bytes", SeriesKind::Gauge) => names::NODE_MEMORY_USED_BYTES,
            ("memory_total_bytes", SeriesKind::Gauge) => names::NODE_MEMORY_TOTAL_BYTES,
            // GPU series; other node series are kept in the store for the analysis but not exported.
            (m, _) => match names::gpu_family(m) {
                Some(f) => f,
                None => continue,
            },
        };
        if !seen.insert((fam, s.key.labels.clone())) {
            continue;
        }
        let mut labels = node.to_vec();
        labels.extend(s.key.labels.iter().map(|(k, v)| label(k, v)));
        b.add(fam, labels, s.value);
    }
    for l in &n.links {
        let base = link_labels(&n.name, l);
        if let Some(v) = l.tx_bytes_total {
            b.add(names::LINK_TRANSMIT_BYTES_TOTAL, base.clone(), v as f64);
        }
        if let Some(v) = l.rx_bytes_total {
            b.add(names::LINK_RECEIVE_BYTES_TOTAL, base.clone(), v as f64);
        }
        if let Some(v) = l.tx_bytes_per_second {
            b.add(names::LINK_TRANSMIT_BYTES_PER_SECOND, base.clone(), v);
        }
        if let Some(v) = l.rx_bytes_per_second {
            b.add(names::LINK_RECEIVE_BYTES_PER_SECOND, base.clone(), v);
        }
        if let Some(v) = l.capacity_bytes_per_second {
            b.add(names::LINK_CAPACITY_BYTES_PER_SECOND, base.clone(), v);
        }
        let mut up = base.clone();
        up.push(label("state", &l.state));
        b.add(names::LINK_UP, up, if is_up(&l.state) { 1.0 } else { 0.0 });
        let mut seen: HashSet<SeenKey<'_>> = HashSet::new();
        for s in &l.series {
            if !matches!(s.kind, SeriesKind::Counter { .. }) {
                // Link gauges stay in the store for the analysis; not exported.
                continue;
            }
            let metric = s.key.metric.as_str();
            let (fam, with_counter) = match link_counter_family(metric) {
                LinkCounterFamily::TransmitPackets => (names::LINK_TRANSMIT_PACKETS_TOTAL, false),
                LinkCounterFamily::ReceivePackets => (names::LINK_RECEIVE_PACKETS_TOTAL, false),
                LinkCounterFamily::XmitWait => (names::LINK_XMIT_WAIT_TICKS_TOTAL, false),
                LinkCounterFamily::Errors => (names::LINK_ERRORS_TOTAL, true),
                LinkCounterFamily::Congestion => (names::LINK_CONGESTION_TOTAL, true),
                LinkCounterFamily::TransmitBytes
                | LinkCounterFamily::ReceiveBytes
                | LinkCounterFamily::Other => (names::LINK_EVENTS_TOTAL, true),
            };
            // Two agent names mapping to one family and label set: the first wins (no duplicate samples).
            if !seen.insert((fam, if with_counter { metric } else { "" }, &s.key.labels)) {
                continue;
            }
            let mut labels = base.clone();
            if with_counter {
                labels.push(label("counter", metric));
            }
            labels.extend(s.key.labels.iter().map(|(k, v)| label(k, v)));
            b.add(fam, labels, s.value);
        }
    }
}

/// Metric families for a set of node snapshots (no store gauges). Used by the collector and by tests.
pub fn node_families(nodes: &[NodeSnapshot]) -> Vec<MetricFamily> {
    let mut b = Builder::new();
    for n in nodes {
        add_node(&mut b, n);
    }
    b.finish()
}

impl Collector for StoreCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let nodes = self.store.snapshot(now_unix_ns());
        let mut b = Builder::new();
        for n in &nodes {
            add_node(&mut b, n);
        }
        let m = self.store.memory();
        b.add(names::COLLECTOR_NODES, vec![], m.nodes as f64);
        b.add(names::COLLECTOR_SERIES, vec![], m.series as f64);
        b.add(names::COLLECTOR_STORE_SAMPLES, vec![], m.samples as f64);
        b.add(names::COLLECTOR_STORE_BYTES, vec![], m.bytes as f64);
        b.finish()
    }
}

/// Renders the whole `/metrics` text (store families and collector health). CPU-bound: call it off the async
/// workers (`spawn_blocking`) for large fleets.
pub fn render(health: &Health) -> Result<String, prometheus::Error> {
    let started = Instant::now();
    let families = health.registry.gather();
    let mut out = Vec::with_capacity(64 * 1024);
    TextEncoder::new().encode(&families, &mut out)?;
    health
        .scrape_seconds
        .observe(started.elapsed().as_secs_f64());
    String::from_utf8(out).map_err(|e| prometheus::Error::Msg(e.to_string()))
}

/// The `Content-Type` of [`render`]'s output.
pub fn content_type() -> String {
    TextEncoder::new().format_type().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_gpu_family_is_registered() {
        // An unregistered family is dropped silently by `Builder::add`.
        for n in names::ALL
            .iter()
            .filter(|n| n.starts_with("commwatch_gpu_"))
        {
            assert!(FAMILIES.iter().any(|f| f.name == *n), "{n} not in FAMILIES");
        }
    }

    #[test]
    fn link_up_states() {
        assert!(is_up("ACTIVE"));
        assert!(is_up("4: ACTIVE"));
        assert!(is_up("up"));
        assert!(!is_up("DOWN"));
        assert!(!is_up("INACTIVE"));
        assert!(!is_up(""));
    }
}
